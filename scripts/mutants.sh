#!/usr/bin/env bash
# Plants each known bug (scripts/mutants.py) in a copy of the tree, one at a time, and
# sweeps the simulator's CI budget of seeds over it: how many seeds each mutant fails, by
# rule, and by the primitive of each failing seed's first violation. A rule or a path is
# covered when its mutant fails at least 1 % of the seeds (docs/RELIABILITY.md). Not part
# of scripts/test.sh: about three minutes a mutant on two cores.
#
#   bash scripts/mutants.sh                  # every mutant, the budget's 10,000 seeds
#   bash scripts/mutants.sh A-lock C-read    # only these
#   RUNS=2000 bash scripts/mutants.sh        # fewer seeds
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
runs=${RUNS:-10000}
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    mapfile -t names < <(python3 scripts/mutants.py --list | cut -f1)
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Its own target directory: the checkout's builds stay as they are.
export CARGO_TARGET_DIR=$root/target/mutants
for name in "${names[@]}"; do
    rm -rf "${scratch:?}/tree"
    mkdir "$scratch/tree"
    # The working tree as it is (uncommitted changes too), without build output.
    git ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' file; do [ -e "$file" ] && printf '%s\0' "$file"; done \
        | xargs -0 cp --parents -t "$scratch/tree"
    python3 scripts/mutants.py "$scratch/tree" "$name"
    (cd "$scratch/tree" && cargo build -q --release -p redmutex-sim)
    "$CARGO_TARGET_DIR/release/redmutex-sim" --runs "$runs" --short --every-rule \
        > "$scratch/out" 2>&1 || true
    python3 - "$name" "$runs" "$scratch/out" <<'PY'
import collections, re, sys
name, runs, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
seeds = collections.defaultdict(list)
for line in open(path):
    m = re.match(r"seed (\d+): \[\s*([\d.]+)\] ([\w-]+): (.*)", line)
    if m:
        seeds[int(m[1])].append((float(m[2]), m[3], m[4]))
rules, kinds = collections.Counter(), collections.Counter()
for found in seeds.values():
    rules.update({rule for _, rule, _ in found})
    _, _, text = min(found)
    kind = (re.search(r"in line for (\w+)", text) or re.search(r"waited for (\w+)", text)
            or re.search(r"(lock|permit|read|write|fair|leader) (careful|lease|naive|periodic|abandon)", text))
    kinds[kind[1] if kind else "?"] += 1
share = 100 * len(seeds) / runs
print(f"{name}: {len(seeds)} of {runs} seeds ({share:.1f} %){'' if share >= 1 else '  BELOW 1 %'}")
print(f"  by rule: {dict(rules.most_common())}")
print(f"  by the first violation's primitive: {dict(kinds.most_common())}")
PY
done
