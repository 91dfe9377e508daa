"""tcmalloc under the node's processes (launch/process/allocator.py): the entry points start again
with it preloaded, in the same process, once; not where it is missing, already there, refused, or
where the user preloaded an allocator of their own (which summary.json then names)."""
import os
import shutil
import subprocess
import sys

import pytest

from launch.process import allocator
from launch.process.allocator import preload_tcmalloc, tcmalloc_library

PROGRAM = """
import os
from launch.process.allocator import preload_tcmalloc
print("start", os.getpid(), flush=True)
preload_tcmalloc()
print("mapped", "libtcmalloc" in open("/proc/self/maps").read(), os.environ["LD_PRELOAD"], flush=True)
"""


def test_a_process_starts_again_once_with_tcmalloc_and_keeps_its_pid():
    if tcmalloc_library() is None:
        pytest.skip("tcmalloc is not installed (./setup.sh installs Debian's libtcmalloc-minimal4)")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "DISTRL_MALLOC")}
    env["LD_PRELOAD"] = "libm.so.6"  # a library the user preloaded stays, after tcmalloc
    proc = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # the program ran twice (the first run's output came before the execve), in one pid, and stopped there
    assert [line.split()[0] for line in lines] == ["start", "start", "mapped"]
    assert lines[0] == lines[1]
    assert lines[2] == f"mapped True {tcmalloc_library()}:libm.so.6"


def test_nothing_starts_again_where_tcmalloc_is_refused_missing_or_already_there(monkeypatch):
    calls = []
    record = lambda *args: calls.append(args)  # noqa: E731 - stands in for os.execve
    monkeypatch.setattr(allocator, "tcmalloc_library", lambda: "/lib/libtcmalloc_minimal.so.4")
    preload_tcmalloc({"DISTRL_MALLOC": "system"}, execve=record)
    preload_tcmalloc({"LD_PRELOAD": "/elsewhere/libtcmalloc_minimal.so.4"}, execve=record)
    assert calls == []
    preload_tcmalloc({"PATH": "/bin"}, execve=record)
    (exe, argv, env), = calls
    assert exe == sys.executable and argv[1:] == sys.orig_argv[1:]
    assert env == {"PATH": "/bin", "LD_PRELOAD": "/lib/libtcmalloc_minimal.so.4"}
    monkeypatch.setattr(allocator, "tcmalloc_library", lambda: None)
    preload_tcmalloc({"PATH": "/bin"}, execve=record)
    assert len(calls) == 1


@pytest.mark.parametrize("preload", [
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "libmimalloc.so.2:libm.so.6",
    "libm.so.6 /opt/gperftools/lib/libtcmalloc.so.4",  # a full tcmalloc (with its profilers): the user's
    "/usr/local/lib/libhoard.so",
    "/elsewhere/libtcmalloc_minimal.so.4",
])
def test_an_allocator_the_user_preloaded_is_left_alone(monkeypatch, preload):
    """LD_PRELOAD already names a malloc library: tcmalloc put in front of it would serve every
    allocation in its place (the first library preloaded wins), so the user's choice stands."""
    calls = []
    monkeypatch.setattr(allocator, "tcmalloc_library", lambda: "/lib/libtcmalloc_minimal.so.4")
    preload_tcmalloc({"LD_PRELOAD": preload}, execve=lambda *args: calls.append(args))
    assert calls == []


def test_the_allocator_is_named_by_its_library():
    """summary.json's `allocator`: the family of the malloc library a process has mapped."""
    from nodes.record.allocator import allocator_of
    assert [allocator_of(p) for p in ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "libtcmalloc.so.4",
                                      "/usr/lib/libjemalloc.so.2", "libmimalloc.so.2", "libhoard.so")] == [
        "tcmalloc", "tcmalloc", "jemalloc", "mimalloc", "hoard"]
    # neither replaces malloc: glibc's debugging hooks, abseil's internals
    assert allocator_of("/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0") is None
    assert allocator_of("/usr/lib/x86_64-linux-gnu/libabsl_malloc_internal.so.20220623") is None


