#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, integration and doc tests. The tests
# start their own redis-server processes; this installs redis-server first if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
ensure_redis
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
