#!/usr/bin/env bash
# The parameter checksums of two deterministic runs (sampler.mode=deterministic: bit-for-bit for a
# seed on CPU), CartPole and doom_basic, seed 0: equal before and after a change that must not
# change behaviour (a restructuring). Usage: benchmarks/det_checksums.sh OUT_DIR [TREE]
# TREE: the checkout to run (default: this one), e.g. a `git worktree` of the commit before.
set -euo pipefail
out=$(realpath -m "${1:?usage: det_checksums.sh OUT_DIR [TREE]}")
tree=${2:-$(dirname "$0")/..}
cd "$tree"
mkdir -p "$out"
gym=(env=gym env.id=CartPole-v1 model.fc_size=64 model.hidden_size=64 sampler.num_workers=1
     sampler.envs_per_worker=8 sampler.rollout=16 sampler.batch_size=128 algo.lr=0.001
     sampler.mode=deterministic train.max_env_frames=20000 seed=0)
doom=(env=doom_basic sampler.num_workers=2 sampler.envs_per_worker=4 sampler.mode=deterministic
      train.learner_threads=1 train.max_env_frames=20000 seed=0)
python -m launch.train "${gym[@]}" hydra.run.dir="$out/cartpole" > "$out/cartpole.out" 2>&1
python -m launch.train "${doom[@]}" hydra.run.dir="$out/doom_basic" > "$out/doom_basic.out" 2>&1
for run in cartpole doom_basic; do
  python - "$out/$run/summary.json" "$run" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]}: outcome {s['outcome']}, frames {s['env_frames']}, version {s['policy_version']}, "
      f"checksum {s['param_checksums'][0]}")
PY
done
