"""launcher=slurm, sweeps (ours and hydra-submitit's), preemption/requeue, srun and job arrays, on
a real Slurm cluster of three nodes on this machine, each node an emulated host with its own address
and host name (tests/slurm_cluster.py, launch/spawn/hosts.py; skipped, saying why, where Slurm
cannot be installed; failed instead under CI=true). Training runs are tiny: the Slurm plumbing and
the hosts' network are what is tested."""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from datetime import datetime

import pytest
from helpers import ROOT, missing_dependency
from slurm_cluster import LocalSlurm, unavailable

from launch.process.allocator import tcmalloc_library
from launch.spawn import hosts
from nodes.errors import ConfigError

TINY = ["env=gym", "env.id=tests.envs:SignBandit-v0", "model.fc_size=32", "model.hidden_size=32",
        "sampler.num_workers=1", "sampler.envs_per_worker=4", "sampler.rollout=16", "sampler.batch_size=128",
        "sampler.pin_workers=false", "train.learner_threads=1", "train.status_every_s=1"]
SUBNET = "10.215.0"  # not launcher=hosts' own: both can be up at once
SLURM = ["launcher=slurm", "nodes=2", "launcher.time_min=5", "launcher.signal_delay_s=60", "launcher.poll_s=0.5"]


@pytest.fixture(scope="session")
def slurm():
    """Three Slurm nodes, each an emulated host of its own (its address on a bridge, host name n<i>).
    Each host names itself 127.0.1.1 as Debian's /etc/hosts does and has a second interface, as
    cluster machines often have: gloo must find the interface the others reach it on by itself."""
    why = unavailable()
    if why:
        missing_dependency(why)
    try:
        hosts.check_machine(3, "the Slurm test cluster", "nodes")
    except ConfigError as exc:
        missing_dependency(str(exc))
    with hosts.Network(3, hosts.parse_rate("10gbit"), subnet=SUBNET, names=["n1", "n2", "n3"], gateway=True,
                       own_name_loopback=True) as net:
        for i in range(3):  # on a network the other hosts are not on (a veth pair inside the host)
            for cmd in (["link", "add", "eth1", "type", "veth", "peer", "name", "eth1p"], ["link", "set", "eth1", "up"],
                        ["link", "set", "eth1p", "up"], ["addr", "add", f"10.216.0.{i + 1}/24", "dev", "eth1"]):
                subprocess.run(["ip", "-n", net.namespace(i), *cmd], check=True)
        yield from _cluster(net)


def _cluster(net):
    cluster = LocalSlurm(nodes=3, hosts=net)
    try:
        cluster.up()
        yield cluster
    finally:
        left = cluster.down()
        if cluster.down_report.startswith("daemons left"):  # the fixture's own daemons, not our jobs
            warnings.warn(f"the test cluster's down script left daemons (stopped now): {cluster.down_report[:3000]}",
                          stacklevel=2)
    assert not left, (f"job processes still running after the test cluster went down (killed now): {left}\n"
                      f"{cluster.down_report}")


