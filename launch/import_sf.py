"""`python -m launch.import_sf sf_dir=PATH run_dir=NEW [checkpoint=latest|best|PATH] [env=OPTION] [env.KEY=VALUE ...]`:
a Sample Factory 2 agent as a run of ours.

sf_dir is a Sample Factory 2.1.1 experiment of one of its VizDoom envs (train_dir/experiment: its
config.json and checkpoint_p0/); checkpoint=latest takes its newest checkpoint, best its best_*.pth,
or a file. run_dir (a new directory) receives our resolved config.yaml, composed from conf/ for the
env of ours that is Sample Factory's env (env=OPTION picks another; env.KEY=VALUE changes one of its
keys) with the model's sizes from its config.json, and checkpoints/ with its weights in our format
(launch.share.sf_checkpoint says what maps and how exactly). Then:

    python -m launch.enjoy run_dir=NEW enjoy.episodes=20

plays it; `python -m launch.train hydra.run.dir=NEW` with the overrides the import prints (the env's
and the model's) goes on training it, from its frames and with a fresh optimizer.
What does not map (an env we do not have, another architecture, a tensor of another shape, a missing
file) is refused in one line with exit code 2, before anything is written.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from launch.cli.overrides import compose_checked, compose_tool, register
from launch.process.exits import exit_now, refuse
from nodes.errors import ConfigError


@dataclass
class ImportArgs:
    sf_dir: str | None = None
    run_dir: str | None = None
    checkpoint: str = "latest"  # latest | best | a checkpoint file of Sample Factory's


OPTIONS = "sf_dir, run_dir, checkpoint, env, env.KEY"

register("import_sf", ImportArgs)


def _is_env(line: str) -> bool:
    key = line.lstrip("+~").partition("=")[0]
    return key == "env" or key.startswith("env.")


def parse(argv) -> tuple[ImportArgs, list[str]]:
    """(the importer's own arguments, the env overrides for our config)."""
    try:
        args: ImportArgs = compose_tool("import_sf", [a for a in argv if not _is_env(a)], "launch.import_sf",
                                        "imports one checkpoint",
                                        f"{OPTIONS}; the model's keys come from Sample Factory's config.json")
    except ConfigError as exc:
        refuse(str(exc))
    if not args.sf_dir:
        refuse("sf_dir=PATH is required (a Sample Factory experiment directory: train_dir/experiment)")
    if not args.run_dir:
        refuse("run_dir=PATH is required (a new directory for the imported run)")
    if os.path.exists(os.path.join(args.run_dir, "config.yaml")) or os.path.isdir(os.path.join(args.run_dir,
                                                                                                 "checkpoints")):
        refuse(f"run_dir={args.run_dir} holds a run already; import into a new directory")
    return args, [a for a in argv if _is_env(a)]


def main(argv) -> int:
    args, env_lines = parse(argv)
    import launch.cli.app as app  # registers our config's schema
    from launch.process.resolved import write_resolved
    from launch.share import sf_checkpoint as sf
    from nodes.record import checkpoint as ckpt
    try:
        sf_cfg = sf.read_config(args.sf_dir)
        path = sf.checkpoint_path(args.sf_dir, args.checkpoint)
        lines = sf.overrides(sf_cfg) + env_lines
        cfg = compose_checked("config", lines)
        cfg.run_dir = os.path.abspath(args.run_dir)
        app.check(cfg)
        state = sf.imported_state(sf.load_checkpoint(path), sf_cfg, cfg, path)
    except ConfigError as exc:
        refuse(str(exc))
    write_resolved(cfg)
    written = ckpt.save(cfg.run_dir, state, keep=1)
    print(f"imported {path} (Sample Factory env {sf_cfg['env']}, {state['env_frames']} env frames) as env="
          f"{cfg.env.name}: {written}\nplay it: python -m launch.enjoy run_dir={args.run_dir}\n"
          f"train on: python -m launch.train hydra.run.dir={args.run_dir} {' '.join(lines)}", flush=True)
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
