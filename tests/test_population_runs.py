"""Populations in real runs: P=2 on one node and on two local nodes (each member's parameters the
same on every node, different between members), a forced PBT step taken identically on every
node, resume with the population and the PBT state, and self-play in a VizDoom duel."""
import json
import os
import re

import pytest
from helpers import FAST_GYM, one_error_line, run_module, summary, train

TWO = ["population.size=2"]
NO_PBT = ["pbt.period_frames=0"]


def _tags(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(os.path.join(run_dir, "tb"))
    acc.Reload()
    return set(acc.Tags()["scalars"])


def _members_apart_and_agreed(s, nodes):
    sums = [m["param_checksums"] for m in s["population"]]
    assert all(len(x) == nodes and len(set(x)) == 1 for x in sums), sums  # every node holds the same member
    assert len({x[0] for x in sums}) == len(sums), sums  # and the members differ
    assert all(m["policy_version"] > 0 for m in s["population"]), s["population"]  # each learned


def test_two_members_on_one_node_learn_apart(tmp_path):
    run = str(tmp_path / "run")
    # 20k frames: 3 iterations a member and ~90 doom_basic episodes each (40k took ~6 s more for nothing)
    train(run, *TWO, *NO_PBT, "train.max_env_frames=20000", "train.status_every_s=1", timeout=240)
    s = summary(run)
    assert s["outcome"] == "finished" and len(s["population"]) == 2 and s["pbt_events"] == []
    _members_apart_and_agreed(s, 1)
    assert all(m["episodes"] > 0 and m["reward"] is not None for m in s["population"])  # both played doom_basic
    tags = _tags(run)
    assert {"member0/reward", "member1/reward", "member0/loss", "member1/lr", "member1/entropy_coeff"} <= tags
    log = open(os.path.join(run, "train.log")).read()
    assert re.search(r"members reward -?[\d.]+ / -?[\d.]+ \| pbt replacements 0", log), log[-2000:]


def test_two_members_on_two_nodes_agree_per_member(tmp_path):
    run = str(tmp_path / "run")
    train(run, *FAST_GYM, *TWO, *NO_PBT, "nodes=2", "train.max_env_frames=12000", "sync.check_every=2",
          timeout=240)
    s = summary(run)
    assert s["outcome"] == "finished" and s["nodes"] == 2
    _members_apart_and_agreed(s, 2)


def _pbt_lines(path):
    return [ln.split(" - ", 1)[1] for ln in open(path) if "pbt step" in ln]


def test_forced_pbt_step_is_taken_identically_on_every_node_and_resume_keeps_it(tmp_path):
    run = str(tmp_path / "run")
    pbt = ["pbt.period_frames=1500", "pbt.replace_gap=0", "pbt.replace_gap_abs=0", "sync.stats_every=2"]
    train(run, *FAST_GYM, *TWO, *pbt, "nodes=2", "train.max_env_frames=12000", "sync.check_every=1", timeout=240)
    s = summary(run)
    assert s["outcome"] == "finished"
    events = [json.loads(ln) for ln in open(os.path.join(run, "pbt.jsonl"))]
    assert events and events == s["pbt_events"], (events, s["pbt_events"])
    for e in events:  # the worse member took the better one's weights, its hyper-parameters mutated
        assert e["objective"] < e["source_objective"] and e["new"] != e["source_hyper"] and e["member"] != e["source"]
    # every node took the same decisions (each logs its own), and every member still agrees across
    # nodes (the per-member checksum check ran after every iteration: a difference fails the run)
    rank0, rank1 = _pbt_lines(os.path.join(run, "train.log")), _pbt_lines(os.path.join(run, "train_rank1.log"))
    assert rank0 == rank1 and len(rank0) == len(events), (rank0, rank1)
    assert all(len(set(m["param_checksums"])) == 1 for m in s["population"])
    last = {e["member"]: e["new"] for e in events}
    for p, new in last.items():  # the summary reports each replaced member's latest values
        assert s["population"][p]["lr"] == pytest.approx(new["lr"])
        assert s["population"][p]["entropy_coeff"] == pytest.approx(new["entropy_coeff"])

    # resume: the population (versions, hyper-parameters) and the PBT state come back
    train(run, *FAST_GYM, *TWO, *pbt, "nodes=2", "train.max_env_frames=18000", timeout=240)
    r = summary(run)
    assert r["outcome"] == "finished" and r["resumed_from"]
    assert r["pbt_events"][: len(events)] == events  # the first launch's events are kept
    for before, after in zip(s["population"], r["population"]):
        assert after["policy_version"] > before["policy_version"]
    kept = [p for p in range(2) if all(e["member"] != p for e in r["pbt_events"][len(events):])]
    for p in kept:  # no replacement since: the hyper-parameters are the ones saved
        assert r["population"][p]["lr"] == pytest.approx(s["population"][p]["lr"])

    # launch.enjoy plays the member asked for (its own weights: the checkpoint's entry), refuses others
    played = [json.loads(run_module("launch.enjoy", f"run_dir={run}", "enjoy.episodes=2", f"enjoy.policy={p}",
                                    timeout=120).stdout.splitlines()[-1]) for p in (0, 1)]
    assert [x["seats"] for x in played] == [[0], [1]]
    assert [x["policy_version"] for x in played] == [m["policy_version"] for m in r["population"]]
    proc = run_module("launch.enjoy", f"run_dir={run}", "enjoy.policy=2", check=False, timeout=120)
    assert proc.returncode == 2 and "member 2: the run's population has members 0..1" in one_error_line(proc)

    # a relaunch with another population size is refused in one line
    proc = train(run, *FAST_GYM, "population.size=3", "train.max_env_frames=24000", check=False, timeout=120)
    assert proc.returncode == 2
    assert "holds a population of 2; this run has population.size=3" in one_error_line(proc)


def test_self_play_duel_both_members_play_and_the_table_says_who_played_whom(tmp_path):
    run = str(tmp_path / "run")
    # 12k frames: ~15 matches a member, 2+ versions each (24k took ~25 s of training in CI for nothing)
    train(run, "env=doom_duel", "env.match_minutes=0.2", *TWO, *NO_PBT, "sampler.envs_per_worker=4",
          "sampler.batch_size=512", "train.max_env_frames=12000", timeout=300)
    s = summary(run)
    assert s["outcome"] == "finished" and s["engine_restarts"] == 0
    _members_apart_and_agreed(s, 1)
    a, b = s["population"]
    assert a["match"]["matches"] > 0 and b["match"]["matches"] > 0, s["population"]
    # each match of member 0 against member 1 is in both members' tables
    assert a["against"]["1"]["matches"] == b["against"]["0"]["matches"] > 0, (a["against"], b["against"])
    assert sum(v["matches"] for v in a["against"].values()) == a["match"]["matches"]
    # launch.enjoy: member 0 against member 1, seat by seat; a seat list that does not fit is refused
    out = run_module("launch.enjoy", f"run_dir={run}", "enjoy.episodes=1", "enjoy.seats=[0,1]", timeout=180)
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["seats"] == [0, 1] and result["match"]["frags"] == result["reward_mean"]
    proc = run_module("launch.enjoy", f"run_dir={run}", "enjoy.seats=[1]", check=False, timeout=120)
    assert proc.returncode == 2 and "enjoy.seats names 1 members for the 2 seats" in one_error_line(proc)


def test_self_play_against_frozen_snapshots(tmp_path):
    """One learner, two snapshot slots: its past selves become the second seat's opponents, nobody
    learns from their seats, and resume keeps them."""
    run = str(tmp_path / "run")
    snap = ["env=doom_duel", "env.match_minutes=0.2", "population.snapshots=2", "population.snapshot_every_frames=3000",
            "sampler.envs_per_worker=4"]
    train(run, *snap, "train.max_env_frames=12000", timeout=300)
    s = summary(run)
    assert s["outcome"] == "finished" and s["snapshots_taken"] >= 2, s.get("snapshots_taken")
    against = s["population"][0]["against"]
    assert against.get("snapshot0", {}).get("matches", 0) > 0 and against.get("0", {}).get("matches", 0) > 0, against
    log = open(os.path.join(run, "train.log")).read()
    assert "self-play snapshot 1: member 0 at version" in log and "frozen as snapshot0" in log
    train(run, *snap, "train.max_env_frames=16000", timeout=300)
    r = summary(run)
    assert r["resumed_from"] and r["snapshots_taken"] >= s["snapshots_taken"]
