#!/usr/bin/env bash
# What evaluation during training costs: training frames/s (summary.json's train_fps) with
# eval.every_frames=EVERY against eval.every_frames=0, alternated PAIRS times on the same layout
# (off-on, then on-off, ...), then each pair's ratio and the mean ratio.
#
#   benchmarks/eval_cost.sh OUT_DIR [FRAMES [EVERY [PAIRS [overrides...]]]]
#
# Defaults: 2,000,000 frames of doom_basic per run, a round every 500,000 frames (10 episodes),
# 2 pairs. Extra arguments are Hydra overrides for both sides (e.g. env=doom_health_gathering).
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [FRAMES [EVERY [PAIRS [overrides...]]]]" >&2
  exit 2
fi
out=$1 frames=${2:-2000000} every=${3:-500000} pairs=${4:-2}
shift $(( $# < 4 ? $# : 4 ))
cd "$(dirname "$0")/.."
mkdir -p "$out"
for p in $(seq 1 "$pairs"); do
  # ABBA: the second pair runs on first, so a drift along the queue does not favour one side
  order="off on"
  [ $((p % 2)) -eq 0 ] && order="on off"
  for side in $order; do
    extra=("eval.every_frames=0")  # off must say so: evaluation is on by default
    [ "$side" = on ] && extra=("eval.every_frames=$every")
    python -m launch.train hydra.run.dir="$out/${side}_$p" train.max_env_frames="$frames" "${extra[@]}" "$@" \
      > "$out/${side}_$p.out" 2>&1
  done
done
python - "$out" "$pairs" <<'PY'
import json, sys
out, pairs = sys.argv[1], int(sys.argv[2])
ratios = []
for p in range(1, pairs + 1):
    off, on = (json.load(open(f"{out}/{side}_{p}/summary.json")) for side in ("off", "on"))
    ratios.append(on["train_fps"] / off["train_fps"])
    rounds = (on.get("eval") or {}).get("rounds")
    print(f"pair {p}: train_fps off {off['train_fps']:.0f}, on {on['train_fps']:.0f} ({rounds} rounds): "
          f"{ratios[-1]:.3f}")
print(f"mean ratio on/off {sum(ratios) / len(ratios):.3f} over {pairs} pairs")
PY
