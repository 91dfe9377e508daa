"""Evaluation during training (eval.every_frames > 0): the writer rank's policy played on envs of
its own, in a process of its own, while the sampler goes on.

Every eval.every_frames env frames the loop hands the evaluator a CPU copy of the run state (a
memory copy, as for a checkpoint) and goes on training; the evaluator process plays
eval.episodes episodes with each population member's policy (nodes.evaluation.play.play: one env, batch
of one, greedy or sampled as eval.greedy says) on envs seeded from the run's seed and the round
(nodes.seeds.EVAL: streams no training env uses), and sends back each member's mean reward, true
objective and length. At most one round is in flight: a round that would start while the last one
plays waits for it. The loop logs a finished round under eval/* (TensorBoard, W&B) at the frames
it was taken, appends it to run_dir/eval.jsonl, and when its score (the best member's mean true
objective) beats every round before, writes that round's copy as checkpoints/best.pt
(launch.enjoy enjoy.checkpoint=best plays it). A relaunch reads eval.jsonl back: the best score
so far and the frames of the next round. With several nodes the writer rank evaluates (elastic:
whichever rank writes); the last round in flight at the end is waited for.

This module is the evaluator process's body; the loop's side is nodes.evaluation.schedule
(`Evaluation`), what a run keeps of the rounds nodes.evaluation.journal (`Journal`).
"""
from __future__ import annotations

import contextlib
import ctypes
import statistics
import time

from nodes import seeds

# The evaluator names itself (its comm: what ps, top and pgrep show): it takes CPU from the rollout
# workers while it plays, and its name tells it from them (they all run the fork server's python)
NAME, PR_SET_NAME = b"evaluator", 15


def member_models(state: dict) -> list[dict]:
    """Each population member's model state in a run state (a population's checkpoint holds them
    under `population`; one policy's is the state itself)."""
    return [m["model"] for m in state.get("population", [state])]


def run_evaluator(cfg, requests, results) -> None:
    """The evaluator process: plays each request's members until it gets None."""
    import torch

    from nodes.envs import env_spec, env_workdir
    from nodes.evaluation.play import play
    from nodes.models.actor_critic import ActorCritic

    with contextlib.suppress(OSError, AttributeError):  # not Linux: it keeps python's name
        ctypes.CDLL(None).prctl(PR_SET_NAME, NAME, 0, 0, 0)
    spec = env_spec(cfg.env)
    with env_workdir(cfg.env, cfg.run_dir, "evaluator"):
        while True:
            request = requests.get()
            if request is None:
                return
            started = time.time()
            members = []
            for p, weights in enumerate(request["models"]):
                model = ActorCritic(spec, cfg.model)
                model.load_state_dict(weights)
                model.eval()
                objectives: list[float] = []
                seed = seeds.derive(cfg.seed, seeds.EVAL, request["round"], p)
                with torch.inference_mode():
                    scores, lengths = play(cfg, model, cfg.eval.episodes, seed, greedy=cfg.eval.greedy,
                                           objectives=objectives)
                members.append({"reward": statistics.fmean(scores), "true_objective": statistics.fmean(objectives),
                                "true_objective_std": statistics.pstdev(objectives),
                                "length": statistics.fmean(lengths) * cfg.env.frameskip})
            results.put({"round": request["round"], "members": members, "seconds": time.time() - started})
