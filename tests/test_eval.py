"""Evaluation during training (eval.every_frames): rounds on envs of their own while training goes
on, logged under eval/* and in eval.jsonl, the best round kept as checkpoints/best.pt (exactly the
weights it evaluated: launch.enjoy replays its score from it), resumed by a relaunch; a population
evaluates every member; with several nodes one rank evaluates."""
import json
import os

import pytest
from helpers import FAST_GYM, one_error_line, refusal, run_module, summary, train

from nodes import seeds

BANDIT = [*FAST_GYM, "env.id=tests.envs:SignBandit-v0", "sampler.pin_workers=false"]  # perfect 8, random 4
EVAL = ["eval.every_frames=6000", "eval.episodes=20", "eval.greedy=true"]


def journal(run_dir) -> list[dict]:
    with open(os.path.join(run_dir, "eval.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def tb_scalars(run_dir, tag) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(os.path.join(run_dir, "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def best_version(run_dir) -> int:
    import torch
    return int(torch.load(os.path.join(run_dir, "checkpoints", "best.pt"), weights_only=True)["policy_version"])


def test_rounds_are_logged_the_best_is_kept_and_replayed_and_a_relaunch_goes_on(tmp_path):
    run = str(tmp_path / "run")
    train(run, *BANDIT, *EVAL, "train.max_env_frames=24000", timeout=300)
    rounds = journal(run)
    assert len(rounds) >= 2 and [r["round"] for r in rounds] == list(range(len(rounds)))
    frames = [r["env_frames"] for r in rounds]
    assert frames[0] >= 6000 and all(b // 6000 > a // 6000 for a, b in zip(frames, frames[1:]))  # one per period
    best = max(rounds, key=lambda r: r["score"])
    assert best["score"] > 6.0, f"the greedy policy did not learn the bandit (random plays 4): {rounds}"
    assert best_version(run) == best["version"]
    # the scalars, at the frames each round was taken
    got = tb_scalars(run, "eval/true_objective")
    assert [s for s, _ in got] == frames and [v for _, v in got] == pytest.approx([r["score"] for r in rounds])
    assert summary(run)["eval"]["best"]["version"] == best["version"]
    assert summary(run)["eval"]["rounds"] == len(rounds)
    # best.pt holds exactly what was evaluated: enjoy on the round's own eval seed replays its score
    seed = seeds.derive(0, seeds.EVAL, best["round"], 0)
    out = run_module("launch.enjoy", f"run_dir={run}", "enjoy.checkpoint=best", "enjoy.greedy=true",
                     f"enjoy.seed={seed}", "enjoy.episodes=20", timeout=120).stdout.strip().splitlines()
    replay = json.loads(out[-1])
    assert replay["policy_version"] == best["version"] and replay["reward_mean"] == pytest.approx(best["score"])

    # a relaunch with more frames: the rounds go on from the journal, best.pt stays the best of all
    train(run, *BANDIT, *EVAL, "train.max_env_frames=36000", timeout=300)
    more = journal(run)
    assert len(more) > len(rounds) and [r["round"] for r in more] == list(range(len(more)))
    assert more[len(rounds)]["env_frames"] > frames[-1]
    best = max(more, key=lambda r: r["score"])
    assert best_version(run) == best["version"] and summary(run)["eval"]["best"]["score"] == best["score"]


def test_a_population_evaluates_every_member(tmp_path):
    run = str(tmp_path / "run")
    train(run, *BANDIT, *EVAL, "population.size=2", "train.max_env_frames=12000", timeout=300)
    rounds = journal(run)
    assert rounds and all(len(r["members"]) == 2 for r in rounds)
    for r in rounds:  # the round's score is its best member's
        assert r["score"] == max(m["true_objective"] for m in r["members"])
        assert r["score"] == r["members"][r["member"]]["true_objective"]
    for p in (0, 1):
        got = tb_scalars(run, f"eval/member{p}/true_objective")
        assert [v for _, v in got] == pytest.approx([r["members"][p]["true_objective"] for r in rounds])


def test_with_two_nodes_one_rank_evaluates(tmp_path):
    run = str(tmp_path / "run")
    train(run, *BANDIT, *EVAL, "nodes=2", "sampler.num_workers=1", "train.max_env_frames=18000", timeout=300)
    rounds = journal(run)
    assert rounds and [r["round"] for r in rounds] == list(range(len(rounds)))  # one writer: no round twice
    assert summary(run)["eval"]["rounds"] == len(rounds)


@pytest.mark.parametrize("override, message", [
    ("eval.every_frames=-5", "eval.every_frames must be >= 0 (0: no evaluation), got -5"),
    ("eval.episodes=0", "eval.episodes must be >= 1, got 0"),
])
def test_bad_eval_settings_are_one_line(tmp_path, override, message):
    assert refusal(f"hydra.run.dir={tmp_path}/run", override) == f"error: {message}"


def test_enjoy_best_of_a_run_that_evaluated_nothing_is_one_line(tmp_path):
    run = str(tmp_path / "run")
    train(run, *BANDIT, "train.max_env_frames=2000", timeout=300)
    proc = run_module("launch.enjoy", f"run_dir={run}", "enjoy.checkpoint=best", check=False, timeout=120)
    assert proc.returncode == 2
    assert "enjoy.checkpoint=best: no file" in one_error_line(proc) and "eval.every_frames" in proc.stderr
