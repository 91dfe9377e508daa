#!/usr/bin/env bash
# A Sample Factory 2.1.1 agent scored twice: by its own enjoy, and by ours after launch.import_sf
# (issue 74). Trains Sample Factory on doom_basic with its defaults for the scenario (the full-size
# model: conv 32-64-128, fc 512, GRU 512) unless OUT_DIR/sf/sf_doom_basic exists, plays EPISODES
# episodes with its enjoy, imports its latest checkpoint into OUT_DIR/ours and plays EPISODES with
# launch.enjoy; prints both scores (mean, population std, in game units: Sample Factory scales
# doom_basic's reward by 0.01, so its figures are multiplied by 100 here) and writes them to
# OUT_DIR/scores.json.
#
#   benchmarks/sf_import_score.sh OUT_DIR [FRAMES] [EPISODES]
#
# FRAMES (default 1000000) env frames of training; EPISODES (default 20). SF_PYTHON (default
# sfvenv/bin/python): a Python with Sample Factory in its own venv, as benchmarks/against_sf.sh
# installs it. SF_ARGS: more of its training flags (a busy machine: "--serial_mode=True
# --async_rl=False" runs it in one process). Both enjoys sample their actions (neither is greedy).
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 3 ]; then
  echo "usage: $0 OUT_DIR [FRAMES] [EPISODES]" >&2
  exit 2
fi
out=$1 frames=${2:-1000000} episodes=${3:-20}
sf_python=${SF_PYTHON:-sfvenv/bin/python}
read -r -a sf_args <<< "${SF_ARGS:-}"
cd "$(dirname "$0")/.."
mkdir -p "$out/sf"
out=$(cd "$out" && pwd)
exp=sf_doom_basic
# Sample Factory 2.1.1 predates torch 2.6's weights-only torch.load, which refuses its checkpoints
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
if [ ! -e "$out/sf/$exp" ]; then
  "$sf_python" -m sf_examples.vizdoom.train_vizdoom --env=doom_basic --device=cpu --num_workers=2 \
    --num_envs_per_worker=8 --train_for_env_steps="$frames" --seed=1 --experiment="$exp" \
    --train_dir="$out/sf" "${sf_args[@]}" > "$out/sf_train.out" 2>&1
fi
# (its enjoy_vizdoom exits with its result tuple, status 1, even when it played every episode: the
# count of its per-episode lines is checked below instead)
"$sf_python" -m sf_examples.vizdoom.enjoy_vizdoom --env=doom_basic --experiment="$exp" --train_dir="$out/sf" \
  --device=cpu --no_render --max_num_episodes="$episodes" > "$out/sf_enjoy.out" 2>&1 || true
# the checkpoint its enjoy played (its latest when it started)
played=$(grep -o "Loading state from checkpoint [^ ]*\.pth" "$out/sf_enjoy.out" | tail -1 | cut -d" " -f5)
rm -rf "$out/ours"
python -m launch.import_sf sf_dir="$out/sf/$exp" run_dir="$out/ours" checkpoint="$played" > "$out/import.out"
python -m launch.enjoy run_dir="$out/ours" enjoy.episodes="$episodes" > "$out/ours_enjoy.out"
python - "$out" "$episodes" <<'EOF'
import json, re, statistics, sys
out = sys.argv[1]
# its enjoy logs, after each episode, the mean reward of the episodes so far ("Avg episode reward: M", to 3
# decimals of its scaled reward): episode k's reward is k M_k - (k - 1) M_(k-1), exact to (2k - 1) x 0.05
# game points; the mean over all of them, M_n, to 0.05
means = [100 * float(m) for m in re.findall(r"Avg episode reward: (-?[\d.]+)", open(f"{out}/sf_enjoy.out").read())]
if len(means) != int(sys.argv[2]):
    sys.exit(f"Sample Factory's enjoy played {len(means)} episodes, not {sys.argv[2]}: see {out}/sf_enjoy.out")
sf = [k * m - (k - 1) * (means[k - 2] if k > 1 else 0.0) for k, m in enumerate(means, 1)]
ours = json.loads(open(f"{out}/ours_enjoy.out").read().strip().splitlines()[-1])
checkpoint = open(f"{out}/import.out").read().split()[1]
scores = {"checkpoint": checkpoint, "episodes": len(sf),
          "sample_factory": {"mean": means[-1], "std": statistics.pstdev(sf), "episode_rewards": sf},
          "ours": {"mean": ours["reward_mean"], "std": ours["reward_std"], "episodes": ours["episodes"]}}
json.dump(scores, open(f"{out}/scores.json", "w"), indent=1)
print(f"{checkpoint}\nSample Factory's enjoy: {scores['sample_factory']['mean']:.1f} +- {scores['sample_factory']['std']:.1f} "
      f"({len(sf)} episodes)\nours after import:      {ours['reward_mean']:.1f} +- {ours['reward_std']:.1f} "
      f"({ours['episodes']} episodes)")
EOF
