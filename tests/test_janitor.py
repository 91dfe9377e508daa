"""The CUDA driver's /dev/shm file of a process that shares memory by CUDA IPC handle (the learner's
weights) is left behind even at a clean exit (seen on an H100), so the main process removes its own
at exit, and torch's reference-count files for shared CUDA tensors at launch.process.exits.exit_now (torch
removes them at an interpreter's exit, which exit_now skips); the janitor removes both of a killed
main process. Faked here by name (no CUDA on this machine): what is tested
is that the right files go, and only when they should. On the H100 (2026-11-26, bd58f07): after a
clean run /dev/shm was empty; after the main process was SIGKILLed only torch's file was left."""
import os
import signal
import subprocess
import sys
import textwrap
import time

from helpers import ROOT

FAKE = "/dev/shm/cuda.shm.0.{:x}.1"

MAIN = textwrap.dedent("""
    import os, sys, time
    from multiprocessing import util
    from nodes.sampling.processes import start_janitor, stop_janitor
    janitor = start_janitor()
    open("/dev/shm/cuda.shm.0.%x.1" % os.getpid(), "w").close()
    open("/dev/shm/torch_%d_123_27" % os.getpid(), "w").close()
    print(janitor.pid, util.get_temp_dir(), flush=True)
    if sys.argv[1] == "stop":
        stop_janitor(janitor)  # a normal stop: the main process lives on, so its file stays
        print(os.path.exists("/dev/shm/cuda.shm.0.%x.1" % os.getpid()), flush=True)
        os.unlink("/dev/shm/cuda.shm.0.%x.1" % os.getpid())
        os.unlink("/dev/shm/torch_%d_123_27" % os.getpid())
    else:
        time.sleep(60)
""")


def start_main(how):
    return subprocess.Popen([sys.executable, "-c", MAIN, how], cwd=ROOT, stdout=subprocess.PIPE, text=True)


def gone(path, within_s):
    deadline = time.time() + within_s
    while os.path.exists(path) and time.time() < deadline:
        time.sleep(0.1)
    return not os.path.exists(path)


def test_the_janitor_removes_a_killed_main_process_file_and_leaves_a_living_ones():
    main = start_main("kill")
    janitor_pid, temp_dir = main.stdout.readline().split()
    janitor_pid = int(janitor_pid)
    # and multiprocessing's /tmp/pymp-* of the main process (a normal exit removes it)
    paths = [FAKE.format(main.pid), f"/dev/shm/torch_{main.pid}_123_27", temp_dir]
    try:
        assert all(os.path.exists(p) for p in paths) and "pymp-" in temp_dir
        os.kill(main.pid, signal.SIGKILL)
        main.wait(10)
        for path in paths:
            assert gone(path, 10), f"the killed main process's {path} was left behind"
        assert gone(f"/proc/{janitor_pid}", 10), "the janitor did not exit"
    finally:
        main.kill()
        for path in paths[:2]:
            if os.path.exists(path):
                os.unlink(path)

    main = start_main("stop")
    temp_dir = main.stdout.readline().split()[1]
    assert main.stdout.readline().strip() == "True", "the janitor removed a living main process's file"
    assert main.wait(30) == 0
    assert not os.path.exists(temp_dir), "the main process's normal exit left its multiprocessing temp dir"


def test_the_main_process_removes_its_own_file_at_exit_and_a_forked_child_does_not():
    code = textwrap.dedent("""
        import os
        from nodes.sampling.weights import remove_cuda_ipc_file_at_exit
        print(os.getpid(), flush=True)
        open("/dev/shm/cuda.shm.0.%x.1" % os.getpid(), "w").close()
        remove_cuda_ipc_file_at_exit()
        child = os.fork()
        if child == 0:
            raise SystemExit(0)  # a normal exit of a forked child: atexit runs, the parent's file stays
        os.waitpid(child, 0)
        print(os.path.exists("/dev/shm/cuda.shm.0.%x.1" % os.getpid()), flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    pid, kept_after_child = proc.stdout.split()
    assert kept_after_child == "True", "a forked child's exit removed its parent's file"
    assert not os.path.exists(FAKE.format(int(pid))), "the main process left its CUDA IPC file at exit"


def test_exit_now_removes_the_torch_ipc_files_of_its_process_only():
    """launch.process.exits.exit_now ends by os._exit, which skips the C++ static destructor that removes
    torch's reference-count files: on the H100 (2026-11-27, a62d277) every GPU run left one
    /dev/shm/torch_<pid>_* file until exit_now removed them itself."""
    code = textwrap.dedent("""
        import os
        from launch.process.exits import exit_now
        mine, other = "/dev/shm/torch_%d_123_27" % os.getpid(), "/dev/shm/torch_%d1_123_27" % os.getpid()
        for path in (mine, other):
            open(path, "w").close()
        print(mine, other, flush=True)
        exit_now(3)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    mine, other = proc.stdout.split()
    try:
        assert proc.returncode == 3, proc.stderr
        assert not os.path.exists(mine), "exit_now left its process's torch IPC file"
        assert os.path.exists(other), "exit_now removed another process's file"
    finally:
        for path in (mine, other):
            if os.path.exists(path):
                os.unlink(path)


KILLED_WHOLE = textwrap.dedent("""
    import multiprocessing, os, sys, time
    from nodes.record.checkpoint import temp_path
    from nodes.sampling.processes import start_janitor
    run_dir = sys.argv[1]
    lock = multiprocessing.get_context("forkserver").Lock()  # a named semaphore its resource tracker knows
    janitor = start_janitor(run_dir)
    tmp = temp_path(os.path.join(run_dir, "checkpoints", "checkpoint_000000001.pt"))  # a write under way
    os.makedirs(os.path.dirname(tmp))
    open(tmp, "w").close()
    print("/dev/shm/sem." + lock._semlock.name.lstrip("/"), tmp, flush=True)
    time.sleep(60)
""")


def test_a_node_killed_with_its_whole_process_group_leaves_no_semaphore_and_no_temp_file(tmp_path):
    """SIGKILL to the node's process group (Slurm's at the end of KillWait, a container's stop) kills
    its resource tracker too, which would have unlinked its named semaphores: one 32-byte
    /dev/shm/sem.mp-* was left per semaphore; and a checkpoint's temp file mid-write."""
    main = subprocess.Popen([sys.executable, "-c", KILLED_WHOLE, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    sem, tmp = main.stdout.readline().split()
    try:
        assert os.path.exists(sem) and os.path.exists(tmp)
        time.sleep(1.0)  # the janitor's look (every 0.5 s) at what its node has mapped
        os.killpg(main.pid, signal.SIGKILL)
        main.wait(10)
        assert gone(sem, 10), "the semaphore of a node killed with its resource tracker was left"
        assert gone(tmp, 10), "the temp file of a checkpoint the node was writing was left"
    finally:
        for path in (sem, tmp):
            if os.path.exists(path):
                os.unlink(path)
