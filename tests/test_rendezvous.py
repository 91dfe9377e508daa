"""sync.rendezvous: the elastic run's generations, formed through the real FileStore in a run
directory and hosted by real store-keeper processes (nodes here are threads of this process)."""
import os
import socket
import threading
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from sync.launches import launch_id
from sync.rendezvous import Rendezvous, RunFull, RunOver, current_world, reset
from sync.store_keeper import running


def store_client(gen, timeout_s: float) -> dist.TCPStore:
    """A client of generation `gen`'s TCPStore, as a member connects to it (sync.dist_peers)."""
    return dist.TCPStore(gen.store_addr, gen.store_port, len(gen.members), is_master=False,
                         timeout=timedelta(seconds=timeout_s))


def together(run_dir, calls):
    """Run (node id, lost, after) joins at once, one thread each; {node: Generation or exception}."""
    out, made = {}, []

    def one(node, lost, after, kw):
        r = Rendezvous(run_dir, node, settle_s=kw.get("settle_s", 3.0), timeout_s=20, first_size=kw.get("first", 3),
                       max_nodes=kw.get("max_nodes", 0))
        made.append(r)
        try:
            out[r.node] = r.join(lost, after)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            out[r.node] = exc

    threads = [threading.Thread(target=one, args=(*c[:3], c[3] if len(c) > 3 else {})) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out, made


def close_all(made):
    for r in made:
        r.close()


def test_first_generation_then_a_loss_then_a_late_survivor_and_a_newcomer(tmp_path):
    run = str(tmp_path)
    reset(run)
    assert current_world(run) is None  # what a launcher reads (launch.spawn.local): nothing formed yet
    out, made = together(run, [(2, (), None), (0, (), None), (1, (), None)])
    gens = set(out.values())
    assert len(gens) == 1
    gen0 = gens.pop()
    assert gen0.number == 0 and gen0.members == (0, 1, 2) and gen0.rank_of(2) == 2
    assert current_world(run) == gen0
    client = store_client(gen0, 5)  # the lowest node's store keeper serves the generation
    client.set("k", "v")
    assert client.get("k") == b"v"

    # 0 and 1 saw 2 lost: the round closes once they are both there, not after settle_s
    t0 = time.monotonic()
    out, more = together(run, [(0, [2], 0, {"settle_s": 30}), (1, [2], 0, {"settle_s": 30})])
    made += more
    assert time.monotonic() - t0 < 10
    assert {g.members for g in out.values()} == {(0, 1)} and out[0].number == 1
    assert current_world(run) == out[0]  # node 2 is no longer in the world

    # node 2 was only late (it comes back for round 1, closed already): it waits, the others see
    # someone waiting, come to round 2, and 2 is in it; so is a newcomer that takes the next free id
    probe = Rendezvous(run, 0, 3.0, 20, first_size=3)
    assert not probe.join_waiting(1)
    late = {}

    def come(node, key):
        r = Rendezvous(run, node, 3.0, 20, first_size=3)
        made.append(r)
        late[key] = (r.node, r.join([], 0 if node == 2 else None))

    waiters = [threading.Thread(target=come, args=(2, "late")), threading.Thread(target=come, args=(None, "new"))]
    for w in waiters:
        w.start()

    def waiting():  # arrivals for round 2, seen in the rendezvous file
        return len(probe.store.get("round/2").decode().split(",")) if probe.join_waiting(1) else 0

    deadline = time.time() + 10
    while waiting() < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert waiting() == 2
    out, more = together(run, [(0, (), 1), (1, (), 1)])
    made += more
    for w in waiters:
        w.join(30)
    assert late["late"][1].members == (0, 1, 2, 3) and late["late"][1].number == 2
    assert late["new"][0] == 3 and late["new"][1] == late["late"][1] == out[0] == out[1]  # the newcomer got id 3
    close_all(made)


def test_max_nodes_turns_a_newcomer_away_and_a_finished_run_has_nothing_to_join(tmp_path):
    run = str(tmp_path)
    reset(run)
    kw = {"first": 2, "max_nodes": 2}
    out, made = together(run, [(0, (), None, kw), (1, (), None, kw)])
    assert out[0].members == (0, 1)
    # a third node is turned away without disturbing the world
    with pytest.raises(RunFull, match="sync.max_nodes=2"):
        Rendezvous(run, None, 3.0, 20, first_size=2, max_nodes=2).join()
    assert not made[0].join_waiting(0)
    made[0].mark_over("finished")
    with pytest.raises(RunOver, match="finished"):
        Rendezvous(run, None, 3.0, 20, first_size=2).join()
    close_all(made)


def test_a_relaunch_forms_its_own_generations_and_a_joiner_takes_the_current_launch(tmp_path):
    """A run marked over by launch A (finished, or below min_nodes) is relaunched as B (srun, torchrun
    or our spawner, never reset by hand): B's nodes form generation 0 of their own; a node started by
    hand joins B, the current launch, not A."""
    run = str(tmp_path)
    first = [Rendezvous(run, n, 3.0, 20, first_size=2, launch="A") for n in (0, 1)]
    formed = [None, None]
    threads = [threading.Thread(target=lambda i=i: formed.__setitem__(i, first[i].join())) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert formed[0].number == 0 and formed[0].members == (0, 1)
    first[0].mark_over("failed")
    close_all(first)
    again = [Rendezvous(run, n, 3.0, 20, first_size=1, launch="B") for n in (0,)]
    gen = again[0].join()
    assert (gen.number, gen.members) == (0, (0,))  # not "the run is over": B is a launch of its own
    joiner = Rendezvous(run, None, 3.0, 20, first_size=1)
    assert joiner.launch == "B" and joiner.node == 1  # ids count within B
    again[0].mark_over("finished")
    with pytest.raises(RunOver, match="finished"):
        joiner.join()
    close_all(again)


def test_every_rank_of_a_launch_derives_one_key_and_two_launches_two():
    assert launch_id({"DISTRL_LAUNCH_ID": "local-1", "SLURM_JOB_ID": "7"}) == "local-1"
    step = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}
    assert launch_id(step) == launch_id({**step, "SLURM_PROCID": "0"}) == "slurm-7.0.0"
    assert len({launch_id(step), launch_id({**step, "SLURM_STEP_ID": "1"}),
                launch_id({**step, "SLURM_RESTART_COUNT": "1"})}) == 3  # a second srun, a requeued job
    # an array element that requeues itself rejoins the elements still running: one key for the array
    element = {"SLURM_ARRAY_JOB_ID": "9", "SLURM_ARRAY_TASK_ID": "1", "SLURM_JOB_ID": "10", "SLURM_STEP_ID": "0"}
    assert launch_id(element) == launch_id({**element, "SLURM_RESTART_COUNT": "2"}) == "slurm-array-9"
    assert launch_id({}) is None and launch_id({"SLURM_JOB_ID": "7"}) is None  # joins the current launch
    # torchrun: a token in its agents' store, one per store (per launch), with its restart count
    stores = [dist.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False) for _ in range(2)]
    ranks = [{"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(s.port),
              "TORCHELASTIC_RESTART_COUNT": "0", "RANK": str(r)} for s in stores for r in (0, 1)]
    keys = [launch_id(env) for env in ranks]
    assert keys[0] == keys[1] != keys[2] == keys[3] and keys[0].startswith("torchrun-")
    assert launch_id({**ranks[0], "TORCHELASTIC_RESTART_COUNT": "1"}) not in keys


