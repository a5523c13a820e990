# Sourced by the other scripts: makes sure redis-server, redis-cli (and openssl, which the
# TLS tests use to make their certificates) are on PATH, installing Debian's packages when
# they are missing (needs root or sudo, and apt-get).
ensure_redis() {
    if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 \
        && command -v openssl >/dev/null 2>&1; then
        return 0
    fi
    echo "redis-server/redis-cli/openssl not found: installing Debian's redis-server, redis-tools, openssl" >&2
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        sudo="sudo"
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: no apt-get here; install redis-server (>= 6.2) yourself and retry" >&2
        return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends redis-server redis-tools openssl >/dev/null
    # Debian's package may start a system service; redmutex never uses it: the demo and
    # the tests start their own private servers on free loopback ports.
    command -v redis-server >/dev/null 2>&1
}
