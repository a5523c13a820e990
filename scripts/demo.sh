#!/usr/bin/env bash
# The main job: `redmutex demo` — workers contending for a lock, a kept-alive lease
# outliving its TTL, a lost lock detected and its work cancelled — against a private
# redis-server the demo starts and stops itself. Installs redis-server first if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
ensure_redis
# scripts/test.sh has built it already (REDMUTEX_PREBUILT).
if [ -z "${REDMUTEX_PREBUILT:-}" ]; then
    cargo build -q -p redmutex-cli
fi
exec target/debug/redmutex demo "$@"
