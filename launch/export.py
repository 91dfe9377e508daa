"""`python -m launch.export run_dir=PATH [format=both|onnx|torchscript] [checkpoint=latest|best|FILE]
[out=PATH] [policy=K]`: a trained policy as a folder that runs without the trainer.

Writes out (default RUN_DIR/export) as launch.share.export lays it out: the policy's step as ONNX
and/or TorchScript (observation normalisation, encoder, recurrent core with its state as an input
and an output, action heads; the action drawn from noise given as inputs), its weights as
safetensors, the resolved config and a model card (README.md). A population's run exports member
`policy` (default 0). `python -m launch.push` uploads the folder to the Hugging Face Hub;
`python -m launch.enjoy run_dir=FOLDER` plays it. The last stdout line is JSON: the folder and its
files.

Refused in one line, exit 2: no such run or checkpoint, an env whose spec cannot be made here, a
model (a custom encoder) that does not trace (the op it stopped at).
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from launch.cli.overrides import compose_tool, register
from launch.process.exits import exit_now, refuse
from nodes.errors import ConfigError

OPTIONS = "run_dir, format, checkpoint, out, policy"


@dataclass
class ExportArgs:
    run_dir: str | None = None
    format: str = "both"  # both | onnx | torchscript
    checkpoint: str = "latest"  # latest | best (the best evaluated round) | a checkpoint file
    out: str = ""  # "" = RUN_DIR/export
    policy: int = 0  # a population's member


register("export", ExportArgs)


def parse(argv) -> ExportArgs:
    from launch.share.export import FORMATS
    try:
        args: ExportArgs = compose_tool("export", argv, "launch.export", "exports one policy", OPTIONS)
    except ConfigError as exc:
        refuse(str(exc))
    if not args.run_dir:
        refuse("run_dir=PATH is required (a directory written by launch.train)")
    if not os.path.isfile(os.path.join(args.run_dir, "config.yaml")):
        refuse(f"{args.run_dir} is not a run directory (no config.yaml)")
    if args.format not in FORMATS:
        refuse(f"format={args.format}: one of {', '.join(FORMATS)}")
    return args


def run(argv) -> dict:
    """Export as the options say; the folder and its files."""
    args = parse(argv)
    from launch.process.resolved import read_resolved
    from launch.share.card import model_card
    from launch.share.export import write_export
    from launch.share.loading import is_export, load_policy
    from nodes.envs import env_spec
    if is_export(args.run_dir):
        refuse(f"{args.run_dir} is an export already: run_dir is the run directory it came from")
    cfg = read_resolved(args.run_dir)
    try:
        env_spec(cfg.env)
    except ConfigError as exc:
        refuse(f"env={cfg.env.name}: cannot describe its observation here: {exc}")
    models, path, state = load_policy(cfg, [args.policy], args.checkpoint, option="checkpoint")
    out = os.path.abspath(args.out or os.path.join(cfg.run_dir, "export"))
    card = model_card(cfg, state, cfg.run_dir, args.format)
    try:
        files = write_export(out, cfg, models[0], state, path, args.format, card)
    except ConfigError as exc:
        refuse(str(exc))
    return {"export": out, "files": files, "checkpoint": path, "policy_version": int(state.get("policy_version", 0))}


def main(argv) -> int:
    result = run(argv)
    print(f"exported {result['checkpoint']} to {result['export']}: {', '.join(result['files'])}")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
