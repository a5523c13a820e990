#!/usr/bin/env bash
# Runs every library example against private redis-servers (one, five Redlock nodes, and a
# six-node cluster) that it starts on free loopback ports and stops at the end. Installs
# redis-server first if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
ensure_redis
# scripts/test.sh has built them already (REDMUTEX_PREBUILT): no second build with other
# features.
if [ -z "${REDMUTEX_PREBUILT:-}" ]; then
    cargo build -q -p testkit --bin with-redis
    # Unoptimised, as scripts/test.sh builds them: they run in moments either way.
    cargo build -q -p redmutex --examples --all-features \
        --config 'profile.dev.package.redmutex.opt-level=0'
fi
examples="must_acquire try_once_or_retry ttl_refresh metadata multi_key keep_alive fenced_storage guarded_writes forced_release polite_revocation semaphore fair_lock rw_lock election at_most_once_per_period redlock blocking"
echo
echo "=== example: cluster_wake_up (a private six-node cluster)"
target/debug/with-redis --cluster target/debug/examples/cluster_wake_up
exec target/debug/with-redis --nodes 5 bash -c '
    set -e
    for example in '"$examples"'; do
        echo
        echo "=== example: $example"
        target/debug/examples/$example
    done
    echo
    echo "=== all examples ran against $REDIS_URL (Redlock: $REDLOCK_URLS)"
'
