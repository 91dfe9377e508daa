#!/usr/bin/env bash
# benchmarks/gpu_sf_atari.sh OUT_DIR [GAME=SECONDS ...]: Sample Factory 2.1.1's Atari example on one
# GPU node, on the layout our `atari_*` steps of benchmarks/gpu_check.sh train on, each game for at
# most SECONDS (or its 10M frames, whichever comes first), one after the other. Its TensorBoard
# summaries and log land in OUT_DIR/sf/sf_<game>_s<SEED>/ (checkpoints removed), to be read beside
# ours at equal frames:
#
#   python -m launch.curves ours=OURS_RUN sf=OUT_DIR/sf/sf_atari_breakout_s0 --every 1000000 --threshold 20
#
# Layout: every core but two as rollout workers (our `sampler.num_workers=auto` on a GPU node), 8 envs
# each and a rollout of 64 (our Atari preset), and a training batch of every env's rollout learnt in 4
# epochs of 4 minibatches, as ours learns its sync rounds (14 x 8 x 64 = 7,168 samples, minibatches
# of 1,792 on 16 cores; its sync sampler refuses a batch smaller than one round of all envs),
# --device=gpu, Sample Factory's Atari defaults otherwise (its 10M-frame linear lr decay included).
#
# Default games: atari_breakout=330 atari_pong=210, the seconds our runs of docs/gpu.md had (about
# 9.5 minutes with start-up and stops: what one call on a lent H100 holds, 2026-11-27). SEED (0); SF_PYTHON (python3) is a Python with sample-factory
# 2.1.1, numpy<2, gymnasium 0.29.1 and ale-py (0.9.1 where 0.8.1 has no wheel: benchmarks/sf_site
# registers its games); SF_PYTHONPATH, if set, is its PYTHONPATH.
# DEVICE=cpu walks the same steps without a GPU (to check this script).
# KEEP_CHECKPOINTS=1 keeps its checkpoint (saved every 60 s and at the stop) and a rerun on the same
# OUT_DIR resumes from it: 10M frames of one game take two calls on a lent H100 (~17,000 frames/s),
# e.g. `... gpu_sf_atari.sh /tmp/sfa atari_breakout=525`, then, in the 30 s the machine stays warm,
# `... gpu_sf_atari.sh /tmp/sfa atari_breakout=140` (docs/environments.md, 2026-11-27 12:35). A
# cold second call cannot get the checkpoint back (20.7 MB, over the 16 MiB a file of $OUT may be):
# split it (`tar cf - -C /tmp/sfa . | split -b 15m - $OUT/sfa.tar.`) and carry the pieces.
set -u
if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [GAME=SECONDS ...]" >&2
  exit 2
fi
out=$1
shift
games=("$@")
[ ${#games[@]} -gt 0 ] || games=(atari_breakout=330 atari_pong=210)
seed=${SEED:-0}
workers=${WORKERS:-$(($(nproc) > 3 ? $(nproc) - 2 : 1))}
sf_device=$([ "${DEVICE:-cuda}" = cpu ] && echo cpu || echo gpu)
mkdir -p "$out/sf"
out=$(cd "$out" && pwd)
site=$(cd "$(dirname "$0")" && pwd)/sf_site  # sitecustomize.py: registers the games (ale-py 0.9+)

for entry in "${games[@]}"; do
  game=${entry%%=*} secs=${entry#*=} t0=$SECONDS
  exp="sf_${game}_s$seed"
  save_s=$([ "${KEEP_CHECKPOINTS:-0}" = 1 ] && echo 60 || echo 100000)
  ls /dev/shm >"$out/.shm.before"
  echo "== $game: $workers workers x 8 envs, --device=$sf_device, at most $secs s"
  # job control on: a process group of its own (the stop reaches every worker), and SIGINT not
  # ignored as it is for a background command of a script (its main process stops on
  # KeyboardInterrupt, saving a checkpoint)
  set -m
  # (2.1.1 predates torch 2.6's weights-only torch.load, which refuses its checkpoints on a resume)
  TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 PYTHONPATH=$site:${SF_PYTHONPATH:-${PYTHONPATH:-}} "${SF_PYTHON:-python3}" -m sf_examples.atari.train_atari \
    --env="$game" --device="$sf_device" --num_workers="$workers" --num_envs_per_worker=8 --rollout=64 \
    --batch_size=$((workers * 8 * 64 / 4)) --num_batches_per_epoch=4 \
    --train_for_env_steps=10000000 --seed="$seed" --experiment="$exp" --train_dir="$out/sf" \
    --save_every_sec="$save_s" --keep_checkpoints=1 >>"$out/$exp.log" 2>&1 &
  sf=$!
  set +m
  while kill -0 "$sf" 2>/dev/null && [ $((SECONDS - t0)) -lt "$secs" ]; do sleep 2; done
  kill -INT "$sf" 2>/dev/null  # its main process first: it stops the others and saves a checkpoint
  for _ in $(seq 20); do kill -0 "$sf" 2>/dev/null || break; sleep 1; done
  kill -KILL -- -"$sf" 2>/dev/null
  wait "$sf" 2>/dev/null
  echo "   ended after $((SECONDS - t0)) s"
  # its last speed and frame count, and any error
  grep -a "Fps is" "$out/$exp.log" | tail -n 2 | sed 's/\x1b\[[0-9;]*m//g'
  grep -a -E "Traceback|Error|error" "$out/$exp.log" | head -n 5
  [ "${KEEP_CHECKPOINTS:-0}" = 1 ] || rm -rf "$out/sf/$exp"/checkpoint_p*
  # what its killed processes leave in /dev/shm (torch's tensors, multiprocessing's semaphores)
  ls /dev/shm | grep -E "^(torch_|sem\.mp-)" | grep -v -x -F -f "$out/.shm.before" | sed "s|^|/dev/shm/|" | xargs -r rm -f
done
rm -f "$out/.shm.before"
