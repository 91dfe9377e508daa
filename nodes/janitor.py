"""Janitor: make sure no node process and no VizDoom segment outlives the trainer.

Started by the node's main process as `python nodes/janitor.py MAIN_PID [MP_TEMP_DIR [RUN_DIR]]`
in a new process group whose id is its own pid; every worker joins that group, and VizDoom engines
inherit it. The janitor reads its stdin until EOF, which comes when the main process exits OR is
SIGKILLed (the main writes STOP at the very end of its run, after the final checkpoint and the
summary). Then it SIGKILLs every other member of the group (VizDoom engines ignore SIGTERM),
removes the /dev/shm segments of the VizDoom instances it saw (`+viz_instance_id` on the engine
command line) and the working directories under RUN_DIR/.workers/ of every member it saw, this
host's only (`workdir_name`; a killed evaluator or worker never removes its own). If the pipe
closed without STOP written first, the main process died (SIGKILL, or `os._exit`, which runs no
atexit), perhaps mid-write; the janitor then also removes what it leaves:
- its temp files in RUN_DIR (nodes.record.checkpoint.temp_path: checkpoints, best.pt, summary.json);
- the files the CUDA driver and torch keep for CUDA IPC (`cuda_ipc_files`, `torch_ipc_files`; at a
  normal exit the main process removes both: the driver's in nodes/sampling/weights.py's atexit,
  torch's in launch.process.exits.exit_now);
- multiprocessing's /tmp/pymp-* directory of it (the fork server's listener socket; multiprocessing
  removes it at a normal exit only: a test suite that kills nodes left a dozen of them in /tmp per run);
- the named semaphores it and its workers had mapped (`mapped_semaphores`: their resource tracker
  may have died with them).
Standalone on purpose (stdlib only, run by path) so it starts fast and imports nothing of ours.
Its /proc readers serve the node too: `descendants` (a process tree: the node's memory and CPU
accounting, a match's engines), `INSTANCE_ARG` (a VizDoom engine's shared-memory name).
"""
import contextlib
import glob
import os
import re
import select
import shutil
import signal
import socket
import sys
import time

STOP = b"stop"  # what the main process writes before closing the pipe when it lives on (processes.stop_janitor)
INSTANCE_ARG = re.compile(rb"\+viz_instance_id\x00([^\x00]+)")


def cuda_ipc_files(pid: int) -> list:
    """/dev/shm/cuda.shm.<device>.<pid in hex>.<n>: what the CUDA driver makes for a process that
    shares its memory by CUDA IPC handle (the learner's weights, mapped by the policy workers) and
    never removes, not even at a clean exit (seen on an H100, driver 580; Sample Factory leaves it
    too)."""
    return glob.glob(f"/dev/shm/cuda.shm.*.{pid:x}.*")


def torch_ipc_files(pid: int) -> list:
    """/dev/shm/torch_<pid>_<n>_<m>: torch's reference counts for the CUDA tensors a process shares
    (torch.multiprocessing), which torch removes in a C++ static destructor: at an interpreter's
    exit only, never at os._exit (seen on the H100)."""
    return glob.glob(f"/dev/shm/torch_{pid}_*")


def remove(paths) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


def remove_mp_temp_dir(path: str) -> None:
    """multiprocessing's per-process temp dir (util.get_temp_dir(): /tmp/pymp-XXXX); nothing else."""
    if os.path.basename(path).startswith("pymp-"):
        shutil.rmtree(path, ignore_errors=True)


def descendants(root: int) -> list[int]:
    """root and every process below it (by parent pid, from /proc/<pid>/stat)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])  # the command may contain spaces and ')'
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def group_members(pgid: int):
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
            # fields after the command (which may hold spaces) start after the last ')'
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != b"Z":
                yield int(d)
        except (OSError, ValueError, IndexError):
            continue


def scan(pgid: int, instances: set, seen: set) -> list:
    pids = list(group_members(pgid))
    seen.update(pids)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                m = INSTANCE_ARG.search(f.read())
            if m:
                instances.add(m.group(1).decode())
        except OSError:
            pass
    return pids


def sweep(pgid: int, instances: set, seen: set) -> None:
    deadline = time.time() + 10
    while time.time() < deadline:
        pids = scan(pgid, instances, seen)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    for inst in instances:
        remove(glob.glob(f"/dev/shm/ViZDoom*{inst}"))


def host_tag() -> str:
    """This host's name as a working directory carries it: any character but a letter, a digit, '.'
    and '-' made '-', so that no name holds '_' (the separator) or a glob's metacharacter."""
    return re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())


