"""The training loop's side of evaluation during training (`Evaluation`, writer rank only): when a
round is due, the round in flight, the evaluator process (nodes.evaluation.evaluator) started on
first use and stopped at the end, and each finished round logged and journaled
(nodes.evaluation.journal). At most one round is in flight: one that would start while the last
one plays waits for it."""
from __future__ import annotations

import logging
import queue
import shutil
import time

from nodes.envs import workdir_path
from nodes.errors import WorkerFailed, one_line
from nodes.evaluation.evaluator import member_models, run_evaluator
from nodes.evaluation.journal import Journal

log = logging.getLogger("nodes")

POLL_S = 0.5  # the last round's wait looks at the evaluator's liveness this often


class Evaluation:
    def __init__(self, cfg, janitor_pid):
        """janitor_pid(): the pid of the node's janitor, whose process group the evaluator joins
        (nodes.sampling.processes), asked for only when the evaluator starts."""
        self.cfg, self.every, self.janitor_pid = cfg, cfg.eval.every_frames, janitor_pid
        self.proc = None
        self.requests = self.results = None
        self.pending: dict | None = None  # the round in flight: its frames, version and state copy
        self.journal = Journal(cfg.run_dir)  # read back on the first step as the writer
        self.rounds = 0  # rounds started, this launch and before
        self.next_frames = self.every

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def _load(self) -> None:
        """A relaunch (or a new writer rank) goes on from eval.jsonl: rounds, best, next round's frames."""
        for entry in self.journal.load():
            self._count(entry)

    def _count(self, entry: dict) -> None:
        self.rounds = max(self.rounds, entry["round"] + 1)
        self.next_frames = max(self.next_frames, (entry["env_frames"] // self.every + 1) * self.every)

    def step(self, frames: int, version: int, snapshot, record) -> None:
        """After an iteration (writer rank): log a finished round; start one when due and none is in
        flight. snapshot() gives the CPU copy of the run state (taken only when a round starts)."""
        if not self.journal.loaded:
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
        self.proc = spawn(run_evaluator, "evaluator", self.janitor_pid(), None, self.results,
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
        self.journal.add(entry, pending["state"])
        self._count(entry)
        record.eval_round(entry)
        best = self.journal.best
        log.info("eval at %s frames (version %d): true objective %.2f +- %.2f over %d episodes%s; "
                 "best %.2f at %s frames",
                 f"{entry['env_frames']:,}", entry["version"], entry["score"],
                 members[best_member]["true_objective_std"], entry["episodes"],
                 f" (member {best_member})" if len(members) > 1 else "", best["score"],
                 f"{best['env_frames']:,}")

    def finish(self, record, timeout_s: float, give_up=lambda: False) -> None:
        """The round in flight at the end of a finished run, waited for (logged), then the evaluator
        stopped. The run has finished whatever becomes of it: a round that does not finish within
        timeout_s, an evaluator that dies, a failed write of best.pt, a stop signal (give_up() true:
        a Ctrl-C during the wait; a second one raises KeyboardInterrupt here) each drop it, with a
        warning saying why."""
        deadline = time.monotonic() + timeout_s
        try:
            while not self._collect(record, timeout=POLL_S):  # a dead evaluator is seen within POLL_S
                if time.monotonic() > deadline:
                    raise TimeoutError(f"it did not finish within {timeout_s:.0f} s")
                if give_up():
                    raise InterruptedError("a stop signal came during the wait")
        except (Exception, KeyboardInterrupt) as exc:
            log.warning("the last evaluation round (at %s frames) was dropped: %s", f"{self.pending['env_frames']:,}"
                        if self.pending else "?", one_line(exc))
        finally:
            self.close()

    def close(self) -> None:
        """Stop the evaluator (a round in flight is dropped: it is killed at once). A rank made
        writer again later reads eval.jsonl afresh: another writer may have added rounds meanwhile."""
        self.journal.loaded = False
        if self.proc is None:
            return
        try:
            if self.pending is None and self.proc.exitcode is None:
                self.requests.put(None)
                self.proc.join(10)
        finally:
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
            if not self.proc.is_alive():  # killed, it left its working directory
                shutil.rmtree(workdir_path(self.cfg.run_dir, "evaluator", self.proc.pid), ignore_errors=True)
            self.proc, self.pending = None, None

    def summary(self) -> dict | None:
        """summary.json's `eval`: rounds, the last and the best round (None when off)."""
        if not self.enabled:
            return None
        brief = ("round", "env_frames", "version", "score", "member")
        last, best = self.journal.last, self.journal.best
        return {"rounds": self.rounds, "last": last and {k: last[k] for k in brief},
                "best": best and {k: best[k] for k in brief}}
