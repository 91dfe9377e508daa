"""`python -m launch.enjoy run_dir=PATH [enjoy.episodes=10] [enjoy.video=true] ...`: watch a run.

Loads the run's resolved config.yaml and its latest checkpoint (enjoy.checkpoint=best: the best
round of evaluation during training, or a checkpoint file), plays enjoy.episodes episodes in
this process and prints the mean and std of the unscaled game score; the last stdout line is the
same as JSON. With enjoy.video=true the first episode is written as an mp4 (H.264 via PyAV) to
enjoy.video_path (default RUN_DIR/videos/enjoy_v<policy version>.mp4). enjoy.random=true plays
uniformly random actions instead (the baseline a trained policy must beat). A match between agents
(env=doom_duel, env.agents > 1) is played by the policy in every seat; the score, the match result
and the video are the first agent's. enjoy.agents / enjoy.bots change a VizDoom match's seats (a
self-play duel's policy against a bot: enjoy.agents=1 enjoy.bots=1). A population's run
(population.size > 1) plays member enjoy.policy (default 0); in a match between agents enjoy.seats
gives each seat its member (enjoy.seats=[0,1]: member 0 against member 1, scored as seat 0).

run_dir may also be an export (launch.export's folder: its one policy, from model.safetensors) or
hf://user/name[@revision], an export on the Hugging Face Hub (fetched into the local Hugging Face
cache: launch.share.loading); an export's video goes to ./videos/ unless enjoy.video_path says.

Arguments are Hydra overrides of `EnjoyArgs`, checked by the same code as launch.train's
(launch.cli.overrides.compose_checked): bad ones are refused in one line with exit code 2.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass, field

from launch.cli.overrides import compose_tool, register
from launch.process.exits import exit_now, refuse
from launch.share.loading import is_export, load_policy, local_folder
from nodes.envs import env_workdir
from nodes.errors import ConfigError, one_line


@dataclass
class EnjoyOptions:
    episodes: int = 10
    # latest | best (the best round of evaluation during training: eval.every_frames) | a checkpoint file
    checkpoint: str = "latest"
    greedy: bool = False  # argmax per head instead of sampling (sampling is what was trained)
    random: bool = False  # uniformly random actions, no checkpoint needed
    video: bool = False
    video_path: str = ""  # "" = RUN_DIR/videos/enjoy_v<version>.mp4
    fps: float = 0.0  # 0 = the game's speed: engine frames/s divided by env.frameskip
    seed: int = 12345  # a seed the training envs did not use
    max_steps: int = 100_000  # per episode
    # VizDoom matches: play with other seats than the run's (e.g. a self-play duel's policy against
    # a bot: enjoy.agents=1 enjoy.bots=1); 0 / -1: the run's env.agents / env.bots
    agents: int = 0
    bots: int = -1
    # a population (population.size > 1): the member to play (its checkpoint entry), and in a match
    # between agents the member of each seat (enjoy.seats=[0,1]: member 0 against member 1); []: every
    # seat plays enjoy.policy
    policy: int = 0
    seats: list[int] = field(default_factory=list)


@dataclass
class EnjoyArgs:
    run_dir: str | None = None
    enjoy: EnjoyOptions = field(default_factory=EnjoyOptions)


ENGINE_FPS = {"doom": 35.0, "atari": 60.0, "dmlab": 60.0}  # engine frames per second, by env family
OPTIONS = ("run_dir, enjoy.episodes, enjoy.checkpoint, enjoy.greedy, enjoy.random, enjoy.video, enjoy.video_path, "
           "enjoy.fps, enjoy.seed, enjoy.max_steps, enjoy.agents, enjoy.bots, enjoy.policy, enjoy.seats")

register("enjoy", EnjoyArgs)


def parse(argv) -> EnjoyArgs:
    try:
        args: EnjoyArgs = compose_tool("enjoy", argv, "launch.enjoy", "plays one policy", OPTIONS)
    except ConfigError as exc:
        refuse(str(exc))
    if not args.run_dir:
        refuse("run_dir=PATH is required (a directory written by launch.train, an export, or hf://user/name)")
    args.run_dir = local_folder(args.run_dir)
    if not os.path.isfile(os.path.join(args.run_dir, "config.yaml")):
        refuse(f"{args.run_dir} is not a run directory or an export (no config.yaml)")
    if args.enjoy.episodes < 1:
        refuse(f"enjoy.episodes must be >= 1, got {args.enjoy.episodes}")
    return args


def choose_seats(cfg, opt) -> list[int]:
    """The population member of each seat (one seat outside matches between agents), after
    enjoy.agents / enjoy.bots changed the match's seats (refused in one line if they do not fit)."""
    if opt.agents or opt.bots >= 0:
        from nodes.envs import check_env_config
        if cfg.env.family != "doom":
            refuse(f"enjoy.agents / enjoy.bots change a VizDoom match's seats; env family '{cfg.env.family}' has none")
        cfg.env.agents = opt.agents or cfg.env.agents
        cfg.env.bots = cfg.env.bots if opt.bots < 0 else opt.bots
        try:
            check_env_config(cfg.env)
        except ConfigError as exc:
            refuse(f"enjoy.agents={cfg.env.agents} enjoy.bots={cfg.env.bots}: {exc}")
    seats = list(opt.seats) or [opt.policy] * cfg.env.agents
    if len(seats) != cfg.env.agents:
        refuse(f"enjoy.seats names {len(seats)} members for the {cfg.env.agents} seats of env={cfg.env.name}")
    return seats


