#!/usr/bin/env bash
# Training throughput on one layout (2 rollout workers x 8 envs), one after the other: ours with the
# python backend, ours with env.backend=envpool, and Sample Factory 2.1.1's EnvPool example (its
# own defaults for the task, 2 workers each stepping one pool of 8: --env_agents=8). Each trainer
# trains FRAMES env frames from launch; printed: launch-to-exit frames/s of each, and ours' own
# training-only figure (summary.json's train_fps).
#
#   benchmarks/envpool_throughput.sh TASK FRAMES OUT_DIR     # TASK: atari_pong, mujoco_halfcheetah, ...
#
# SF_PYTHON (default sfvenv/bin/python): a Python with Sample Factory 2.1.1 and envpool:
#   python -m venv sfvenv && sfvenv/bin/pip install torch==2.13.0 sample-factory==2.1.1 envpool
# OURS_ARGS: extra overrides for both of our runs. SIDES (default "python envpool sf") picks which
# run; a run whose directory exists is not run again (its figures are read as they are).
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 TASK FRAMES OUT_DIR" >&2
  exit 2
fi
task=$1 frames=$2 out=$3
sf_python=${SF_PYTHON:-sfvenv/bin/python}
sides=${SIDES:-python envpool sf}
cd "$(dirname "$0")/.."
mkdir -p "$out"
read -r -a ours_args <<< "${OURS_ARGS:-}"
case "$task" in
  atari_*) sf_module=sf_examples.envpool.atari.train_envpool_atari ;;
  mujoco_*) sf_module=sf_examples.envpool.mujoco.train_envpool_mujoco ;;
  *) echo "TASK must be atari_<game> or mujoco_<task>, got '$task'" >&2; exit 2 ;;
esac

timed() {  # timed NAME CMD...: runs CMD, writes its launch-to-exit seconds to OUT/NAME.seconds
  local name=$1; shift
  local start end
  start=$(date +%s.%N)
  "$@" > "$out/$name.out" 2>&1
  end=$(date +%s.%N)
  python -c "print(round($end - $start, 2))" > "$out/$name.seconds"
}

for side in $sides; do
  dir="$out/${side}_$task"
  [ -e "$dir" ] && continue
  case "$side" in
    python|envpool)
      timed "${side}_$task" python -m launch.train hydra.run.dir="$dir" env="$task" env.backend="$side" \
        train.max_env_frames="$frames" eval.every_frames=0 "${ours_args[@]}" ;;
    sf)
      timed "${side}_$task" "$sf_python" -m "$sf_module" --env="$task" --device=cpu --num_workers=2 \
        --num_envs_per_worker=1 --env_agents=8 --train_for_env_steps="$frames" --experiment="sf_$task" \
        --train_dir="$dir" ;;
    *) echo "SIDES: unknown side '$side' (python, envpool, sf)" >&2; exit 2 ;;
  esac
done

python - "$out" "$task" "$frames" $sides <<'EOF'
import glob, json, re, sys
out, task, frames, sides = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
for side in sides:
    seconds = float(open(f"{out}/{side}_{task}.seconds").read())
    if side == "sf":
        log = open(f"{out}/{side}_{task}.out").read()
        collected = re.findall(r"Collected \{0: (\d+)\}, FPS: ([\d.]+)", log)
        done, own = (int(collected[-1][0]), float(collected[-1][1])) if collected else (0, float("nan"))
        print(f"{task} sf (EnvPool example): {done:,} frames in {seconds:.0f} s launch to exit = "
              f"{done / seconds:,.0f} frames/s; its own FPS {own:,.0f}")
    else:
        s = json.load(open(glob.glob(f"{out}/{side}_{task}/summary.json")[0]))
        print(f"{task} ours, {side} backend: {s['env_frames']:,} frames in {seconds:.0f} s launch to exit = "
              f"{s['env_frames'] / seconds:,.0f} frames/s; training {s['train_fps']:,.0f} frames/s")
EOF