def test_a_process_on_the_users_allocator_runs_once_and_names_it(tmp_path):
    """A real malloc library preloaded under jemalloc's name (tcmalloc's file, copied): the process
    runs once, with LD_PRELOAD as the user set it, and the summary's allocator() says jemalloc."""
    library = tcmalloc_library()
    if library is None or not library.startswith("/"):
        pytest.skip("tcmalloc is not installed at a path (./setup.sh installs Debian's libtcmalloc-minimal4)")
    users = tmp_path / "libjemalloc.so.2"
    shutil.copy(os.path.realpath(library), users)
    program = ("import os\nfrom launch.process.allocator import preload_tcmalloc\nprint('start', flush=True)\n"
               "preload_tcmalloc()\nfrom nodes.record.allocator import allocator\n"
               "print(allocator(), os.environ['LD_PRELOAD'], flush=True)")
    env = {k: v for k, v in os.environ.items() if k != "DISTRL_MALLOC"}
    env["LD_PRELOAD"] = str(users)
    proc = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["start", f"jemalloc {users}"]


def test_a_slurm_job_gets_the_environment_without_tcmalloc_and_preloads_its_nodes_own(tmp_path):
    """launcher=slurm: sbatch exports the environment, so the submitting host's tcmalloc would be preloaded
    on nodes that may not have it (the loader's "cannot be preloaded" in every task's log); the job script
    preloads the one its node has instead (tests/test_slurm.py runs it in a real job)."""
    env = {"LD_PRELOAD": "/login/libtcmalloc_minimal.so.4:libm.so.6", "PATH": "/bin"}
    with allocator.submitting_without_tcmalloc(env):
        assert env["LD_PRELOAD"] == "libm.so.6"  # what sbatch exports: the user's other libraries only
    assert env["LD_PRELOAD"] == "/login/libtcmalloc_minimal.so.4:libm.so.6"
    alone = {"LD_PRELOAD": "/login/libtcmalloc_minimal.so.4"}
    with allocator.submitting_without_tcmalloc(alone):
        assert "LD_PRELOAD" not in alone
    assert alone == {"LD_PRELOAD": "/login/libtcmalloc_minimal.so.4"}

    node_lib = tmp_path / "libtcmalloc_minimal.so.4"  # where this node has it: the submitting host's path
    node_lib.write_bytes(b"")
    line = allocator.job_preload_line({"LD_PRELOAD": f"{node_lib}:libm.so.6"})

    def on_node(**env):  # the job script's line on a node, then its LD_PRELOAD
        out = subprocess.run(["bash", "-c", f'{line}\necho "LD_PRELOAD=${{LD_PRELOAD:-}}"'],
                             env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, check=True)
        return out.stdout.strip()

    assert on_node(LD_PRELOAD="libm.so.6") == f"LD_PRELOAD={node_lib}:libm.so.6"
    assert on_node() == f"LD_PRELOAD={node_lib}"
    assert on_node(DISTRL_MALLOC="system") == "LD_PRELOAD="
    assert on_node(LD_PRELOAD="/x/libtcmalloc_minimal.so.4") == "LD_PRELOAD=/x/libtcmalloc_minimal.so.4"
    assert on_node(LD_PRELOAD="/x/libjemalloc.so.2") == "LD_PRELOAD=/x/libjemalloc.so.2"  # the user's allocator
    node_lib.unlink()  # a node without it (and none at Debian's paths, where this machine has none)
    if tcmalloc_library() is None or not tcmalloc_library().startswith("/"):
        assert on_node(LD_PRELOAD="libm.so.6") == "LD_PRELOAD=libm.so.6"
    else:  # this machine's own, at one of Debian's paths
        assert on_node(LD_PRELOAD="libm.so.6") == f"LD_PRELOAD={tcmalloc_library()}:libm.so.6"
