#!/usr/bin/env bash
# launch.bench of this checkout against another (e.g. a `git worktree` of the commit before a
# change), in ABBA order on one machine so that drift over the runs cancels; prints each run's
# frames/s per phase and, last, this checkout's mean over the other's per phase. Usage:
#   benchmarks/abba_bench.sh OTHER_TREE OUT_DIR [launch.bench overrides...]
set -euo pipefail
other=$(realpath "${1:?usage: abba_bench.sh OTHER_TREE OUT_DIR [overrides]}")
out=$(realpath -m "${2:?usage: abba_bench.sh OTHER_TREE OUT_DIR [overrides]}")
shift 2
this=$(realpath "$(dirname "$0")/..")
mkdir -p "$out"
run() {  # TREE LABEL [overrides]
  local tree=$1 label=$2
  shift 2
  (cd "$tree" && python -m launch.bench hydra.run.dir="$out/$label" "$@") > "$out/$label.out" 2>&1
  grep '^{' "$out/$label.out" | tail -n 1 > "$out/$label.json"
  python -c 'import json, sys; r = json.load(open(sys.argv[1])); print(sys.argv[2], {k: v for k, v in r.items() if k.endswith("fps")})' \
    "$out/$label.json" "$label ($tree)"
}
run "$other" A1 "$@"
run "$this" B1 "$@"
run "$this" B2 "$@"
run "$other" A2 "$@"
python - "$out" <<'PY'
import json, os, sys
r = {k: json.load(open(os.path.join(sys.argv[1], k + ".json"))) for k in ("A1", "B1", "B2", "A2")}
for phase in ("pure_sim_fps", "sampler_fps", "train_fps"):
    a, b = (r["A1"][phase] + r["A2"][phase]) / 2, (r["B1"][phase] + r["B2"][phase]) / 2
    print(f"{phase}: other {a:,.0f}, this {b:,.0f}, this/other {b / a:.3f}")
PY
