"""A real Slurm cluster on this machine for the tests: tests/slurm/local-cluster.sh (munge,
MariaDB + slurmdbd for sacct, slurmctld, slurmd "nodes" n1..nN) in a private state directory with
free ports, always torn down. Given a network of emulated hosts (launch.spawn.hosts.Network, with
`gateway`), node n<i> is host i-1 of it: its slurmd, and every task Slurm starts there, runs in that
host's network namespace with its address and host name n<i>, as on a cluster of machines;
slurmctld, slurmdbd and munge stay on this machine, reached at the bridge's gateway address.
Without one, all nodes are on 127.0.0.1 and share this machine's host name.
"""
from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "slurm", "local-cluster.sh")
PACKAGES = "slurm-wlm munge slurmdbd mariadb-server"
NEEDED = ("munged", "mungekey", "slurmctld", "slurmd", "slurmdbd", "mariadbd", "sbatch", "srun", "sacct", "scontrol")


def unavailable() -> str | None:
    """Why a local cluster cannot run here (None when it can)."""
    missing = [b for b in NEEDED if shutil.which(b) is None]
    if missing:
        return (f"Slurm is not installed here ({', '.join(missing)} not found); setup.sh installs "
                f"{PACKAGES} with apt-get when run as root")
    if os.geteuid() != 0:
        return "the local Slurm test cluster runs slurmctld/slurmd as root (SlurmUser=root); not root here"
    for module in ("submitit", "hydra_plugins.hydra_submitit_launcher"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install -e '.[slurm]')"
    return None


def _ports_free(base: int) -> bool:
    for port in (base + 6, base + 17, base + 19, *range(base + 100, base + 110)):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def _signal(pid: int, sig) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, sig)


class LocalSlurm:
    """`up` a cluster of n nodes; `env` is the environment for clients (sbatch, srun, submitit)."""

    def __init__(self, nodes: int = 2, hosts=None):
        self.nodes = nodes
        self.dir = tempfile.mkdtemp(prefix="distrl-slurm-")  # short: MariaDB's socket path is limited
        for _ in range(50):
            self.port_base = random.randrange(21000, 39000, 200)
            if _ports_free(self.port_base):
                break
        self.conf = os.path.join(self.dir, "etc", "slurm.conf")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))}
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(k, None)
        env.update(SLURM_LOCAL_DIR=self.dir, SLURM_LOCAL_PORT_BASE=str(self.port_base), SLURM_CONF=self.conf,
                   SLURM_LOCAL_ACCOUNTING="1")
        if hosts is not None:
            assert hosts.gateway and hosts.hosts >= nodes and hosts.names == [f"n{i + 1}" for i in range(hosts.hosts)]
            env.update(SLURM_LOCAL_HOSTS=" ".join(f"{hosts.namespace(i)}={hosts.address(i)}" for i in range(nodes)),
                       SLURM_LOCAL_CTLD_ADDR=hosts.gateway_address)
        self.env = env
        self.partition = "debug"

    def script(self, *args, timeout=180) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", SCRIPT, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def up(self) -> None:
        proc = self.script("up", str(self.nodes))
        if proc.returncode != 0:
            raise RuntimeError(f"local Slurm cluster did not start:\n{proc.stderr[-3000:]}\n"
                               f"{self.logs()}")

    def logs(self) -> str:
        out = []
        logdir = os.path.join(self.dir, "log")
        for name in sorted(os.listdir(logdir)) if os.path.isdir(logdir) else []:
            with open(os.path.join(logdir, name), errors="replace") as f:
                out.append(f"--- {name}\n{f.read()[-1500:]}")
        return "\n".join(out)

    def leftovers(self):
        """pids of processes started by this cluster (daemons, slurmstepd, job tasks): their
        command line names its state directory or their environment its slurm.conf."""
        mine, marker = os.getpid(), f"SLURM_CONF={self.conf}".encode()
        found = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == mine:
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read()
                with open(f"/proc/{d}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
                with open(f"/proc/{d}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except OSError:
                continue
            if state in (b"Z", b"X"):
                continue
            if self.dir.encode() in cmd or marker in environ:
                found.append((int(d), cmd.replace(b"\0", b" ").decode(errors="replace")[:120]))
        return found

    DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmscriptd", "slurmd")

    def down(self) -> list:
        """Stop everything. Returns the job processes (slurmstepd, training tasks) still running
        after `down`: they should be none. The cluster's own daemons, if the script left any, are
        stopped here (SIGTERM, then SIGKILL) and reported in self.down_report."""
        t0 = time.time()
        try:
            proc = self.script("down", timeout=120)
            took = time.time() - t0
            self.down_report = f"down script exited {proc.returncode} after {took:.1f} s: {proc.stderr[-2000:]}"
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            self.down_report = f"down script still running after {time.time() - t0:.0f} s: {err[-2000:]}"
        left = self._wait_gone(10)
        daemons = [(pid, cmd) for pid, cmd in left if self._is_daemon(cmd)]
        jobs = [(pid, cmd) for pid, cmd in left if not self._is_daemon(cmd)]
        if daemons:
            self.down_report = f"daemons left by the down script: {daemons}\n{self.down_report}\n{self.logs()}"
            for pid, _ in daemons:
                _signal(pid, signal.SIGTERM)
            daemons = self._wait_gone(20)
        for pid, _ in jobs + daemons:
            _signal(pid, signal.SIGKILL)
        if os.environ.get("DISTRL_SLURM_LOGS"):  # keep the daemons' logs (debugging a test)
            shutil.copytree(os.path.join(self.dir, "log"), os.environ["DISTRL_SLURM_LOGS"], dirs_exist_ok=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        return jobs

    def _is_daemon(self, cmd: str) -> bool:
        name = cmd.lstrip(": ").split(" ", 1)[0]
        return os.path.basename(name) in self.DAEMONS

    def _wait_gone(self, seconds: float) -> list:
        deadline = time.time() + seconds
        while True:
            left = self.leftovers()
            if not left or time.time() > deadline:
                return left
            time.sleep(0.5)

    # ------------------------------------------------------------------ queries
    def run(self, *cmd, timeout=60, check=True) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def job(self, job_id: str) -> dict:
        """scontrol's view of a job: JobState, Restarts, ExitCode, ..."""
        out = self.run("scontrol", "-o", "show", "job", str(job_id), check=False).stdout
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    def sacct(self, job_id: str, all_runs: bool = False) -> list:
        """[(State, ExitCode), ...] of the job's allocation; all_runs: every run of a requeued job."""
        args = ["sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "State,ExitCode"] + (["-D"] if all_runs else [])
        lines = self.run(*args, check=False).stdout.split()
        return [tuple(line.split("|")) for line in lines if "|" in line]

    def final_state(self, job_id: str, timeout: float = 120) -> str:
        """Wait until sacct records the job as over (not pending, running or requeued)."""
        deadline = time.time() + timeout
        states = []
        while time.time() < deadline:
            states = self.sacct(job_id)
            if states and states[-1][0].split()[0] not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING",
                                                            "SUSPENDED", "RESIZING"):
                return states[-1][0].split()[0]
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} not over after {timeout:.0f} s (sacct: {states}, "
                             f"scontrol: {self.job(job_id).get('JobState')})")