def workdir_name(name: str, pid: int) -> str:
    """<name>_<host>_pid<pid>: the working directory of process `pid` of this host under
    RUN_DIR/.workers/ (nodes.envs.env_workdir). By host too: nodes on several hosts share the
    run directory, and in containers pids repeat from host to host."""
    return f"{name}_{host_tag()}_pid{pid}"


def remove_workdirs(run_dir: str, pids) -> None:
    """The working directories of these (ended) processes of this host; another host's of the same
    pid belong to a process that may be alive."""
    for pid in pids:
        pattern = os.path.join(glob.escape(run_dir), ".workers", workdir_name("*", pid))
        for path in glob.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)


def remove_temp_files(run_dir: str, pid: int) -> None:
    """The temp files a writer killed mid-write left: nodes.record.checkpoint.temp_path's names
    (<file>.tmp.<host>.<pid>) of this host's `pid`, in the run directory and its checkpoints."""
    suffix = f".tmp.{socket.gethostname()}.{pid}"
    for d in (run_dir, os.path.join(run_dir, "checkpoints")):
        remove(glob.glob(os.path.join(glob.escape(d), "*" + suffix)))


def mapped_semaphores(pid: int) -> set:
    """The inodes of the named semaphores (multiprocessing's /dev/shm/sem.mp-*: its queues' and
    locks') that process `pid` has mapped. Its resource tracker unlinks them when it dies, unless
    the tracker dies with it: a SIGKILL to the node's whole process group (Slurm's at the end of a
    step's KillWait, a container's stop) left one 32-byte file per semaphore. By inode: glibc maps a
    new semaphore under a temp name it then renames (the maps show `/dev/shm/sem.XXXXXX (deleted)`)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return {int(line.split()[4]) for line in f if "/dev/shm/sem." in line}
    except (OSError, ValueError, IndexError):
        return set()


def remove_semaphores(inodes: set) -> None:
    for path in glob.glob("/dev/shm/sem.mp-*"):
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino in inodes:
                os.unlink(path)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pgid = os.getpgrp()
    # the main process's pid from its command line: os.getppid() here could already be init's
    parent = int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid()
    temp_dir = sys.argv[2] if len(sys.argv) > 2 else ""
    run_dir = sys.argv[3] if len(sys.argv) > 3 else ""
    instances: set = set()
    seen: set = set()  # every member of the group so far
    semaphores: set = set()  # the main process's and its workers', so far
    orderly = False  # the main process said STOP before closing the pipe: it lives on
    fd = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            data = os.read(fd, 4096)
            if not data:
                break  # EOF: the main process is done or dead
            orderly = orderly or STOP in data
        for pid in [parent, *scan(pgid, instances, seen)]:
            semaphores |= mapped_semaphores(pid)
    sweep(pgid, instances, seen)
    if run_dir:
        remove_workdirs(run_dir, seen)
    if not orderly:  # the main process died (killed, or os._exit): no atexit of its own ran
        deadline = time.time() + 5
        while os.getppid() == parent and time.time() < deadline:
            time.sleep(0.05)  # its pipe closes before it is reaped
        remove(cuda_ipc_files(parent) + torch_ipc_files(parent))
        if temp_dir:
            remove_mp_temp_dir(temp_dir)
        if run_dir:
            remove_temp_files(run_dir, parent)
        time.sleep(1.0)  # a resource tracker that lives on unlinks them itself (and warns if it finds one gone)
        remove_semaphores(semaphores)


if __name__ == "__main__":
    main()
