"""Evaluation during training (eval.every_frames > 0): the writer rank's policy played on envs of
its own, in a process of its own, while the sampler goes on.

Every eval.every_frames env frames the loop hands the evaluator a CPU copy of the run state (a
memory copy, as for a checkpoint) and goes on training; the evaluator process plays
eval.episodes episodes with each population member's policy (nodes.evaluation.play.play: one env, batch
of one, greedy or sampled as eval.greedy says) on envs seeded from the run's seed and the round
(nodes.run.seeds.EVAL: streams no training env uses), and sends back each member's mean reward, true
objective and length. At most one round is in flight: a round that would start while the last one
plays waits for it. The loop logs a finished round under eval/* (TensorBoard, W&B) at the frames
it was taken, appends it to run_dir/eval.jsonl, and when its score (the best member's mean true
objective) beats every round before, writes that round's copy as checkpoints/best.pt
(launch.enjoy enjoy.checkpoint=best plays it). A relaunch reads eval.jsonl back: the best score
so far and the frames of the next round. With several nodes the writer rank evaluates (elastic:
whichever rank writes); the last round in flight at the end is waited for.
"""
from __future__ import annotations

import json
import logging
import os
import queue
import statistics
import time

from nodes.errors import WorkerFailed
from nodes.run import checkpoint as ckpt
from nodes.run import seeds

log = logging.getLogger("nodes")

JOURNAL = "eval.jsonl"
BEST = "best.pt"


def best_path(run_dir: str) -> str:
    return os.path.join(ckpt.checkpoint_dir(run_dir), BEST)


def member_models(state: dict) -> list[dict]:
    """Each population member's model state in a run state (a population's checkpoint holds them
    under `population`; one policy's is the state itself)."""
    return [m["model"] for m in state.get("population", [state])]


def run_evaluator(cfg, requests, results) -> None:
    """The evaluator process: plays each request's members until it gets None."""
    import torch

    from nodes.envs import env_spec, private_workdir
    from nodes.evaluation.play import play
    from nodes.models import ActorCritic

    spec = env_spec(cfg.env)
    with private_workdir(cfg.run_dir, "evaluator"):
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


class Evaluation:
    """The loop's side: when a round is due, what is in flight, the best so far (writer rank only)."""

    def __init__(self, cfg, process_group):
        """process_group(): the janitor's process group, which the evaluator joins (nodes.sampling.processes)."""
        self.cfg, self.every, self.process_group = cfg, cfg.eval.every_frames, process_group
        self.proc = None
        self.requests = self.results = None
        self.pending: dict | None = None  # the round in flight: its frames, version and state copy
        self.loaded = False  # eval.jsonl read back (on the first step as the writer)
        self.rounds = 0
        self.next_frames = self.every
        self.best: dict | None = None  # the best round's journal entry
        self.last: dict | None = None

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def _load(self) -> None:
        """A relaunch (or a new writer rank) goes on from eval.jsonl: rounds, best, next round's frames."""
        self.loaded = True
        path = os.path.join(self.cfg.run_dir, JOURNAL)
        if not os.path.isfile(path):
            return
        with open(path) as f:
            for line in f:
                if line.strip():
                    self._count(json.loads(line))

    def _count(self, entry: dict) -> None:
        self.rounds = max(self.rounds, entry["round"] + 1)
        self.next_frames = max(self.next_frames, (entry["env_frames"] // self.every + 1) * self.every)
        self.last = entry
        if self.best is None or entry["score"] > self.best["score"]:
            self.best = entry

    def step(self, frames: int, version: int, snapshot, record) -> None:
        """After an iteration (writer rank): log a finished round; start one when due and none is in
        flight. snapshot() gives the CPU copy of the run state (taken only when a round starts)."""
        if not self.loaded:
            self._load()
        self._collect(record)
        if self.pending is None and frames >= self.next_frames:
            self._start(frames, version, snapshot())

    def _start(self, frames: int, version: int, state: dict) -> None:
        if self.proc is None:
            self._spawn()
        self.next_frames = (frames // self.every + 1) * self.every
        self.pending = {"round": self.rounds, "env_frames": frames, "version": version, "state": state}
        self.requests.put({"round": self.rounds, "models": member_models(state)})
        self.rounds += 1

    def _spawn(self) -> None:
        from nodes.sampling.processes import spawn, start_context
        ctx = start_context()
        self.requests, self.results = ctx.Queue(), ctx.Queue()
        # plays on the CPU (gpu=False): a CUDA context would cost ~300 MB
        self.proc = spawn(run_evaluator, "evaluator", self.process_group(), None, self.results,
                          self.cfg, self.requests, self.results, gpu=False)

    def _collect(self, record, timeout: float | None = None) -> bool:
        """A finished round, logged; False when none came (timeout None: do not wait)."""
        if self.pending is None:
            return True
        try:
            result = self.results.get(block=timeout is not None, timeout=timeout)
        except queue.Empty:
            if self.proc is not None and self.proc.exitcode is not None:
                raise WorkerFailed(f"the evaluator exited unexpectedly (exit code {self.proc.exitcode})") from None
            return False
        if isinstance(result, tuple) and result[0] == "error":
            raise WorkerFailed(f"{result[1]} crashed:\n{result[2].rstrip()}")
        self._finished(result, record)
        return True

    def _finished(self, result: dict, record) -> None:
        pending, self.pending = self.pending, None
        members = result["members"]
        best_member = max(range(len(members)), key=lambda p: members[p]["true_objective"])
        entry = {"round": result["round"], "env_frames": pending["env_frames"], "version": pending["version"],
                 "score": members[best_member]["true_objective"], "member": best_member,
                 "episodes": self.cfg.eval.episodes, "greedy": self.cfg.eval.greedy,
                 "seconds": round(result["seconds"], 2), "members": members}
        improved = self.best is None or entry["score"] > self.best["score"]
        self._count(entry)
        if improved:
            ckpt.save_as(best_path(self.cfg.run_dir), pending["state"])
        with open(os.path.join(self.cfg.run_dir, JOURNAL), "a") as f:
            f.write(json.dumps(entry) + "\n")
        record.eval_round(entry)
        log.info("eval at %s frames (version %d): true objective %.2f +- %.2f over %d episodes%s; "
                 "best %.2f at %s frames",
                 f"{entry['env_frames']:,}", entry["version"], entry["score"],
                 members[best_member]["true_objective_std"], entry["episodes"],
                 f" (member {best_member})" if len(members) > 1 else "", self.best["score"],
                 f"{self.best['env_frames']:,}")

    def finish(self, record, timeout_s: float) -> None:
        """The round in flight, waited for (logged), then the evaluator stopped."""
        try:
            if not self._collect(record, timeout=timeout_s):
                log.warning("the last evaluation round did not finish within %.0f s; not logged", timeout_s)
        finally:
            self.close()

    def close(self) -> None:
        """Stop the evaluator (a round in flight is dropped). A rank made writer again later reads
        eval.jsonl afresh: another writer may have added rounds meanwhile."""
        self.loaded = False
        if self.proc is None:
            return
        try:
            self.requests.put(None)
            self.proc.join(10)
        finally:
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
            self.proc, self.pending = None, None

    def summary(self) -> dict | None:
        """summary.json's `eval`: rounds, the last and the best round (None when off)."""
        if not self.enabled:
            return None
        brief = ("round", "env_frames", "version", "score", "member")
        return {"rounds": self.rounds, "last": self.last and {k: self.last[k] for k in brief},
                "best": self.best and {k: self.best[k] for k in brief}}