def test_store_keeper_ends_with_its_node(tmp_path):
    run = str(tmp_path)
    reset(run)
    out, made = together(run, [(0, (), None, {"first": 1})])
    gen = out[0]
    with socket.create_connection((gen.store_addr, gen.store_port), timeout=2):
        pass
    # a child of the fork server, named and found as the run's (the leftover checks use this)
    assert running(run) == [made[0].keepers[0][1].pid]
    close_all(made)
    with pytest.raises(OSError):
        socket.create_connection((gen.store_addr, gen.store_port), timeout=2).close()
    assert running(run) == []


NOT_HERE = "203.0.113.1"  # TEST-NET-3: no host's own, as a NAT's, a virtual IP or a Service's is to the node


def test_a_store_address_that_is_not_this_hosts_is_refused_in_one_line(tmp_path, monkeypatch):
    """A store's address (MASTER_ADDR for rank 0 of a fixed world, DISTRL_NODE_ADDR for the node
    that hosts an elastic generation) that resolves to no address of this host's interfaces cannot
    be listened on: one line naming it, what it resolved to and what to set, not OSError's
    traceback; from a store keeper too, whose node raises the keeper's line."""
    from nodes.errors import ConfigError
    from sync.listen import serving_store
    monkeypatch.setenv("MASTER_ADDR", NOT_HERE)
    with pytest.raises(ConfigError) as refused:
        serving_store(NOT_HERE, 0, 1, 5)
    line = str(refused.value)
    assert line.startswith(f"cannot listen for peers on {NOT_HERE} (MASTER_ADDR): it resolves to {NOT_HERE}, "
                           "no address of this host's (127.0.0.1 on lo"), line
    assert line.endswith("set MASTER_ADDR on this host to one of its own"), line
    assert "\n" not in line
    monkeypatch.delenv("MASTER_ADDR")
    monkeypatch.setenv("DISTRL_NODE_ADDR", NOT_HERE)
    run = str(tmp_path)
    reset(run)
    out, made = together(run, [(0, (), None, {"first": 1})])
    close_all(made)
    assert isinstance(out[0], ConfigError), out[0]
    assert str(out[0]).startswith(f"cannot listen for peers on {NOT_HERE} (DISTRL_NODE_ADDR): it resolves to ")
    assert str(out[0]).endswith("set DISTRL_NODE_ADDR on this host to one of its own")
    assert running(run) == []


def test_rank_0_of_a_fixed_world_says_its_master_addr_is_not_this_hosts(tmp_path):
    """The same line from the command, exit code 2, where rank 0 of a torchrun-style world hosts
    the store on MASTER_ADDR (not an OSError traceback through Hydra)."""
    from helpers import free_port, one_error_line, train
    env = dict(os.environ, MASTER_ADDR=NOT_HERE, MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="2", LOCAL_RANK="0")
    proc = train(str(tmp_path / "run"), "env=gym", "sync.elastic=false", "sampler.num_workers=1", check=False,
                 timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert one_error_line(proc).startswith(f"error: cannot listen for peers on {NOT_HERE} (MASTER_ADDR)")
