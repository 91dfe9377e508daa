"""launcher.wait=true: the submitting command waits for its jobs, streaming rank 0's log."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass

# States of a job that is not over: waiting, running, or on its way to run again (a requeued job
# passes through these); any other state is final.
ACTIVE_STATES = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED",
                 "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "STOPPED", "SPECIAL_EXIT",
                 "RESV_DEL_HOLD", "POWER_UP_NODE", "UPDATE_DB"}


@dataclass(frozen=True)
class Submitted:
    """A job launcher=slurm submitted, and how to follow it."""
    job_id: str
    run_dir: str | None  # whose train.log is streamed; None: an array's later element (the first streams it)
    log_offset: int  # train.log's size at submission: a resumed run's earlier lines are not shown again
    poll_s: float


def job_state(job_id: str) -> tuple[str, str, str]:
    """(state, restarts, exit code) from scontrol (current), else sacct (after the job left slurmctld)."""
    try:
        out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True,
                             timeout=30).stdout
        fields = dict(re.findall(r"\b(JobState|Restarts|ExitCode|Reason)=(\S+)", out))
        if "JobState" in fields:
            return fields["JobState"], fields.get("Restarts", "0"), fields.get("ExitCode", "")
        out = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode"],
                             capture_output=True, text=True, timeout=30).stdout.split()
        if out:
            state, code = out[0].split("|")
            return state.split()[0], "?", code
    except (OSError, subprocess.SubprocessError):
        pass
    return "UNKNOWN", "?", ""


def wait_submitted(submitted: list[Submitted]) -> int:
    """Wait for every job in `submitted`, streaming rank 0's log; 0 when all ended COMPLETED (or
    there are none), 1 otherwise (130 on Ctrl-C, the jobs keep running)."""
    if not submitted:
        return 0
    jobs = [(s.job_id, s.run_dir) for s in submitted]
    offsets = {s.job_id: s.log_offset for s in submitted}
    poll_s = min(s.poll_s for s in submitted)
    prefix = sum(run_dir is not None for _, run_dir in jobs) > 1
    final = {}
    try:
        _follow(jobs, offsets, poll_s, prefix, final)
    except KeyboardInterrupt:
        print("stopped waiting; the job(s) keep running: " + " ".join(j for j, _ in jobs if j not in final),
              file=sys.stderr, flush=True)
        return 130
    for job, run_dir in jobs:
        state, code = final[job]
        print(f"Slurm job {job} ended {state} (exit code {code})" + (f"; run directory {run_dir}" if run_dir else ""),
              flush=True)
    return 1 if any(state != "COMPLETED" for state, _ in final.values()) else 0


def _follow(jobs: list[tuple[str, str | None]], offsets: dict, poll_s: float, prefix: bool, final: dict) -> None:
    """Poll until every job is over, printing each change of state and the new log lines; fills
    `final` with {job: (state, exit code)}."""
    last = {job: None for job, _ in jobs}
    unknown = {job: 0 for job, _ in jobs}  # neither scontrol nor sacct knows the job (any more)
    while len(final) < len(jobs):
        for job, run_dir in jobs:
            if job in final:
                continue
            offsets[job] = _stream(run_dir, offsets[job], f"[{job}] " if prefix else "")
            state, restarts, code = job_state(job)
            if (state, restarts) != last[job]:
                last[job] = (state, restarts)
                again = f" (restart {restarts})" if restarts not in ("0", "?") else ""
                print(f"Slurm job {job}: {state}{again}", flush=True)
            unknown[job] = unknown[job] + 1 if state == "UNKNOWN" else 0
            if (state not in ACTIVE_STATES and state != "UNKNOWN") or unknown[job] > 30:
                time.sleep(0.5)  # the log's last lines
                _stream(run_dir, offsets[job], f"[{job}] " if prefix else "")
                final[job] = (state, code)
        if len(final) < len(jobs):
            time.sleep(poll_s)


def _stream(run_dir: str | None, offset: int, prefix: str) -> int:
    """Print the run's train.log from `offset` (no run dir: an array's later element, nothing)."""
    if run_dir is None:
        return offset
    try:
        with open(os.path.join(run_dir, "train.log"), "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return offset
    end = data.rfind(b"\n") + 1
    for line in data[:end].decode(errors="replace").splitlines():
        print(prefix + line, flush=True)
    return offset + end
