#!/usr/bin/env bash
# benchmarks/gpu_check.sh [OUT_DIR]: what only a GPU can show (docs/gpu.md, "What has and has not
# run"), in one pass of about 6 minutes on a one-GPU node. Each step has its own time limit, writes
# its whole output to OUT_DIR/<step>.log and goes on after a failure; the lines printed here are the
# step's exit code, its seconds and the lines that carry its figures.
#
#   tests       tests/test_gpu.py (doom_basic learns with inference on the GPU; two ranks share one
#               GPU over gloo; the NCCL test needs two GPUs and says so when it skips)
#   bench_gpu   launch.bench on doom_basic, every core, train.device=cuda: simulate / sample / train
#   bench_cpu   the same layout's train phase with train.device=cpu, on the same machine (the ratio)
#   bench_fp32  the train phase on the GPU with train.precision=fp32 (bf16 is what auto picks)
#   bench_batch128  the train phase on the GPU with sampler.batch_size=128 (a node's share of the
#               world's batch at 8 nodes under sync.global_batch): does the learner's iteration shrink
#               with its batch (then about the same frames/s as bench_gpu), or is it bound by kernel
#               launches (then about 8x fewer)?
#   bench_async the train phase on the GPU alone (bf16, the default 1,024-sample batch): the baseline
#               bench_batch128 is read against, measured right before it
#   det_*       sampler.mode=deterministic on the GPU: a Box env twice on one layout and once on
#               another (tests/test_continuous_runs.py's recipe): the checksums say what repeats
#   population  population.size=2 on the GPU (each member's own stream, feed and model on the device)
#   atari_pong  env=atari_pong as a user starts it on a GPU node (sampler.num_workers=auto, the Atari
#               preset otherwise) for ATARI_S seconds (240; 10M frames end it sooner): frames/s, the
#               score at each million frames and the first +18 (launch.curves); its logs, tb/ and
#               eval.jsonl land in OUT_DIR/atari_pong/ (ale-py must be installed)
#   atari_breakout  the same on env=atari_breakout (first >= 20), ATARI_S=330 reaches its 10M frames
#
# STEPS names the steps to run (default: all but the atari_* ones, about 6 minutes), e.g.
# STEPS="bench_async bench_batch128 atari_pong" (2026-11-27: 5.5 minutes on an H100).
# PYTHON (python3) runs everything; SECONDS_PER_PHASE (12) and WARMUP_S (6) size the benchmarks,
# ATARI_S (240) the Pong run;
# DEVICE=cpu walks the same steps on a machine without a GPU (to check this script).
set -u
OUT_DIR=${1:-/tmp/gpu_check}
PY=${PYTHON:-python3}
DEV=${DEVICE:-cuda}
SECS=${SECONDS_PER_PHASE:-12}
WARM=${WARMUP_S:-6}
ATARI_S=${ATARI_S:-240}
STEPS=${STEPS:-tests bench_gpu bench_fp32 bench_async bench_batch128 bench_cpu det_1x8_a det_1x8_b det_2x4 population}
RUNS=$(mktemp -d /tmp/gpu_check_runs.XXXX)
mkdir -p "$OUT_DIR"
ls /dev/shm >"$OUT_DIR/.shm.before"
cd "$(dirname "$0")/.."

wanted() { [[ " $STEPS " == *" $1 "* ]]; }

step() {  # step NAME LIMIT_S COMMAND...: runs only when STEPS names it
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  wanted "$name" || return 0
  timeout -k 10 "$limit" "$@" >"$OUT_DIR/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc, $((SECONDS - t0)) s"
  grep -E "passed|failed|skipped|error|^\{|frames/s|checksum|outcome|SKIPPED|FAILED|Error" "$OUT_DIR/$name.log" | tail -n 8
}

summary_of() {  # the figures of one run's summary.json
  [ -f "$1/summary.json" ] || return 0
  "$PY" -c "import json,sys; s=json.load(open(sys.argv[1]+'/summary.json')); \
print({k: s.get(k) for k in ('outcome','env_frames','policy_version','fps','param_checksums','mean_episode_reward')})" "$1"
}

