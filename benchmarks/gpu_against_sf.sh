#!/usr/bin/env bash
# benchmarks/gpu_against_sf.sh [SECONDS]: one GPU node's training frames/s, ours against Sample
# Factory 2.1.1, on the same layout, back to back (ours first), on doom_basic.
#
# Layout: every core but two as rollout workers (the learner and one policy worker get the two),
# 16 envs per worker in two double-buffered groups of 8 (Sample Factory's worker_num_splits=2 is its
# default), each trainer's own defaults otherwise. Ours: `launch.bench bench.modes=[async]`, the train
# phase measured for SECONDS (60) after a 10 s warm-up. Sample Factory: its VizDoom example run for
# 10 + SECONDS + 15 s (the 15 s its start-up takes here), then stopped; its own last 60-second figure
# ("Fps is (10 sec: .., 60 sec: ..") is what is printed.
#
# The same pair on a CPU node (issue 56's figure: the default 2-core layout):
#   DEVICE=cpu WORKERS=2 ENVS=8 SF_PYTHON=sfvenv/bin/python benchmarks/gpu_against_sf.sh 60
#
# SF_PYTHON (/tmp/sfvenv/bin/python) is the Python that has sample-factory and vizdoom;
# SF_PYTHONPATH, if set, is its PYTHONPATH (ours runs with the caller's). PYTHON (python3) runs ours.
set -u
secs=${1:-60}
workers=${WORKERS:-$(($(nproc) > 3 ? $(nproc) - 2 : 1))}
envs=${ENVS:-16}
device=${DEVICE:-cuda}  # DEVICE=cpu walks the same steps without a GPU (to check this script)
sf_device=$([ "$device" = cpu ] && echo cpu || echo gpu)
runs=$(mktemp -d /tmp/gpu_against_sf.XXXX)
cd "$(dirname "$0")/.."

echo "== ours: $workers workers x $envs envs, train.device=$device, train phase ${secs} s"
"${PYTHON:-python3}" -m launch.bench "hydra.run.dir=$runs/ours" env=doom_basic "train.device=$device" \
  "sampler.num_workers=$workers" "sampler.envs_per_worker=$envs" "bench.modes=[async]" bench.warmup_s=10 \
  "bench.seconds=$secs" 2>&1 | grep -E "env frames/s|error"

echo "== Sample Factory 2.1.1: $workers workers x $envs envs, --device=$sf_device, $((secs + 25)) s"
cd "$runs" || exit 1
ls /dev/shm >"$runs/shm.before"
# a process group of its own: its VizDoom engines ignore SIGTERM and SIGINT and must be killed
PYTHONPATH=${SF_PYTHONPATH:-${PYTHONPATH:-}} setsid "${SF_PYTHON:-/tmp/sfvenv/bin/python}" -m \
  sf_examples.vizdoom.train_vizdoom --env=doom_basic "--device=$sf_device" "--num_workers=$workers" \
  "--num_envs_per_worker=$envs" --train_for_env_steps=1000000000 --experiment=sf "--train_dir=$runs" \
  >"$runs/sf.log" 2>&1 &
sf=$!
sleep $((secs + 25))
kill -INT -- -"$sf" 2>/dev/null
sleep 10
kill -KILL -- -"$sf" 2>/dev/null
wait "$sf" 2>/dev/null
# the segments its killed engines and semaphores leave behind (those that were there before stay)
ls /dev/shm | grep -E "^(ViZDoom|sem\.mp-)" | grep -v -x -F -f "$runs/shm.before" | sed "s|^|/dev/shm/|" | xargs -r rm -f
cd - >/dev/null || exit 1
grep -a "Fps is" "$runs/sf.log" | tail -n 3 | sed 's/\x1b\[[0-9;]*m//g'
grep -a -E "Error|error" "$runs/sf.log" | head -n 3
rm -rf "$runs"
