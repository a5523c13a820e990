#!/usr/bin/env bash
# The main job: `redmutex demo` — workers contending for a lock, a kept-alive lease
# outliving its TTL, a lost lock detected and its work cancelled — against a private
# redis-server the demo starts and stops itself. Installs redis-server first if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
ensure_redis
cargo build -q -p redmutex-cli
exec target/debug/redmutex demo "$@"
