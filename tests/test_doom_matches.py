"""Matches against VizDoom's scripted bots (env.bots, nodes/envs/doom_match.py), through the real
engine: the bots join every match, a death respawns without the refill counting as shaping, a match
ends with its result, a bot deathmatch trains and reports its matches; bad matches are refused in one
line before any process starts."""
import json
import struct

import numpy as np
import pytest
import vizdoom as vzd
from helpers import group_conf, refusal, run_module, train

from nodes.envs import check_env_config, doom_match, env_spec, make_env
from nodes.errors import ConfigError


def load(name, **over):
    return group_conf("env", name, **over)


def play_match(env, spec, rng):
    """Random actions until the match ends: (score, train reward, steps, the deaths counted step by
    step from the engine's DEATHCOUNT, which it keeps across matches; the last info)."""
    score = shaped = 0.0
    steps = deaths = 0
    count = env.game.get_game_variable(vzd.GameVariable.DEATHCOUNT)
    while True:
        obs, reward, done, info = env.step([int(rng.integers(n)) for n in spec.action_heads])
        score += reward
        shaped += info.get("train_reward", reward)
        steps += 1
        now = env.game.get_game_variable(vzd.GameVariable.DEATHCOUNT)
        deaths, count = deaths + int(now - count), now
        if done:
            return score, shaped, steps, deaths, info
        assert not env.game.is_player_dead()  # a death respawns within the step


