#!/usr/bin/env bash
# Compares the library's public API with its last published shape (0.1.0, commit 1d4a554)
# using cargo-semver-checks, and says which release the changes need: run it before a
# release, and check that CHANGELOG.md's "Breaking" entries cover what it finds.
#
# Not part of the test command: installing the tool compiles for several minutes, and it
# reads rustdoc's JSON output, which it unlocks on the stable compiler itself — the test
# command keeps the stable compiler in stable mode (scripts/test.sh).
#
# Usage: scripts/semver.sh [BASELINE-REV]   (exit 0: no semver-breaking change for the
# version in Cargo.toml; before 1.0 a breaking change needs the next minor, 0.2.0)
set -euo pipefail
cd "$(dirname "$0")/.."
baseline="${1:-1d4a554}"
if ! command -v cargo-semver-checks >/dev/null; then
    cargo install cargo-semver-checks --locked
fi
exec cargo semver-checks -p redmutex --all-features --baseline-rev "$baseline"