{
  date -u +%FT%TZ
  git log -1 --format='commit %h' 2>/dev/null
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
  echo "cores $(nproc)"
  df -h /dev/shm | tail -n 1
} 2>&1 | tee "$OUT_DIR/machine.log"

BENCH=(env=doom_basic sampler.num_workers=auto sampler.envs_per_worker=16 "bench.warmup_s=$WARM" "bench.seconds=$SECS")
PENDULUM=(env=gym env.id=Pendulum-v1 model=feedforward sampler.num_workers=1 sampler.envs_per_worker=4
          sampler.rollout=16 sampler.batch_size=128 train.status_every_s=1 sampler.mode=deterministic
          train.max_env_frames=1200 train.learner_threads=1 algo.epochs=2 algo.minibatches=2 "train.device=$DEV")

step tests 240 "$PY" -m pytest -q -p no:cacheprovider -rs -s --durations=0 tests/test_gpu.py
step bench_gpu 150 "$PY" -m launch.bench "hydra.run.dir=$RUNS/bench_gpu" "${BENCH[@]}" "train.device=$DEV"
step bench_fp32 60 "$PY" -m launch.bench "hydra.run.dir=$RUNS/bench_fp32" "${BENCH[@]}" "train.device=$DEV" \
  train.precision=fp32 "bench.modes=[async]"
step bench_async 60 "$PY" -m launch.bench "hydra.run.dir=$RUNS/bench_async" "${BENCH[@]}" "train.device=$DEV" \
  "bench.modes=[async]"
step bench_batch128 60 "$PY" -m launch.bench "hydra.run.dir=$RUNS/bench_batch128" "${BENCH[@]}" "train.device=$DEV" \
  sampler.batch_size=128 "bench.modes=[async]"
step bench_cpu 60 "$PY" -m launch.bench "hydra.run.dir=$RUNS/bench_cpu" "${BENCH[@]}" train.device=cpu "bench.modes=[async]"
for run in det_1x8_a det_1x8_b; do
  step "$run" 90 "$PY" -m launch.train "hydra.run.dir=$RUNS/$run" "${PENDULUM[@]}" sampler.envs_per_worker=8
  summary_of "$RUNS/$run"
done
step det_2x4 90 "$PY" -m launch.train "hydra.run.dir=$RUNS/det_2x4" "${PENDULUM[@]}" sampler.num_workers=2
summary_of "$RUNS/det_2x4"
step population 90 "$PY" -m launch.train "hydra.run.dir=$RUNS/population" env=gym env.id=CartPole-v1 \
  model.fc_size=64 model.hidden_size=64 sampler.num_workers=2 sampler.envs_per_worker=4 sampler.rollout=16 \
  sampler.batch_size=128 train.status_every_s=1 population.size=2 train.max_env_frames=8000 "train.device=$DEV"
summary_of "$RUNS/population"
grep -h -E "ready on|device|precision" "$RUNS"/population/train*.log 2>/dev/null | head -n 4
atari() {  # atari GAME THRESHOLD: one Atari run on the device as a user starts it, then its curve
  local name=atari_$1
  step "$name" $((ATARI_S + 90)) "$PY" -m launch.train "hydra.run.dir=$OUT_DIR/$name" "env=$name" \
    "train.device=$DEV" sampler.num_workers=auto train.max_env_frames=10000000 "train.max_seconds=$ATARI_S"
  wanted "$name" || return 0
  summary_of "$OUT_DIR/$name"
  grep -h "training:" "$OUT_DIR/$name"/train*.log 2>/dev/null | head -n 1
  "$PY" -m launch.curves "$OUT_DIR/$name" --every 1000000 --threshold "$2" 2>&1 | tail -n 14
  rm -rf "$OUT_DIR/$name/checkpoints"
}
atari pong 18
atari breakout 20
rm -rf "$RUNS"
# what the runs left in /dev/shm (torch's torch_<pid>_* IPC counts, the CUDA driver's cuda.shm.*): nothing, if exits are clean
echo "== /dev/shm left by the steps: $(ls /dev/shm | grep -v -x -F -f "$OUT_DIR/.shm.before" | tr '\n' ' ')"
rm -f "$OUT_DIR/.shm.before"
