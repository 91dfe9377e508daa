#!/usr/bin/env bash
# Ours against Sample Factory 2.1.1 on one VizDoom scenario, MuJoCo task or Atari game: the same layout (2
# rollout workers x 8 envs), the same seed and frames, one after the other, each trainer with its
# own defaults for the scenario; then the true objective of both at equal frames (launch.curves),
# drawn into OUT_DIR/SCENARIO_sSEED.png.
#
#   benchmarks/against_sf.sh SCENARIO SEED FRAMES OUT_DIR
#
# SCENARIO is our conf/env name, which is also Sample Factory's env name (doom_health_gathering,
# doom_my_way_home, mujoco_halfcheetah, mujoco_hopper, ...; but mujoco_walker2d is its
# mujoco_walker; Sample Factory's MuJoCo tasks are
# gymnasium's v4, ours v5: the same bodies and rewards). SF_PYTHON (default sfvenv/bin/python) is
# a Python with Sample Factory installed in its own venv:
#   python -m venv sfvenv && sfvenv/bin/pip install torch==2.13.0 sample-factory==2.1.1 vizdoom==1.3.2
#   sfvenv/bin/pip install "mujoco<3.2" imageio     # for the MuJoCo tasks
#   sfvenv/bin/pip install ale-py==0.8.1 && sfvenv/bin/ale-import-roms \
#     "$(python -c 'import ale_py, os; print(os.path.dirname(ale_py.__file__))')/roms"  # Atari
# (Sample Factory's Atari games are gymnasium's <Game>NoFrameskip-v4 through its own wrappers, ours
# ALE/<Game>-v5 without sticky actions: the same DQN preprocessing, but it also presses FIRE after
# each reset and lost life.)
# OURS_ARGS: extra overrides for our side (words split on spaces).
# SIDES="ours sf" (default) picks which trainers run; a side whose run directory exists is not
# run again (the curves read it as it is), unless RESUME=1: then both trainers go on from their
# last checkpoint (a run stopped with SIGTERM; stop Sample Factory's workers too:
# pkill -TERM -f "$SF_PYTHON"). Sample Factory 2.1.1 predates torch 2.6's weights-only
# torch.load, which refuses its checkpoints: its side runs with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1.
set -euo pipefail
if [ $# -ne 4 ]; then
  echo "usage: $0 SCENARIO SEED FRAMES OUT_DIR" >&2
  exit 2
fi
scenario=$1 seed=$2 frames=$3 out=$4
sf_python=${SF_PYTHON:-sfvenv/bin/python}
sides=${SIDES:-ours sf}
cd "$(dirname "$0")/.."
mkdir -p "$out"
ours="$out/ours_${scenario}_s$seed"
sf="$out/sf/sf_${scenario}_s$seed"

# Sample Factory scales these scenarios' rewards by 0.01 and reports the scaled reward as the true
# objective (it reports an unscaled one of its own only for the gathering scenarios and matches)
case "$scenario" in
  doom_basic|doom_deadly_corridor) sf_scale=0.01 ;;
  *) sf_scale=1 ;;
esac
sf_extra=()
case "$scenario" in
  mujoco_*) sf_module=sf_examples.mujoco.train_mujoco every=100000 ;;
  # its sync sampler wants one rollout of all envs to be one training batch (8 x 128 there): 2 x 8 x 64
  atari_*) sf_module=sf_examples.atari.train_atari every=500000 sf_extra=(--rollout=64) ;;
  *) sf_module=sf_examples.vizdoom.train_vizdoom every=250000 ;;
esac
sf_env=$scenario
[ "$scenario" = mujoco_walker2d ] && sf_env=mujoco_walker  # Sample Factory's one other name
read -r -a ours_args <<< "${OURS_ARGS:-}"
# a task of Sample Factory's with no conf/env option of ours runs as env=mujoco env.id=<Task>-v5
ours_env=(env="$scenario")
case "$scenario" in
  mujoco_swimmer) ours_env=(env=mujoco env.id=Swimmer-v5 env.name=mujoco_swimmer) ;;
  mujoco_doublependulum) ours_env=(env=mujoco env.id=InvertedDoublePendulum-v5 env.name=mujoco_doublependulum) ;;
esac

for side in $sides; do
  case "$side" in
    ours)
      [ -e "$ours" ] && [ "${RESUME:-0}" != 1 ] || python -m launch.train hydra.run.dir="$ours" "${ours_env[@]}" \
        train.max_env_frames="$frames" seed="$seed" "${ours_args[@]}" ;;
    sf)
      [ -e "$sf" ] && [ "${RESUME:-0}" != 1 ] || TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 "$sf_python" -m "$sf_module" --env="$sf_env" --device=cpu \
        --num_workers=2 --num_envs_per_worker=8 --train_for_env_steps="$frames" --seed="$seed" \
        --experiment="sf_${scenario}_s$seed" --train_dir="$out/sf" "${sf_extra[@]}" \
        >> "$out/sf_${scenario}_s$seed.out" 2>&1 ;;
    *) echo "SIDES: unknown side '$side' (ours, sf)" >&2; exit 2 ;;
  esac
done
# the mean over the second half of the frames (the last frame both reached ends it)
python -m launch.curves "$ours" "$sf" --sf-reward-scale "$sf_scale" --every "$every" --mean-from $((frames / 2)) \
  --plot "$out/${scenario}_s$seed.png" --title "$scenario, seed $seed: ours against Sample Factory 2.1.1"