def main(argv) -> int:
    result = run(argv)
    print(result.pop("said"))
    print(json.dumps(result), flush=True)
    return 0


def run(argv) -> dict:
    """Play as the options say; the figures (the JSON line of main), and under "said" the human line."""
    args = parse(argv)
    from launch.process.resolved import read_resolved
    from nodes.evaluation.play import play
    cfg = read_resolved(args.run_dir)
    opt = args.enjoy
    seats = choose_seats(cfg, opt)
    models, path, state = ([None] * len(seats), None, {}) if opt.random else load_policy(cfg, seats, opt.checkpoint)
    version = int(state.get("policy_version", 0))
    exported = is_export(cfg.run_dir)  # (a Hub export lies in the Hugging Face cache: nothing is written there)
    recorder, matches, objectives = None, [], []
    if opt.video:
        from launch.tools.video import Recorder
        name = f"enjoy_v{version}{'_random' if opt.random else ''}.mp4"
        video_path = opt.video_path or os.path.join("." if exported else cfg.run_dir, "videos", name)
        fps = opt.fps or ENGINE_FPS.get(cfg.env.family, 60.0) / cfg.env.frameskip
        recorder = Recorder(video_path, fps)
    try:
        # VizDoom's files out of the user's directory
        with env_workdir(cfg.env, tempfile.gettempdir() if exported else cfg.run_dir, "enjoy"):
            scores, lengths = play(cfg, models, opt.episodes, opt.seed, greedy=opt.greedy, max_steps=opt.max_steps,
                                   on_frame=recorder.frame if recorder else None, matches=matches,
                                   objectives=objectives)
    except ValueError as exc:  # e.g. an env without frames asked for a video
        refuse(one_line(exc))
    finally:
        if recorder:
            recorder.close()
    result = {
        "policy": "random" if opt.random else path, "policy_version": version, "seats": seats,
        "env_frames": int(state.get("env_frames", 0)), "episodes": len(scores),
        "reward_mean": statistics.fmean(scores), "reward_std": statistics.pstdev(scores),
        "length_mean": statistics.fmean(lengths), "true_objective_mean": statistics.fmean(objectives),
    }
    if matches:  # VizDoom matches (env.bots): the score above is the frags
        result["match"] = {k: statistics.fmean(m[k] for m in matches) for k in matches[0]}
    if recorder:
        result.update(video=recorder.path, video_frames=recorder.frames)
    said = ""
    if abs(result["true_objective_mean"] - result["reward_mean"]) > 1e-9:  # the env has an objective of its own
        said += f", true objective {result['true_objective_mean']:.2f}"
    if matches:
        m = result["match"]
        said += f", matches: frags {m['frags']:.2f} deaths {m['deaths']:.2f} place {m['place']:.2f} win {m['win']:.0%}"
    result["said"] = (f"{cfg.env.name}: {len(scores)} episodes, reward {result['reward_mean']:.2f} +- "
                      f"{result['reward_std']:.2f} (unscaled), length {result['length_mean']:.1f}" + said
                      + (f", video {recorder.path}" if recorder else ""))
    return result


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
