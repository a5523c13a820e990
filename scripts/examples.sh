#!/usr/bin/env bash
# Runs every library example against a private redis-server that it starts on a free
# loopback port and stops at the end. Installs redis-server first if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
ensure_redis
cargo build -q -p testkit --bin with-redis -p redmutex --examples
examples="must_acquire try_once_or_retry ttl_refresh metadata multi_key"
exec target/debug/with-redis bash -c '
    set -e
    for example in '"$examples"'; do
        echo
        echo "=== example: $example"
        target/debug/examples/$example
    done
    echo
    echo "=== all examples ran against $REDIS_URL"
'
