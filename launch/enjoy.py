"""`python -m launch.enjoy run_dir=PATH [enjoy.episodes=10] [enjoy.video=true] ...`: watch a run.

Loads the run's resolved config.yaml and its latest checkpoint, plays enjoy.episodes episodes in
this process and prints the mean and std of the unscaled game score; the last stdout line is the
same as JSON. With enjoy.video=true the first episode is written as an mp4 (H.264 via PyAV) to
enjoy.video_path (default RUN_DIR/videos/enjoy_v<policy version>.mp4). enjoy.random=true plays
uniformly random actions instead (the baseline a trained policy must beat).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
from dataclasses import dataclass, field
from typing import Optional

from omegaconf import OmegaConf

from launch.app import refuse


@dataclass
class EnjoyOptions:
    episodes: int = 10
    greedy: bool = False  # argmax per head instead of sampling (sampling is what was trained)
    random: bool = False  # uniformly random actions, no checkpoint needed
    video: bool = False
    video_path: str = ""  # "" = RUN_DIR/videos/enjoy_v<version>.mp4
    fps: float = 0.0  # 0 = the game's speed: engine frames/s divided by env.frameskip
    seed: int = 12345  # a seed the training envs did not use
    max_steps: int = 100_000  # per episode


@dataclass
class EnjoyArgs:
    run_dir: Optional[str] = None
    enjoy: EnjoyOptions = field(default_factory=EnjoyOptions)


ENGINE_FPS = {"doom": 35.0, "atari": 60.0, "dmlab": 60.0}  # engine frames per second, by env family


def parse(argv) -> EnjoyArgs:
    schema = OmegaConf.structured(EnjoyArgs)
    for arg in argv:
        key, eq, value = arg.partition("=")
        if not eq:
            refuse(f"arguments are key=value, got '{arg}' (e.g. run_dir=runs/doom_basic/... enjoy.episodes=10)")
        if OmegaConf.select(schema, key, default="__missing__") == "__missing__":
            refuse(f"unknown option '{key}' (run_dir, enjoy.episodes, enjoy.greedy, enjoy.random, enjoy.video, "
                   f"enjoy.video_path, enjoy.fps, enjoy.seed, enjoy.max_steps)")
        try:
            OmegaConf.update(schema, key, value, merge=True)
        except Exception as exc:  # noqa: BLE001 - OmegaConf raises several validation types
            refuse(f"bad value for {key}: {str(exc).strip().splitlines()[0]}")
    args: EnjoyArgs = OmegaConf.to_object(schema)
    if not args.run_dir:
        refuse("run_dir=PATH is required (a directory written by launch.train)")
    if not os.path.isfile(os.path.join(args.run_dir, "config.yaml")):
        refuse(f"{args.run_dir} is not a run directory (no config.yaml)")
    if args.enjoy.episodes < 1:
        refuse(f"enjoy.episodes must be >= 1, got {args.enjoy.episodes}")
    return args


def load_policy(cfg):
    """(model, checkpoint path, checkpoint state) from the run's latest checkpoint."""
    from nodes import checkpoint as ckpt
    from nodes.envs import env_spec
    from nodes.models import ActorCritic
    path = ckpt.latest(cfg.run_dir)
    if path is None:
        refuse(f"no checkpoint in {ckpt.checkpoint_dir(cfg.run_dir)} (train first, or pass enjoy.random=true)")
    try:
        state = ckpt.load(path)
        model = ActorCritic(env_spec(cfg.env), cfg.model)
        model.load_state_dict(state["model"])
    except (ckpt.CheckpointError, RuntimeError, KeyError) as exc:
        refuse(str(exc).strip().splitlines()[0])
    model.eval()
    return model, path, state


def main(argv) -> int:
    args = parse(argv)
    from launch.node import load_config
    from nodes.evaluate import play
    cfg = load_config(args.run_dir)
    cfg.env.step_delay_s = 0.0
    opt = args.enjoy
    model, path, state = (None, None, {}) if opt.random else load_policy(cfg)
    version = int(state.get("policy_version", 0))
    recorder = None
    if opt.video:
        from launch.video import Recorder
        video_path = opt.video_path or os.path.join(cfg.run_dir, "videos", f"enjoy_v{version}{'_random' if opt.random else ''}.mp4")
        fps = opt.fps or ENGINE_FPS.get(cfg.env.family, 60.0) / cfg.env.frameskip
        recorder = Recorder(video_path, fps)
    # VizDoom writes _vizdoom/ into the working directory: keep it out of the user's.
    workdir = os.path.join(cfg.run_dir, ".workers", f"enjoy_pid{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)
    try:
        scores, lengths = play(cfg, model, opt.episodes, opt.seed, greedy=opt.greedy, max_steps=opt.max_steps,
                               on_frame=recorder.frame if recorder else None)
    except ValueError as exc:  # e.g. an env without frames asked for a video
        refuse(str(exc).strip().splitlines()[0])
    finally:
        if recorder:
            recorder.close()
        os.chdir(cfg.run_dir)
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "policy": "random" if opt.random else path, "policy_version": version,
        "env_frames": int(state.get("env_frames", 0)), "episodes": len(scores),
        "reward_mean": statistics.fmean(scores), "reward_std": statistics.pstdev(scores),
        "length_mean": statistics.fmean(lengths),
    }
    if recorder:
        result.update(video=recorder.path, video_frames=recorder.frames)
    print(f"{cfg.env.name}: {len(scores)} episodes, reward {result['reward_mean']:.2f} +- {result['reward_std']:.2f} "
          f"(unscaled), length {result['length_mean']:.1f}" + (f", video {recorder.path}" if recorder else ""))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
