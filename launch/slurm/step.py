"""Inside a Slurm job step of several tasks: where its ranks meet (address and port)."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import MutableMapping

from nodes.config.schema import Config

ADDR_NODE = "DISTRL_NODE_ADDR_NODE"  # the Slurm node DISTRL_NODE_ADDR was found for


def in_slurm_step(env=None) -> bool:
    env = os.environ if env is None else env
    return "SLURM_PROCID" in env and "SLURM_STEP_ID" in env and "SLURM_JOB_ID" in env


def node_addr(name: str) -> str:
    """The address slurmctld reaches a node at (NodeAddr; on most clusters its host name)."""
    try:
        out = subprocess.run(["scontrol", "-o", "show", "node", name], capture_output=True, text=True,
                             timeout=20).stdout
        m = re.search(r"\bNodeAddr=(\S+)", out)
        if m:
            return m.group(1)
    except (OSError, subprocess.SubprocessError):
        pass
    return name


def prepare_env(cfg: Config, env: MutableMapping[str, str] | None = None) -> None:
    """In a Slurm job, this node's address is its NodeAddr (DISTRL_NODE_ADDR, unless set). Inside a
    Slurm step of several tasks (and no torchrun world): the rendezvous address is the first node's
    NodeAddr, and the port sync.master_port when set, else (a fixed world) the one
    rank 0 publishes in the run directory (master_port). An elastic run meets through its
    rendezvous file instead (sync.rendezvous): its world's port is never used."""
    env = os.environ if env is None else env
    node = env.get("SLURMD_NODENAME")
    if node and (not env.get("DISTRL_NODE_ADDR") or env.get(ADDR_NODE, node) != node):
        # how the other nodes reach this one (sync.rendezvous.host_address): Slurm's own address of
        # it, where its host name may resolve to 127.0.1.1 on itself (Debian's /etc/hosts). Tagged
        # with the node: a job submitted from inside another inherits this environment.
        env["DISTRL_NODE_ADDR"], env[ADDR_NODE] = node_addr(node), node
    if "RANK" in env or not in_slurm_step(env) or int(env.get("SLURM_STEP_NUM_TASKS", "1") or 1) <= 1:
        return
    if "MASTER_PORT" not in env:
        if cfg.sync.master_port:
            env["MASTER_PORT"] = str(cfg.sync.master_port)
        elif not cfg.sync.elastic:
            env["MASTER_PORT"] = str(master_port(cfg.run_dir, env, cfg.sync.timeout_s))
    if "MASTER_ADDR" not in env:
        from sync.world import first_host
        env["MASTER_ADDR"] = node_addr(first_host(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"]))


def port_file(run_dir: str, env: MutableMapping[str, str]) -> str:
    return os.path.join(run_dir, "slurm", f"master_port.{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '0')}")


def master_port(run_dir: str, env: MutableMapping[str, str], timeout_s: float) -> int:
    """The port rank 0 of this step hosts the world's store on. Rank 0 takes a port free on its
    host and writes it, with the job's restart count, to a file in the run directory, which every
    task shares (it reads its config there); the others wait up to timeout_s for that file.

    Not a port derived from the job id: two jobs on one node (or whose ids map to the same port)
    would collide, and a fixed port can be held by an outgoing connection's ephemeral port. The
    file is named by job and step, and a requeued job's run (the same ids) is told apart by
    SLURM_RESTART_COUNT, so no task reads a port an earlier run published."""
    path = port_file(run_dir, env)
    restart = env.get("SLURM_RESTART_COUNT", "0") or "0"
    if env["SLURM_PROCID"] == "0":
        with socket.socket() as s:
            s.bind(("", 0))  # on every interface, as the store will listen
            port = s.getsockname()[1]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{restart} {port}\n")
        os.replace(tmp, path)  # whole or absent: a reader never sees half a line
        return port
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with open(path) as f:
                published, port = f.read().split()
            if published == restart:
                return int(port)
        except (OSError, ValueError):
            pass  # not written yet (or an earlier run's): keep looking
        if time.monotonic() > deadline:
            raise SystemExit(f"error: rank 0 of Slurm job {env['SLURM_JOB_ID']} published no port in {path} within "
                             f"{timeout_s:g} s (sync.timeout_s): every task must see the same run directory")
        time.sleep(0.2)


def under_hydra_submitit() -> bool:
    """This process runs a Hydra job through hydra-submitit-launcher (hydra/launcher=submitit_slurm):
    the sweep directory was fixed by the submitting process, so every task has the same run dir."""
    return bool(os.environ.get("SUBMITIT_FOLDER")) and os.environ.get("SUBMITIT_EXECUTOR") == "slurm"
