"""The model card of an export (its README.md, which the Hugging Face Hub shows as the model's page):
what the policy plays, how long it trained, how well it scored in the run's own evaluation, the
command that trained it, the Scoreboard row it compares with, and how to run it.

The front matter is the Hub's model-card metadata (library, tags, and a model-index entry with the
mean reward, as the Hub's RL leaderboards read it).
"""
from __future__ import annotations

import os
import re
import shlex

import yaml

from launch.share import scoreboard
from launch.share.scoreboard import SCOREBOARD
from nodes.evaluation.journal import JOURNAL, read_jsonl


def evaluation(run_dir: str, version: int) -> dict | None:
    """The run's evaluation round of this policy version (eval.jsonl), else the last round before it."""
    try:
        rounds = read_jsonl(os.path.join(run_dir, JOURNAL))
    except (OSError, ValueError):
        return None
    exact = [r for r in rounds if r.get("version") == version]
    before = [r for r in rounds if r.get("version", 0) <= version]
    return (exact or before or [None])[-1]


def train_command(run_dir: str) -> str:
    """`python -m launch.train` with the run's overrides, as Hydra recorded them (.hydra/overrides.yaml)."""
    try:
        with open(os.path.join(run_dir, ".hydra", "overrides.yaml")) as f:
            lines = yaml.safe_load(f) or []
    except (OSError, yaml.YAMLError):
        return ""
    return " ".join(["python -m launch.train", *(shlex.quote(str(x)) for x in lines)])


def scoreboard_rows(env_name: str, path: str = SCOREBOARD) -> list[str]:
    """The Scoreboard's rows for this task (docs/scoreboard.md) under the table's header, or []: as
    plain Markdown, the docs' links reduced to their text (the card is read on the Hub, where the
    docs' relative links lead nowhere)."""
    try:
        rows = [r for r in scoreboard.read(path) if re.match(rf"`{re.escape(env_name)}`", r.task)]
    except OSError:
        return []
    if not rows:
        return []
    plain = [" | ".join(re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", c) for c in r.cells) for r in rows]
    header = ["| task | ours | Sample Factory | ours / SF | verdict | measured |", "| --- " * 6 + "|"]
    return header + [f"| {line} |" for line in plain]


def model_card(cfg, state: dict, run_dir: str, formats: str) -> str:
    env = cfg.env.name
    version, frames = int(state.get("policy_version", 0)), int(state.get("env_frames", 0))
    round_ = evaluation(run_dir, version)
    member = round_["members"][round_.get("member", 0)] if round_ and round_.get("members") else None
    meta = {"library_name": "distrl", "tags": ["reinforcement-learning", "deep-reinforcement-learning", "distrl",
                                              cfg.env.family, env, *(["onnx"] if formats != "torchscript" else [])]}
    if member:
        score = f"{member['true_objective']:.2f} +/- {member.get('true_objective_std', 0.0):.2f}"
        meta["model-index"] = [{"name": f"{env} policy", "results": [{
            "task": {"type": "reinforcement-learning", "name": "reinforcement-learning"},
            "dataset": {"name": env, "type": env},
            "metrics": [{"type": "mean_reward", "value": score, "name": "mean_reward", "verified": False}]}]}]
    out = ["---", yaml.safe_dump(meta, sort_keys=False).rstrip(), "---", "",
           f"# A `{env}` policy trained with distrl", "",
           f"- Environment: `{env}` (env family `{cfg.env.family}`, model `{cfg.model.name}`, core `{cfg.model.core}`)",
           f"- Trained for {frames:,} env frames (policy version {version})"]
    if member:
        which = "of this policy" if round_.get("version") == version else \
            f"closest before this policy (policy version {round_.get('version')})"
        out.append(f"- The run's evaluation {which}: true objective {member['true_objective']:.2f} +- "
                   f"{member.get('true_objective_std', 0.0):.2f} (mean +- std over {round_['episodes']} episodes, "
                   f"{'greedy' if round_.get('greedy') else 'sampled'} actions, at {round_['env_frames']:,} frames)")
    else:
        out.append("- No evaluation round of this policy in the run (eval.every_frames was off)")
    command = train_command(run_dir)
    if command:
        out += ["", "Trained with", "", "```bash", command, "```"]
    rows = scoreboard_rows(env)
    if rows:
        out += ["", "The project's Scoreboard row for this task (docs/scoreboard.md; a separate run, for scale):", "",
                *rows]
    out += ["", "## Run it", "",
            "With the trainer (plays episodes, prints the score; `enjoy.video=true` writes a video):", "",
            "```bash", "python -m launch.enjoy run_dir=THIS_FOLDER enjoy.episodes=10", "```", "",
            "Without it: `policy.onnx` (ONNX Runtime) or `policy.ts` (`torch.jit.load`) is one step of the policy;",
            "`policy.json` lists its inputs (the observation, the recurrent state, the noise of a sampled action)",
            "and outputs (`action`, `greedy`, `params`, `value`, `state_out`). `examples/play_onnx.py` in the",
            "project plays a VizDoom export with ONNX Runtime alone.", ""]
    return "\n".join(out)