def test_a_duel_with_a_bot_ends_with_its_result_and_the_bot_rejoins_every_match(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # VizDoom writes _vizdoom/ into the working directory
    cfg = load("doom_duel_bots", match_minutes=0.25, shaping={"HEALTH": 1.0}, pickups={})
    check_env_config(cfg)
    spec = env_spec(cfg)
    # the full heads: move, strafe, attack, sprint, interact, weapon (none + 7), 11 turn angles
    assert spec.action_heads == (3, 3, 2, 2, 2, 8, 11)
    env = make_env(cfg, seed=5)
    rng = np.random.default_rng(0)
    try:
        for match in range(2):
            env.reset()
            env.step([0] * spec.num_heads)  # the bot joins on the first tic
            state = env.game.get_server_state()
            assert state.player_count == 2 and state.players_names[0] == "agent", f"match {match}"
            score, shaped, steps, deaths, info = play_match(env, spec, rng)
            # the time limit (15 s of 35 tics) ends it: about 131 steps of 4 tics
            assert 0.25 * 60 * 35 - 8 <= env.game.get_episode_time() <= 0.25 * 60 * 35 + 4, steps
            result = info["match"]
            assert set(result) == set(doom_match.MATCH_KEYS)
            assert result["frags"] == score  # the score is the frags (suicides count -1)
            assert result["deaths"] == deaths and result["place"] in (1.0, 2.0)  # this match's deaths only
            assert result["win"] + result["draw"] + result["loss"] == 1.0
            # random actions die often here; each respawn's jump back to 100 health is not shaping:
            # the health changes sum to (last - first) minus every refill, at least 100 per death
            assert result["deaths"] >= 3, "too few deaths to test the respawns"
            last_health = env.game.get_game_variable(vzd.GameVariable.HEALTH)
            assert shaped - score <= last_health - 100 - 100 * result["deaths"] + 1e-6
    finally:
        env.close()


def test_a_match_that_ends_on_a_respawn_tic_is_done_with_its_result(tmp_path, monkeypatch):
    """A respawn takes a tic, which can be the match's last: then the step is the last one (done,
    no observation, the result) and never an observation-less step of a running match (a 15-minute
    training run crashed on one after 72 matches). 300 matches of 42 tics with random actions,
    which die often, end on such a tic several times (6 in 300 measured)."""
    monkeypatch.chdir(tmp_path)
    env = make_env(load("doom_duel_bots", match_minutes=0.02), seed=11)
    rng = np.random.default_rng(0)
    try:
        for _ in range(300):
            assert env.reset() is not None
            while True:
                obs, _, done, info = env.step([int(rng.integers(n)) for n in env.spec.action_heads])
                assert (obs is None) == done
                if done:
                    assert set(info["match"]) == set(doom_match.MATCH_KEYS)
                    break
    finally:
        env.close()


def test_pickup_shaping_counts_increases_only_and_never_the_respawn(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load("doom_duel_bots", match_minutes=0.25, shaping={}, pickups={"HEALTH": 1.0})
    env = make_env(cfg, seed=6)
    try:
        env.reset()
        score, shaped, _, _, info = play_match(env, env.spec, np.random.default_rng(1))
        pickups = shaped - score
        assert info["match"]["deaths"] >= 3
        assert 0 <= pickups < 100 * info["match"]["deaths"]  # a counted refill would add 100+ per death
    finally:
        env.close()


def test_deathmatch_starts_are_read_from_the_wad(tmp_path):
    scenarios = vzd.scenarios_path
    assert doom_match.deathmatch_starts(f"{scenarios}/multi_duel.wad", "map01") == 2  # UDMF
    assert doom_match.deathmatch_starts(f"{scenarios}/cig.wad", "MAP01") == 25
    assert doom_match.deathmatch_starts(f"{scenarios}/basic.wad", "map01") == 0  # single-player
    assert doom_match.deathmatch_starts(f"{scenarios}/basic.wad", "map07") is None
    # a Doom-format map: THINGS of 10 bytes (x, y, angle, type, flags)
    things = b"".join(struct.pack("<hhhhh", i, i, 0, t, 7) for i, t in enumerate((11, 1, 11, 11, 2001)))
    lumps = [(b"MAP03", b""), (b"THINGS", things), (b"LINEDEFS", b"")]
    body, table, pos = b"", b"", 12
    for name, data in lumps:
        table += struct.pack("<ii8s", pos, len(data), name)
        body += data
        pos += len(data)
    wad = tmp_path / "doomformat.wad"
    wad.write_bytes(struct.pack("<4sii", b"PWAD", len(lumps), pos) + body + table)
    assert doom_match.deathmatch_starts(str(wad), "MAP03") == 3


def test_bot_rosters_follow_their_skill():
    import os
    profiles = doom_match.bot_profiles(os.path.join(os.path.dirname(vzd.__file__), "bots.cfg"))
    assert len(profiles) == 15 and profiles[0][1] <= profiles[-1][1]
    names = [p[0] for p in profiles]
    easy = doom_match.roster(profiles, "easy", 7, seed=1)
    hard = doom_match.roster(profiles, "hard", 3, seed=1)
    assert len(easy) == 7 and set(easy) <= set(names[:5])  # 5 bots, dealt round-robin
    assert len(hard) == 3 and set(hard) <= set(names[-5:]) and len(set(hard)) == 3
    assert set(doom_match.roster(profiles, "mixed", 15, seed=2)) == set(names)
    assert doom_match.roster(profiles, "mixed", 4, seed=3) == doom_match.roster(profiles, "mixed", 4, seed=3)


@pytest.mark.parametrize("overrides,message", [
    (["env=doom_duel_bots", "env.bots=2"],
     "env.bots=2: map map01 of multi_duel.wad takes at most 2 players, asked for 3 (1 agent + 2 bots)"),
    (["env=doom_basic", "env.bots=1"], "env.bots=1 on a single-player map: map map01 of basic.wad has no "
                                       "deathmatch starts"),
    (["env=doom_deathmatch_bots", "env.bots=16"], "takes at most 16 players (the engine's limit)"),
    (["env=doom_duel_bots", "env.bot_skill=godlike"], "env.bot_skill must be one of easy, medium, hard, mixed"),
    (["env=doom_duel_bots", "env.buttons=[JUMPP]"], "env.buttons: 'JUMPP' is not a VizDoom button"),
    (["env=doom_duel_bots", "env.doom_map=map09"], "env.doom_map: map map09 of multi_duel.wad does not exist"),
    (["env=doom_duel_bots", "env.match_minutes=0"], "env.match_minutes must be > 0 for a match"),
    (["env=doom_duel_bots", "+env.pickups.ARMOUR=0.1"], "env.pickups: 'ARMOUR' is not a VizDoom game variable"),
])
def test_a_match_the_map_cannot_host_is_one_line_before_any_process(tmp_path, overrides, message):
    assert message in refusal(f"hydra.run.dir={tmp_path}/run", *overrides)
    assert not (tmp_path / "run").exists()


def test_a_bot_deathmatch_trains_and_reports_its_matches(tmp_path):
    run = tmp_path / "dm"
    train(run, "env=doom_deathmatch_bots", "env.bots=3", "env.match_minutes=0.05", "train.max_env_frames=6000",
          "sampler.num_workers=1", "sampler.envs_per_worker=2", "sampler.batch_size=256", "sampler.rollout=32",
          "train.status_every_s=1", timeout=240)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["outcome"] == "finished" and summary["env_frames"] >= 6000
    match = summary["match"]
    assert match is not None and match["matches"] >= 2
    assert match["win"] + match["draw"] + match["loss"] == pytest.approx(1.0)
    assert 1.0 <= match["place"] <= 4.0
    assert summary["mean_episode_reward"] == pytest.approx(match["frags"])  # the score is the frags
    log = (run / "train.log").read_text()
    assert "| matches: frags" in log
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    assert {f"match/{k}" for k in doom_match.MATCH_KEYS} <= set(acc.Tags()["scalars"])
    # launch.enjoy plays matches from the checkpoint and writes one player's view
    proc = run_module("launch.enjoy", f"run_dir={run}", "enjoy.episodes=2", "enjoy.video=true", timeout=120)
    played = json.loads(proc.stdout.strip().splitlines()[-1])
    assert played["episodes"] == 2 and played["match"]["frags"] == played["reward_mean"]
    assert played["match"]["win"] + played["match"]["draw"] + played["match"]["loss"] == pytest.approx(1.0)
    assert played["video_frames"] > 20 and (run / "videos").is_dir()
    assert "matches: frags" in proc.stdout
    # a resumed run keeps the match window the checkpoint carries (rank 0's recent matches)
    train(run, "env=doom_deathmatch_bots", "env.bots=3", "env.match_minutes=0.05", "train.max_env_frames=8000",
          "sampler.num_workers=1", "sampler.envs_per_worker=2", "sampler.batch_size=256", "sampler.rollout=32",
          timeout=240)
    resumed = json.loads((run / "summary.json").read_text())
    assert resumed["resumed_from"] is not None
    assert resumed["match"]["matches"] >= min(100, match["matches"] + 1)


def test_single_player_envs_report_no_matches():
    from nodes.record.stats import RunStats, merged_match
    stats = RunStats()
    stats.add_episode(5.0, 40, 5.0)
    assert merged_match([stats.row()]) is None
    stats.add_episode(2.0, 40, 2.0, dict(frags=2.0, deaths=1.0, place=1.0, win=1.0, draw=0.0, loss=0.0))
    stats.add_episode(0.0, 40, 0.0, dict(frags=0.0, deaths=3.0, place=2.0, win=0.0, draw=0.0, loss=1.0))
    merged = merged_match([stats.row()])
    assert merged == dict(frags=1.0, deaths=2.0, place=1.5, win=0.5, draw=0.0, loss=0.5, matches=2.0)


def test_doom_match_check_is_quiet_for_single_player_games():
    doom_match.check(load("doom_basic"), "/nonexistent.wad", "map01")  # bots=0: the WAD is never read
    with pytest.raises(ConfigError, match="env.bots must be >= 0"):
        doom_match.check(load("doom_basic", bots=-1), "/nonexistent.wad", "map01")


def test_true_objective_and_length_merge_over_ranks_and_show_where_they_differ_from_the_reward():
    """Each rank's recent means weighted by its episode count, as the reward is; the status line
    names the true objective only where the env has one of its own (it differs from the reward)."""
    from nodes.record.stats import RunStats, merged_reward
    a, b = RunStats(), RunStats()
    for reward, frames, objective in ((1.0, 400, 0.5), (3.0, 800, 1.5)):
        a.add_episode(reward, frames, objective)
    b.add_episode(5.0, 1200, 2.5)
    rows = [a.row(), b.row()]
    assert merged_reward(rows) == pytest.approx(3.0)
    assert merged_reward(rows, "objective") == pytest.approx(1.5)
    assert merged_reward(rows, "length") == pytest.approx(800.0)
    assert "true objective 1.50" in a.status_line(rows)
    same = RunStats()
    same.add_episode(2.0, 100, 2.0)
    assert "true objective" not in same.status_line()