def launch(env, *args, timeout=240):
    proc = subprocess.run([sys.executable, "-m", "launch.train", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return proc


def summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def node_names(run_dir):
    """SLURMD_NODENAME of every rank, from the line each rank logs at start (rank 0: train.log)."""
    names = {}
    for path in glob.glob(os.path.join(run_dir, "train*.log")):
        for m in re.finditer(r"rank (\d+): Slurm job \S+ task \S+ on node (\S+)", open(path).read()):
            names[int(m.group(1))] = m.group(2)
    return names


def gloo_hosts(run_dir):
    """{log file: {(interface, host)}} from the line a rank logs when it chooses gloo's interface."""
    return {os.path.basename(path): set(re.findall(r"gloo uses interface (\S+) of host (\S+):", open(path).read()))
            for path in glob.glob(os.path.join(run_dir, "train*.log"))}


def task_logs(run_dir, job):
    """The tail of each task's stdout/stderr (submitit's files): shown when a job did not complete."""
    parts = []
    for path in sorted(glob.glob(os.path.join(run_dir, "slurm", f"{job}_*_log.*"))):
        parts.append(f"--- {os.path.basename(path)}\n" + open(path, errors="replace").read()[-1500:])
    return "\n".join(parts) or f"no task logs for job {job} in {run_dir}/slurm"


def assert_node_run(run_dir, nodes=2):
    s = summary(run_dir)
    assert s["nodes"] == nodes and s["outcome"] == "finished", s
    assert len(s["param_checksums"]) == nodes and len(set(s["param_checksums"])) == 1, \
        "ranks ended with different parameters"
    assert s["policy_version"] > 0 and min(s["samples_per_rank"]) > 0
    # shares of each rank's own training time (a rank that starts first waits in its first all-reduce)
    assert all(0 <= x <= 1 for x in s["sync_share_per_rank"]), s["sync_share_per_rank"]
    names = {r: f"n{r + 1}" for r in range(nodes)}
    assert node_names(run_dir) == names, node_names(run_dir)  # one task on each Slurm node
    # ... each on its own host: gloo on the interface towards the store (the host name says 127.0.1.1)
    logs = {("train.log" if r == 0 else f"train_rank{r}.log"): {("eth0", name)} for r, name in names.items()}
    assert gloo_hosts(run_dir) == logs, gloo_hosts(run_dir)
    return s


def test_bad_launcher_values_are_refused_before_submitting(tmp_path):
    cases = {
        "multiple of launcher.tasks_per_node": ["launcher=slurm", "nodes=3", "launcher.tasks_per_node=2"],
        "launcher.time_min must be >= 1": ["launcher=slurm", "nodes=2", "launcher.time_min=-5"],
        "launcher.signal must name a catchable signal": ["launcher=slurm", "nodes=2", "launcher.signal=NOPE"],
        "sbatch not found: ": ["launcher=slurm", "nodes=2"],
        "launcher.array=true needs sync.elastic=true": ["launcher=slurm", "nodes=2", "launcher.array=true",
                                                        "sync.elastic=false"],
        "launcher.tasks_per_node must be 1, got 2": ["launcher=slurm", "nodes=2", "launcher.array=true",
                                                     "launcher.tasks_per_node=2"],
    }
    empty = tmp_path / "empty_path"
    empty.mkdir()
    procs = {}
    for i, (msg, args) in enumerate(cases.items()):
        env = dict(os.environ, PATH=str(empty)) if msg.startswith("sbatch") else dict(os.environ)
        procs[msg] = (str(tmp_path / f"run{i}"), subprocess.Popen(
            [sys.executable, "-m", "launch.train", f"hydra.run.dir={tmp_path / f'run{i}'}", *TINY, *args], cwd=ROOT,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for msg, (run_dir, p) in procs.items():
        out, err = p.communicate(timeout=120)
        assert p.returncode == 2, (msg, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and msg in lines[0], (msg, err)
        assert not os.path.exists(os.path.join(run_dir, "slurm")), "something was submitted"


def test_two_node_job_waits_streams_and_completes(slurm, tmp_path):
    run_dir, crash_dir = str(tmp_path / "run"), str(tmp_path / "crash")
    # beside it, a job whose env crashes in every rank: launcher.wait=true exits non-zero for it
    crash = subprocess.Popen([sys.executable, "-m", "launch.train", f"hydra.run.dir={crash_dir}", *TINY, *SLURM,
                              "launcher.wait=true", "env.id=tests.envs:CrashAfter-v0", "train.max_env_frames=100000"],
                             cwd=ROOT, env=slurm.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.time()
    # submitted from a host whose tcmalloc is where the nodes have none: the job does not inherit it
    # (the loader's "cannot be preloaded" in every task), its nodes preload their own (allocator.py)
    login = dict(slurm.env, LD_PRELOAD="/login-only/libtcmalloc_minimal.so.4")
    proc = launch(login, f"hydra.run.dir={run_dir}", *TINY, *SLURM, "launcher.wait=true",
                  "train.max_env_frames=2048")
    took = time.time() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    job = re.search(r"submitted Slurm job (\d+): 2 node\(s\) x 1 task\(s\); run directory (\S+)", proc.stdout)
    assert job and job.group(2) == run_dir, proc.stdout[-2000:]
    job = job.group(1)
    assert "run finished" in proc.stdout  # rank 0's log, streamed
    assert f"Slurm job {job} ended COMPLETED" in proc.stdout
    assert slurm.final_state(job) == "COMPLETED", task_logs(run_dir, job)
    s = assert_node_run(run_dir)
    # submitit's files: one batch script, one stdout per task
    assert len(glob.glob(os.path.join(run_dir, "slurm", f"{job}_*_log.out"))) == 2
    task_files = glob.glob(os.path.join(run_dir, "slurm", f"{job}_*_log.*"))
    assert task_files and not [f for f in task_files if "cannot be preloaded" in open(f, errors="replace").read()]
    assert s["allocator"] == ("tcmalloc" if tcmalloc_library() else "system")
    print(f"2-node Slurm job: {took:.1f} s from command to result")

    out = crash.communicate(timeout=180)[0]
    assert crash.returncode == 1, out[-3000:]
    bad = re.search(r"submitted Slurm job (\d+)", out).group(1)
    assert f"Slurm job {bad} ended FAILED" in out
    logs = "".join(open(f).read() for f in glob.glob(os.path.join(crash_dir, "train*.log")))
    assert "env exploded on purpose" in logs  # the crashed worker's traceback, in its rank's log
    assert slurm.final_state(bad) == "FAILED"


def test_sweep_submits_one_two_node_job_per_point(slurm, tmp_path):
    sweep = str(tmp_path / "sweep")
    proc = launch(slurm.env, "-m", "algo.lr=1e-3,3e-3", f"hydra.sweep.dir={sweep}", *TINY, *SLURM,
                  "train.max_env_frames=2048")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = re.findall(r"submitted Slurm job (\d+): 2 node\(s\) x 1 task\(s\); run directory (\S+)", proc.stdout)
    assert [d for _, d in jobs] == [os.path.join(sweep, "0"), os.path.join(sweep, "1")], proc.stdout
    assert not os.path.exists(os.path.join(sweep, "0", "summary.json"))  # submitted, not waited for
    for (job, run_dir), lr in zip(jobs, ("0.001", "0.003")):
        assert slurm.final_state(job) == "COMPLETED", task_logs(run_dir, job)
        assert re.search(rf"\n  lr: {lr}\n", open(os.path.join(run_dir, "config.yaml")).read())
        assert glob.glob(os.path.join(run_dir, "tb", "events.out.tfevents.*"))
        assert_node_run(run_dir)


def test_preemption_signal_and_requeue_checkpoint_and_resume(slurm, tmp_path):
    """USR2 (what Slurm sends signal_delay_s before the time limit): every rank stops after the same
    iteration, rank 0 checkpoints and requeues the job. Then an external `scontrol requeue` (SIGTERM,
    as preemption): a checkpoint again, Slurm requeues. Each run resumes where the last one stopped.
    Three nodes, on three hosts."""
    run_dir, target = str(tmp_path / "run"), 12000  # the second run must still train when the requeue comes
    log = os.path.join(run_dir, "train.log")
    semaphores = set(glob.glob("/dev/shm/sem.mp-*"))
    # a slow env step so that the job is still training when the signals come
    three = [a if a != "nodes=2" else "nodes=3" for a in SLURM]
    proc = subprocess.Popen([sys.executable, "-m", "launch.train", f"hydra.run.dir={run_dir}", *TINY, *three,
                             "launcher.wait=true", f"train.max_env_frames={target}", "env.id=tests.envs:SlowBandit-v0"],
                            cwd=ROOT, env=slurm.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_for(what, ok, timeout=90):
        deadline = time.time() + timeout
        while not ok():
            if time.time() > deadline or proc.poll() is not None:
                tail = open(log).read()[-3000:] if os.path.exists(log) else "(no train.log)"
                raise AssertionError(f"{what} not seen in {timeout} s (launcher exit code {proc.poll()}, "
                                     f"job {slurm.job(job).get('JobState')}):\n{tail}")
            time.sleep(0.2)

    def training_past(frames):
        text = open(log).read() if os.path.exists(log) else ""
        return any(int(f.replace(",", "")) > frames for f in re.findall(r"\] - frames ([\d,]+)", text))

    def requeued(n):
        info = slurm.job(job)
        if info.get("Restarts") == str(n) and info.get("JobState") == "PENDING":
            # Slurm holds a requeued job for ~2 minutes (BeginTime); let it start at once
            slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now")
            return True
        return False

    try:
        first = ""
        while "submitted Slurm job" not in first:
            line = proc.stdout.readline()
            assert line, first
            first += line
        job = re.search(r"submitted Slurm job (\d+)", first).group(1)
        wait_for("training", lambda: training_past(0))
        slurm.run("scancel", "--signal=USR2", job)
        wait_for("requeue after USR2", lambda: requeued(1))
        wait_for("resume", lambda: re.search(r"resumed from \S+: (\d+) env frames", open(log).read()))
        first_resume = int(re.search(r"resumed from \S+: (\d+) env frames", open(log).read()).group(1))
        wait_for("training after the resume", lambda: training_past(first_resume))
        slurm.run("scontrol", "requeue", job)
        wait_for("requeue by scontrol", lambda: requeued(2))
        rest = proc.communicate(timeout=180)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    out = first + rest
    assert proc.returncode == 0, out[-4000:]
    assert f"Slurm job {job} ended COMPLETED" in out
    assert slurm.final_state(job) == "COMPLETED", task_logs(run_dir, job)
    assert [state for state, _ in slurm.sacct(job, all_runs=True)] == ["REQUEUED", "REQUEUED", "COMPLETED"]
    text = open(log).read()
    assert "received SIGUSR2" in text and f"requeued Slurm job {job} after the checkpoint" in text
    assert "received SIGTERM" in text
    resumes = [(path, int(n)) for path, n in re.findall(r"resumed from (\S+): (\d+) env frames", text)]
    assert len(resumes) == 2 and 0 < resumes[0][1] < resumes[1][1] < target, resumes  # never from zero
    for rank in (1, 2):
        other = open(os.path.join(run_dir, f"train_rank{rank}.log")).read()
        assert [int(n) for n in re.findall(r"resumed from \S+: (\d+) env frames", other)] == [n for _, n in resumes]
    s = assert_node_run(run_dir, 3)
    assert s["resumed_from"] == resumes[1][0]
    assert target <= s["env_frames"] <= target + 3 * 128  # one iteration: 128 samples from each rank
    # the last run trained only what was left: the frame counter went on from the checkpoint
    assert s["fps"] * s["seconds"] == pytest.approx(s["env_frames"] - resumes[1][1], rel=0.02)
    # every run left on its own after the requeue's SIGTERM, none sat out KillWait to its SIGKILL
    # (which leaves multiprocessing's named semaphores behind)
    assert not set(glob.glob("/dev/shm/sem.mp-*")) - semaphores
    stamp = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\]\[launch\.slurm\]\[INFO\] - "
    requeue_at = re.search(stamp + "requeued Slurm job", text).group(1)
    restarted = re.search(stamp + r"rank 0: Slurm job \d+ task 0 on node \S+ \(restart 1\)", text).group(1)
    gap = (datetime.fromisoformat(restarted) - datetime.fromisoformat(requeue_at)).total_seconds()
    assert gap < 20, f"the job ran again {gap:.0f} s after its requeue: a task sat out KillWait (30 s)"


def test_hydra_submitit_launcher_runs_two_node_jobs(slurm, tmp_path):
    sweep = str(tmp_path / "sweep")
    proc = launch(slurm.env, "-m", "hydra/launcher=submitit_slurm", "hydra.launcher.nodes=2",
                  "hydra.launcher.tasks_per_node=1", f"hydra.launcher.partition={slurm.partition}",
                  "hydra.launcher.timeout_min=5", f"hydra.sweep.dir={sweep}", "algo.lr=1e-3,3e-3", *TINY,
                  "train.max_env_frames=2048")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for point in ("0", "1"):
        run_dir = os.path.join(sweep, point)
        assert_node_run(run_dir)  # both tasks of the point trained in the same run directory
        assert os.path.isfile(os.path.join(run_dir, "config.yaml"))


def test_srun_in_a_fixed_world_and_an_srun_after_it_finished_resumes(slurm, tmp_path):
    """A fixed world meets at the port its rank 0 published in the run directory (launch.slurm.step).
    The second srun relaunches the finished run with a higher limit: it resumes and trains on."""
    run_dir = str(tmp_path / "run")
    script = tmp_path / "job.sh"
    args = " ".join([f"hydra.run.dir={run_dir}", *TINY, "sync.elastic=false"])
    script.write_text(f"#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1 --time=5 --output={tmp_path}/slurm-%j.out\n"
                      f"cd {ROOT}\nsrun {sys.executable} -m launch.train {args} train.max_env_frames=2048 || exit 1\n"
                      f"srun {sys.executable} -m launch.train {args} train.max_env_frames=4096\n")
    job = slurm.run("sbatch", "--parsable", str(script)).stdout.strip().split(";")[0]
    state = slurm.final_state(job)
    assert state == "COMPLETED", open(glob.glob(f"{tmp_path}/slurm-*.out")[0]).read()[-3000:]
    s = assert_node_run(run_dir)
    assert s["resumed_from"] and s["env_frames"] >= 4096, s
    published = glob.glob(os.path.join(run_dir, "slurm", f"master_port.{job}.*"))
    assert len(published) == 2, published


def _task_pid(job, rank):
    """The node process of task `rank` of job `job` (not srun, whose command line names launch.train too)."""
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{d}/environ", "rb") as f:
                environ = set(f.read().split(b"\0"))
        except OSError:
            continue
        if (b"launch.train" in argv and os.path.basename(argv[0]).startswith(b"python")
                and {f"SLURM_JOB_ID={job}".encode(), f"SLURM_PROCID={rank}".encode()} <= environ):
            return int(d)
    raise AssertionError(f"no node process of task {rank} of job {job}")


def test_srun_relaunches_after_a_stop_a_failure_and_the_end_resume(slurm, tmp_path):
    """Four srun steps of one elastic run in one allocation, each the same command: stopped (SIGINT to
    rank 0: both stop after the same iteration, checkpoint, exit 130), failed (rank 1 SIGKILLed; with
    sync.min_nodes=2 rank 0 checkpoints and exits 75), finished, and once more with a higher limit
    after the end. Each step is a launch of its own (sync.launches: job, step, restart): it resumes
    where the last one ended, never from zero and never a silent exit 0."""
    run_dir, target = str(tmp_path / "run"), tmp_path / "target"
    log = os.path.join(run_dir, "train.log")
    semaphores = set(glob.glob("/dev/shm/sem.mp-*"))
    srun = f"srun {sys.executable} -m launch.train " + " ".join([f"hydra.run.dir={run_dir}", *TINY])
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1 --time=5 --output={tmp_path}/slurm-%j.out\n"
                      f"cd {ROOT}\n{srun} train.max_env_frames=100000000; echo step 0: $?\n"
                      f"{srun} train.max_env_frames=100000000 sync.min_nodes=2; echo step 1: $?\n"
                      f"until [ -s {target} ]; do sleep 0.2; done\n"
                      f"{srun} train.max_env_frames=$(cat {target}) || exit 1\n"
                      f"{srun} train.max_env_frames=$(($(cat {target}) + 2048))\n")
    job = slurm.run("sbatch", "--parsable", str(script)).stdout.strip().split(";")[0]
    out = lambda: "".join(open(p).read() for p in glob.glob(f"{tmp_path}/slurm-*.out"))  # noqa: E731

    def trains(resumed):  # the step's two nodes train (after its resume)
        deadline = time.time() + 120
        while True:
            text = open(log).read() if os.path.exists(log) else ""
            _, formed, rest = text.split("resumed from")[-1].partition("node 0 is rank 0 of 2")
            if text.count("resumed from") == resumed and formed and re.search(r"\] - frames ", rest):
                return
            assert time.time() < deadline, f"step {resumed} does not train:\n{text[-3000:]}\n{out()[-2000:]}"
            time.sleep(0.2)

    def step_ended(step):
        deadline = time.time() + 120
        while f"step {step}: " not in out():
            assert time.time() < deadline, f"step {step} did not end:\n{out()[-3000:]}"
            time.sleep(0.2)
        return int(re.search(rf"step {step}: (\d+)", out()).group(1))

    trains(0)
    os.kill(_task_pid(job, 0), signal.SIGINT)
    assert step_ended(0) != 0 and summary(run_dir)["outcome"] == "stopped by SIGINT"
    stopped = summary(run_dir)["env_frames"]
    trains(1)
    os.kill(_task_pid(job, 1), signal.SIGKILL)
    assert step_ended(1) != 0 and summary(run_dir)["outcome"] == "stopped: below sync.min_nodes"
    failed = summary(run_dir)["env_frames"]
    assert failed > stopped, (stopped, failed)
    target.write_text(str(failed + 2048))
    assert slurm.final_state(job) == "COMPLETED", out()[-3000:]
    s = assert_node_run(run_dir)
    resumes = [int(n) for n in re.findall(r"resumed from \S+: (\d+) env frames", open(log).read())]
    assert len(resumes) == 3 and resumes[:2] == [stopped, failed] and resumes[2] >= failed + 2048, resumes
    assert s["env_frames"] >= failed + 4096 and s["resumed_from"], s
    assert not set(glob.glob("/dev/shm/sem.mp-*")) - semaphores  # the killed node's cleaners ran


def test_gpu_job_is_submitted_from_a_cpu_host_and_fails_on_its_nodes_in_one_line(slurm, tmp_path):
    """A login node without a GPU submits a train.device=cuda job (asking each node for a GPU per
    task: the test cluster has count-only GPUs); CUDA is checked where each rank starts, and on
    these CPU-only nodes every rank fails with one line naming its host, before any worker starts."""
    run_dir = str(tmp_path / "run")
    proc = launch(slurm.env, f"hydra.run.dir={run_dir}", *TINY, *SLURM, "launcher.wait=true", "train.device=cuda",
                  "launcher.cpus_per_task=1")
    job = re.search(r"submitted Slurm job (\d+)", proc.stdout)
    assert job, proc.stdout[-3000:] + proc.stderr[-3000:]
    job = job.group(1)
    assert proc.returncode == 1 and f"Slurm job {job} ended FAILED" in proc.stdout, proc.stdout[-3000:]
    assert "--gpus-per-node=1" in open(glob.glob(os.path.join(run_dir, "slurm", f"{job}_submission.sh"))[0]).read()
    for task in (0, 1):
        err = open(os.path.join(run_dir, "slurm", f"{job}_{task}_log.err")).read()
        errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1 and "train.device=cuda but no CUDA device is visible on host" in errors[0], err[-2000:]
        assert "Traceback" not in err, err[-3000:]
    assert not os.path.exists(os.path.join(run_dir, "checkpoints"))


def test_job_array_element_requeued_leaves_and_rejoins(slurm, tmp_path):
    """launcher.array=true: two one-node jobs form the world; `scontrol requeue` of element 1 ends
    that node (SIGTERM: it leaves, it is not a stop vote), node 0 goes on alone, and when Slurm runs
    the element again it rejoins (same node id); the run completes with identical parameters."""
    # SlowBandit (~450 frames/s a node at most): node 1 is back ~14 s after the requeue, at ~3k frames
    # here (node 0 alone could make ~13k in 30 s); 15k leaves a stretch of two nodes after it
    run_dir, target = str(tmp_path / "run"), 15_000
    log = os.path.join(run_dir, "train.log")
    proc = launch(slurm.env, f"hydra.run.dir={run_dir}", *TINY, *SLURM, "launcher.array=true",
                  "env.id=tests.envs:SlowBandit-v0", f"train.max_env_frames={target}", "sync.timeout_s=60", timeout=60)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    m = re.search(r"submitted Slurm job array (\d+): 2 element\(s\) of one node \(jobs (\S+) (\S+)\)", proc.stdout)
    assert m, proc.stdout
    first, second = m.group(2), m.group(3)

    def wait_for(what, ok, timeout=120):
        deadline = time.time() + timeout
        while not ok():
            if time.time() > deadline:
                tail = open(log).read()[-3000:] if os.path.exists(log) else "(no train.log)"
                raise AssertionError(f"{what} not seen in {timeout} s (element 1: {slurm.job(second).get('JobState')})"
                                     f":\n{tail}\n{task_logs(run_dir, m.group(1))}")
            time.sleep(0.3)

    def logged(pattern):
        return os.path.exists(log) and re.search(pattern, open(log).read())

    wait_for("training on two nodes", lambda: logged(r"frames [\d,]+ \| fps .*\| nodes 2"))
    slurm.run("scontrol", "requeue", second)
    wait_for("node 1 lost", lambda: logged(r"world changed: 2 -> 1 nodes \(left \[1\]"))

    def pending_again():
        if slurm.job(second).get("JobState") == "PENDING":
            slurm.run("scontrol", "update", f"JobId={second}", "StartTime=now")  # skip Slurm's requeue hold
            return True
        return False

    wait_for("element 1 pending again", pending_again)
    wait_for("node 1 back", lambda: logged(r"world changed: 1 -> 2 nodes \(left none, joined \[1\]"), timeout=180)
    assert slurm.final_state(first, timeout=240) == "COMPLETED", task_logs(run_dir, m.group(1))
    assert slurm.final_state(second, timeout=60) == "COMPLETED", task_logs(run_dir, m.group(1))
    s = summary(run_dir)
    assert s["outcome"] == "finished" and s["env_frames"] >= target and s["nodes"] == 2
    assert len(set(s["param_checksums"])) == 1
    assert [(c["left"], c["joined"]) for c in s["membership"]] == [([], [0, 1]), ([1], []), ([], [1])]
    assert "leaves the run on signal 15" in open(os.path.join(run_dir, "train_rank1.log")).read()
