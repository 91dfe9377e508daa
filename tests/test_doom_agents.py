"""Matches between learning agents (env.agents > 1, nodes/envs/doom_agents.py), through the real
engine: one engine per player in its own process, stepped in lock-step; a killed or frozen engine
restarts the match (counted) and training goes on; a SIGKILLed trainer leaves no player, no engine
and no /dev/shm segment; bad matches are refused in one line before any process starts."""
import glob
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
from helpers import group_conf, one_error_line, read_until, refusal, run_module, start_train, summary

from nodes.envs import check_env_config
from nodes.envs.doom import _game
from nodes.envs.doom_agents import AgentMatch
from nodes.janitor import descendants


def duel(**over):
    cfg = group_conf("env", "doom_duel", **over)
    check_env_config(cfg)
    return cfg


def step_all(match, rng):
    """One lock-step step of every agent with random actions: [(obs, reward, done, info)]."""
    actions = [[int(rng.integers(n)) for n in match.spec.action_heads] for _ in match.slots]
    for slot, a in zip(match.slots, actions):
        slot.submit(a)
    return [slot.step(a) for slot, a in zip(match.slots, actions)]


def engines(match):
    return [pid for p in match._procs for pid in descendants(p.pid)[1:]]  # below each player: its engine


def alive(pid):
    """Running or stopped (a zombie waiting for its reaper is not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] != b"Z"


def shm():
    return set(glob.glob("/dev/shm/ViZDoom*"))


def test_a_duel_between_agents_steps_in_lock_step_and_ends_for_both(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # each player gets its own directory under the working directory
    before = shm()
    cfg = duel(match_minutes=0.05)  # 105 tics; a match begins at tic 2: 26 steps of 4
    match = AgentMatch(cfg, seed=1)
    rng = np.random.default_rng(0)
    try:
        assert len(match.slots) == 2 and len(engines(match)) == 2
        first = [slot.reset() for slot in match.slots]
        assert all(o is not None and o[0].shape == match.spec.obs_shape for o in first)
        assert not np.array_equal(first[0][0], first[1][0])  # two players, two views
        health = [v.name for v in _game(cfg).get_available_game_variables()].index("HEALTH")
        for _ in range(2):  # two matches: the second starts by itself in every engine
            # every player is in the game from the first observation (the host's first tic reads
            # HEALTH -999,900: a match begins one tic in)
            assert [slot.match._first[slot.j][1][health] for slot in match.slots] == [100.0, 100.0]
            steps, prev = 0, 2
            while True:
                out = step_all(match, rng)
                steps += 1
                assert match.tics[0] == match.tics[1], "the engines' tics must advance together"
                dones = [o[2] for o in out]
                assert dones[0] == dones[1], "both players' match ends at the same step"
                if dones[0]:
                    break
                assert match.tics[0] == prev + cfg.frameskip  # each step is frameskip tics of every engine
                prev = match.tics[0]
            assert steps == 26 and match.tics == [105, 105]
            results = [o[3]["match"] for o in out]
            # one duel seen from both sides: one's win is the other's loss, or both draw
            assert results[0]["win"] == results[1]["loss"] and results[0]["draw"] == results[1]["draw"]
            assert {results[0]["place"], results[1]["place"]} in ({1.0, 2.0}, {1.0})
            assert all(slot.reset() is not None for slot in match.slots)
        assert match.restarts == 0
        pids = [p.pid for p in match._procs] + engines(match)
    finally:
        for slot in match.slots:
            slot.close()
    assert not [pid for pid in pids if alive(pid)], "players or engines outlived close()"
    assert shm() == before
    assert not list(tmp_path.glob("match*")), "the players' directories are removed"


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_a_match_whose_engine_dies_or_freezes_is_restarted_and_counted(tmp_path, monkeypatch, how):
    monkeypatch.chdir(tmp_path)
    before = shm()
    match = AgentMatch(duel(match_minutes=0.2, match_timeout_s=2.0), seed=2)
    rng = np.random.default_rng(1)
    try:
        for _ in range(3):
            step_all(match, rng)
        old = engines(match)
        os.kill(old[1], signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        t0 = time.time()
        out = step_all(match, rng)
        waited = time.time() - t0
        assert [o[2] for o in out] == [True, True] and all(o[3]["aborted"] for o in out)
        assert out[0][3]["restart"] and not out[1][3]["restart"]  # reported once per match
        assert match.restarts == 1
        assert how == "killed" or waited >= 2.0  # a frozen engine is given match_timeout_s
        assert not [pid for pid in old if alive(pid)], "the old match's engines are gone"
        assert all(slot.reset() is not None for slot in match.slots)
        for _ in range(5):  # the fresh match steps in lock-step from its beginning
            out = step_all(match, rng)
            assert not out[0][2] and match.tics[0] == match.tics[1]
        assert match.tics[0] <= 6 * 4
    finally:
        for slot in match.slots:
            slot.close()
    assert shm() == before, "the killed engines' segments are removed"


def _players():
    out = subprocess.run(["pgrep", "-f", "doom_player.py"], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def _engines():
    out = subprocess.run(["pgrep", "-f", "vizdoom -iwad"], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


DUEL_RUN = ("env=doom_duel", "env.match_minutes=0.05", "sampler.num_workers=1", "sampler.envs_per_worker=4",
            "sampler.batch_size=256", "sampler.rollout=32", "train.status_every_s=1")


def test_a_duel_trains_goes_on_past_a_killed_engine_and_reports_both_agents(tmp_path):
    run = tmp_path / "duel"
    before, players_before = _engines(), _players()
    # 20k frames: ~100 matches, the restart among them (30k took ~10 s more for nothing)
    proc = start_train(run, *DUEL_RUN, "train.max_env_frames=20000")
    try:
        read_until(proc, r"matches: frags", 180)  # training, and matches have finished
        ours = sorted(_engines() - before)
        assert len(ours) == 4, "2 duels of 2 agents: 4 engines"
        os.kill(ours[0], signal.SIGKILL)
        out = proc.communicate(timeout=240)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-3000:]
    assert "a VizDoom match between agents was restarted" in out
    s = summary(run)
    assert s["outcome"] == "finished" and s["env_frames"] >= 20000
    assert s["engine_restarts"] == 1
    match = s["match"]
    # every agent reports its own side of its duel: as many wins as losses over whole duels
    assert match["matches"] >= 8 and match["win"] + match["draw"] + match["loss"] == pytest.approx(1.0)
    assert 1.0 <= match["place"] <= 2.0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    assert "match/engine_restarts" in acc.Tags()["scalars"]
    # launch.enjoy plays a duel of the policy against itself and films the first agent's view
    proc = run_module("launch.enjoy", f"run_dir={run}", "enjoy.episodes=1", "enjoy.video=true", timeout=120)
    played = json.loads(proc.stdout.strip().splitlines()[-1])
    assert played["episodes"] == 1 and played["match"]["frags"] == played["reward_mean"]
    # 26 steps of a 105-tic match: the first frame and one per step but the last (it ends the match)
    assert played["length_mean"] == 26 and played["video_frames"] == 26
    assert (run / "videos").is_dir() and not (_players() - players_before)
    # the self-play policy against one of the engine's bots (its own seats replaced), and seats the map cannot take
    proc = run_module("launch.enjoy", f"run_dir={run}", "enjoy.episodes=1", "enjoy.agents=1", "enjoy.bots=1",
                      timeout=120)
    played = json.loads(proc.stdout.strip().splitlines()[-1])
    assert played["match"]["place"] in (1.0, 2.0)
    # 26 steps, unless the agent died: the respawn takes tics of the match's 105 (CI saw 25 once)
    if played["match"]["deaths"] == 0:
        assert played["length_mean"] == 26
    else:
        assert 20 <= played["length_mean"] <= 26
    proc = run_module("launch.enjoy", f"run_dir={run}", "enjoy.agents=2", "enjoy.bots=1", check=False, timeout=120)
    assert proc.returncode == 2 and "takes at most 2 players, asked for 3" in one_error_line(proc)


def test_sigkill_of_the_trainer_during_a_duel_leaves_no_player_engine_or_segment(tmp_path):
    run = tmp_path / "killed"
    before_engines, before_players, before_shm = _engines(), _players(), shm()
    proc = start_train(run, *DUEL_RUN, "train.max_env_frames=0")
    read_until(proc, r"frames ", 180)
    engines_now, players_now = _engines() - before_engines, _players() - before_players
    assert len(engines_now) == 4 and len(players_now) == 4 and shm() - before_shm
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    deadline = time.time() + 20  # the janitor sees the pipe close within 0.5 s, then kills and cleans
    while time.time() < deadline and (_engines() & engines_now or _players() & players_now or shm() - before_shm):
        time.sleep(0.2)
    assert not (_engines() & engines_now), "engines outlived a SIGKILLed trainer"
    assert not (_players() & players_now), "player processes outlived a SIGKILLed trainer"
    assert not (shm() - before_shm), f"/dev/shm segments left: {shm() - before_shm}"


@pytest.mark.parametrize("overrides,message", [
    (["env=doom_duel", "env.agents=3", "sampler.envs_per_worker=6"],
     "env.agents=3: map map01 of multi_duel.wad takes at most 2 players, asked for 3 (3 agents + 0 bots)"),
    (["env=doom_duel", "env.bots=1"], "takes at most 2 players, asked for 3 (2 agents + 1 bots)"),
    (["env=doom_duel", "env.id=basic.cfg"],
     "env.agents=2 on a single-player map: map map01 of basic.wad has no deathmatch starts"),
    (["env=doom_deathmatch_agents", "env.agents=12", "env.bots=5", "sampler.envs_per_worker=24"],
     "takes at most 16 players (the engine's limit), asked for 17"),
    (["env=doom_duel", "sampler.envs_per_worker=6"],
     "with env.agents=2 every env group must hold whole matches (3 envs per group when double-buffered"),
    (["env=gym", "env.agents=2"], "env.agents=2: matches between agents are VizDoom matches"),
    (["env=doom_duel", "env.match_timeout_s=0"], "env.match_timeout_s must be > 0"),
])
def test_a_bad_agent_match_is_one_line_before_any_process(tmp_path, overrides, message):
    before = _players()
    assert message in refusal(f"hydra.run.dir={tmp_path}/run", *overrides)
    assert not (tmp_path / "run").exists() and not (_players() - before)  # the check started no engine


def test_the_deathmatch_of_agents_and_bots_ends_every_players_match(tmp_path, monkeypatch):
    """env=doom_deathmatch_agents: 4 agents with an engine each and 4 bots on cig.wad."""
    monkeypatch.chdir(tmp_path)
    cfg = group_conf("env", "doom_deathmatch_agents", match_minutes=0.03)
    check_env_config(cfg)
    match = AgentMatch(cfg, seed=3)
    rng = np.random.default_rng(2)
    try:
        while True:
            out = step_all(match, rng)
            assert len(set(match.tics)) == 1
            if out[0][2]:
                break
        assert all(o[2] for o in out)
        places = [o[3]["match"]["place"] for o in out]
        assert all(1.0 <= p <= 8.0 for p in places)  # 8 players: the agents and the bots
        assert sum(o[3]["match"]["win"] for o in out) <= 1.0  # at most one agent wins alone
    finally:
        for slot in match.slots:
            slot.close()


def test_make_env_refuses_a_match_between_agents():
    """One engine alone would play the multiplayer map single-handed: agents come from make_envs."""
    from nodes.envs import make_env
    from nodes.errors import ConfigError
    with pytest.raises(ConfigError, match="a match between agents is made with nodes.envs.make_envs"):
        make_env(duel(), seed=0)


def test_an_agent_matchs_shaping_never_counts_a_respawn_refill(tmp_path, monkeypatch):
    """The engine respawns agents inside some step (forced respawn): a step that began dead or saw a
    death counts no pickups (health, armor and ammo jump back), the other terms as usual. The
    oracle recomputes every step's training reward from the measurements the step returned."""
    monkeypatch.chdir(tmp_path)
    cfg = duel(match_minutes=0.5)
    index = {v.name: i for i, v in enumerate(_game(cfg).get_available_game_variables())}
    match = AgentMatch(cfg, seed=4)
    rng = np.random.default_rng(3)
    try:
        prev = [slot.reset()[1] for slot in match.slots]
        respawns = refills = 0
        while True:
            out = step_all(match, rng)
            if out[0][2]:
                break
            for j, (obs, reward, _, info) in enumerate(out):
                now, before = obs[1], prev[j]

                def change(k, now=now, before=before):
                    return float(now[index[k]] - before[index[k]])
                respawned = before[index["HEALTH"]] <= 0 or change("DEATHCOUNT") > 0
                expected = reward + sum(w * change(k) for k, w in cfg.shaping.items())
                if not respawned:
                    expected += sum(w * max(change(k), 0.0) for k, w in cfg.pickups.items())
                assert info["train_reward"] == pytest.approx(expected, abs=1e-4)
                respawns += respawned
                refills += respawned and change("HEALTH") >= 50
                prev[j] = now
    finally:
        for slot in match.slots:
            slot.close()
    assert respawns >= 3 and refills >= 1  # random actions die often: the rule was exercised
