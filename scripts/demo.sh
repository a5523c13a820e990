#!/usr/bin/env bash
# The main job: `redmutex demo` — workers contending for a lock, a kept-alive lease
# outliving its TTL, a lost lock detected and its work cancelled — against a private
# redis-server the demo starts and stops itself. Installs redis-server first if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
ensure_redis
# scripts/test.sh has built it already, as the tests do (REDMUTEX_PREBUILT); on its own,
# the demo builds the command line unoptimised and without debug info (the `demo`
# profile): a newcomer's first command takes a minute or two, not five.
if [ -n "${REDMUTEX_PREBUILT:-}" ]; then
    exec target/debug/redmutex demo "$@"
fi
cargo build -q --profile demo -p redmutex-cli
exec target/demo/redmutex demo "$@"
