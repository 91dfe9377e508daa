"""A trained policy from where it lies: a run directory's checkpoint (latest, best, or a file), an
export folder (launch.share.export: its model.safetensors), or a Hugging Face Hub repository
(`hf://user/name`, fetched into the local Hugging Face cache and read from there as a folder).

launch.enjoy, launch.export and the Python API load through here; a refusal is one line
(launch.process.exits.refuse).
"""
from __future__ import annotations

import os

from launch.process.exits import refuse
from nodes.errors import one_line

HUB = "hf://"  # run_dir=hf://user/name[@revision]: an export on the Hugging Face Hub


def is_export(folder: str) -> bool:
    """An export folder (launch.share.export), not a run directory."""
    from launch.share.export import CONFIG, WEIGHTS
    return os.path.isfile(os.path.join(folder, WEIGHTS)) and os.path.isfile(os.path.join(folder, CONFIG))


def local_folder(run_dir: str) -> str:
    """run_dir as a local directory: itself, or for hf://user/name[@revision] the repository's
    snapshot in the Hugging Face cache (downloaded unless it is there; HF_HUB_OFFLINE=1 reads the
    cache only)."""
    if not run_dir.startswith(HUB):
        return run_dir
    repo, _, revision = run_dir[len(HUB):].partition("@")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        refuse(f"run_dir={run_dir} needs huggingface_hub: pip install -e '.[export]'")
    try:
        return snapshot_download(repo_id=repo, revision=revision or None)
    except Exception as exc:  # noqa: BLE001 - offline, not found, no access: the library's reason in one line
        refuse(f"run_dir={run_dir}: cannot fetch the repository {repo}: {type(exc).__name__}: {one_line(exc)}")


def checkpoint_path(cfg, which: str, option: str = "enjoy.checkpoint") -> str:
    """The checkpoint `which` names (latest | best | a file) in the run directory cfg.run_dir;
    `option` is what the user set it with (for the refusal's line)."""
    from nodes.evaluation.journal import best_path
    from nodes.record import checkpoint as ckpt
    if which == "latest":
        path = ckpt.latest(cfg.run_dir)
        if path is None:
            refuse(f"no checkpoint in {ckpt.checkpoint_dir(cfg.run_dir)} (train first, or pass enjoy.random=true)")
        return path
    path = best_path(cfg.run_dir) if which == "best" else which
    if not os.path.isfile(path):
        refuse(f"{option}={which}: no file {path}" + (" (the run evaluated nothing: eval.every_frames)"
                                                         if which == "best" else ""))
    return path


def load_policy(cfg, members=(0,), which: str = "latest", option: str = "enjoy.checkpoint"):
    """([a model per entry of `members`], the file it came from, the member's run state: policy
    version, env_frames) from the run directory or export folder cfg.run_dir. A run's checkpoint is
    the one `which` names, and a population's holds every member's; an export holds one policy."""
    if is_export(cfg.run_dir):
        return _load_export(cfg, members, which, option)
    from nodes.envs import env_spec
    from nodes.models.actor_critic import ActorCritic
    from nodes.record import checkpoint as ckpt
    path = checkpoint_path(cfg, which, option)
    models = []
    try:
        state = ckpt.load(path)
        saved = state.get("population", [state])
        for k in members:
            if not 0 <= k < len(saved):
                refuse(f"member {k}: the run's population has members 0..{len(saved) - 1}")
            model = ActorCritic(env_spec(cfg.env), cfg.model)
            model.check_fit(saved[k].get("model_identity"), saved[k]["model"], path)
            model.load_state_dict(saved[k]["model"])
            models.append(model.eval())
    except (ckpt.CheckpointError, RuntimeError, KeyError) as exc:
        refuse(one_line(exc))
    return models, path, dict(saved[members[0]], env_frames=state.get("env_frames", 0))


def _load_export(cfg, members, which: str, option: str):
    """An export folder's one policy, in every seat `members` names."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file, safe_open

    from launch.share.export import WEIGHTS
    from nodes.envs import env_spec
    from nodes.errors import CheckpointError
    from nodes.models.actor_critic import ActorCritic
    if which != "latest":
        refuse(f"{option}={which}: {cfg.run_dir} is an export, which holds one policy (its checkpoint)")
    if any(k != 0 for k in members):
        refuse(f"{cfg.run_dir} is an export of one policy: it has no population members {sorted(set(members))}")
    path = os.path.join(cfg.run_dir, WEIGHTS)
    try:
        with safe_open(path, "pt") as f:
            meta = f.metadata() or {}
        tensors = load_file(path)
        model = ActorCritic(env_spec(cfg.env), cfg.model)
        model.check_fit(meta.get("model_identity"), tensors, path)
        model.load_state_dict(tensors)
    except (SafetensorError, OSError) as exc:
        refuse(f"{path} is unreadable: {one_line(exc)}")
    except (CheckpointError, RuntimeError) as exc:
        refuse(one_line(exc))
    state = {"policy_version": int(meta.get("policy_version", 0)), "env_frames": int(meta.get("env_frames", 0))}
    return [model.eval() for _ in members], path, state
