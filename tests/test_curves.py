"""launch.curves: the learning-curve table that compares our runs with Sample Factory's, read from
real TensorBoard event files (written here by torch's SummaryWriter, as both trainers write them)."""
from __future__ import annotations

from datetime import datetime

import pytest
from torch.utils.tensorboard import SummaryWriter

from launch import curves

LAUNCH = "2026-11-24 18:00:00,000"


def _launch_ts() -> float:
    return datetime.strptime(LAUNCH, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def write_ours(run, points, objective=None, entropy=None):
    """A run directory of ours: tb/ with episode/reward (and episode/true_objective, objective(reward),
    when given; runs before it had none; train/entropy, entropy(reward), when given), train.log whose
    first line is the launch."""
    run.mkdir()
    (run / "train.log").write_text(f"[{LAUNCH}][nodes][INFO] - node starting\n")
    with SummaryWriter(str(run / "tb")) as w:
        for frames, seconds, reward in points:
            w.add_scalar("episode/reward", reward, frames, walltime=_launch_ts() + seconds)
            if objective is not None:
                w.add_scalar("episode/true_objective", objective(reward), frames, walltime=_launch_ts() + seconds)
            if entropy is not None:
                w.add_scalar("train/entropy", entropy(reward), frames, walltime=_launch_ts() + seconds)


def write_sf(run, points, scale, objective=None, whole=None, entropy=None):
    """A Sample Factory 2 experiment: .summary/0 with reward/reward (times its reward scale) and
    policy_stats/avg_true_objective (its scaled reward, as SF logs it for an env with no objective
    of its own, or objective(reward)), and where `whole` is given whole(reward) as its
    RecordEpisodeStatistics score (its Atari and MuJoCo examples); sf_log.txt."""
    run.mkdir()
    (run / "sf_log.txt").write_text(f"[{LAUNCH}][123] Starting experiment\n")
    with SummaryWriter(str(run / ".summary" / "0")) as w:
        for frames, seconds, reward in points:
            t = _launch_ts() + seconds
            w.add_scalar("reward/reward", reward * scale, frames, walltime=t)
            true = reward * scale if objective is None else objective(reward)
            w.add_scalar("policy_stats/avg_true_objective", true, frames, walltime=t)
            if whole is not None:
                w.add_scalar("policy_stats/avg_RecordEpisodeStatistics_reward", whole(reward), frames, walltime=t)
            if entropy is not None:
                w.add_scalar("train/entropy", entropy(reward), frames, walltime=t)


@pytest.fixture()
def runs(tmp_path):
    # ours logs every 10k frames: -100 until 300k, then 80; Sample Factory every 100k (scaled by 0.01):
    # -50 until 400k, then 75
    ours = [(f, f / 5000, -100.0 if f < 300_000 else 80.0) for f in range(10_000, 1_000_001, 10_000)]
    sf = [(f, f / 2500, -50.0 if f < 400_000 else 75.0) for f in range(100_000, 900_001, 100_000)]
    write_ours(tmp_path / "ours", ours)
    write_sf(tmp_path / "sf", sf, 0.01)
    return tmp_path / "ours", tmp_path / "sf"


def test_rewards_at_marks_time_to_threshold_and_the_window_mean(runs, capsys):
    out = curves.main([str(r) for r in runs] + ["--sf-reward-scale", "0.01", "--every", "200000",
                                                  "--threshold", "70", "--mean-from", "500000"])
    assert out["marks"] == [200_000, 400_000, 600_000, 800_000]  # up to the last frame both reached (900k)
    ours, sf = out["runs"]["ours"], out["runs"]["sf"]
    assert ours["reward_at_marks"] == [-100.0, 80.0, 80.0, 80.0]
    assert [round(x, 3) for x in sf["reward_at_marks"]] == [-50.0, 75.0, 75.0, 75.0]  # the 0.01 divided out
    assert ours["frames_to_threshold"] == 300_000 and ours["seconds_to_threshold"] == pytest.approx(60, abs=0.5)
    assert sf["frames_to_threshold"] == 400_000 and sf["seconds_to_threshold"] == pytest.approx(160, abs=0.5)
    assert out["window"] == [500_000, 900_000]
    assert ours["window_mean"] == pytest.approx(80.0) and sf["window_mean"] == pytest.approx(75.0, abs=1e-3)
    printed = capsys.readouterr().out
    assert "ours: first >= 70 at 300,000 frames, 60 s after launch; mean 80.00 over 500,000-900,000 frames" in printed


def test_the_window_weighs_frames_not_log_lines(tmp_path):
    """A run that logs ten times as often in one half of the window must not weigh that half ten
    times: the curve is read every WINDOW_STEP frames."""
    dense = [(f, f / 1000, 10.0) for f in range(1_000, 500_001, 1_000)]
    sparse = [(f, f / 1000, 20.0) for f in range(550_000, 1_000_001, 50_000)]
    write_ours(tmp_path / "uneven", dense + sparse)
    out = curves.main([str(tmp_path / "uneven"), "--mean-from", "0", "--every", "500000"])
    # readings at 10k..1M: 10 up to 540k (the last line at or before them says 10), 20 from 550k on
    # (54 and 46 readings); a mean over log lines would say (500 x 10 + 10 x 20) / 510 = 10.2
    assert out["runs"]["uneven"]["window_mean"] == pytest.approx((54 * 10 + 46 * 20) / 100)


def test_bad_arguments_are_refused(runs):
    with pytest.raises(SystemExit) as exc:
        curves.main([str(r) for r in runs] + ["--mean-from", "950000"])  # past the 900k both reached
    assert exc.value.code == 2
    with pytest.raises(SystemExit, match="neither a run directory of ours nor a Sample Factory experiment"):
        curves.main([str(runs[0].parent)])


def test_the_true_objective_is_compared_by_default_and_the_reward_on_request(tmp_path):
    """Ours logs a true objective apart from its reward (a shaped scenario), Sample Factory one of
    its own (not scaled): the default table reads both objectives, --metric reward both rewards."""
    points = [(f, f / 5000, 10.0 if f < 300_000 else 20.0) for f in range(100_000, 600_001, 100_000)]
    write_ours(tmp_path / "ours", points, objective=lambda r: r / 10)
    write_sf(tmp_path / "sf", points, 1.0, objective=lambda r: r / 5)
    runs = [str(tmp_path / "ours"), str(tmp_path / "sf")]
    out = curves.main(runs + ["--threshold", "3", "--every", "200000"])
    assert out["runs"]["ours"]["reward_at_marks"] == [1.0, 2.0, 2.0]
    assert out["runs"]["sf"]["reward_at_marks"] == [2.0, 4.0, 4.0]
    assert out["runs"]["sf"]["frames_to_threshold"] == 300_000 and out["runs"]["ours"]["frames_to_threshold"] is None
    out = curves.main(runs + ["--metric", "reward", "--every", "200000"])
    assert out["runs"]["ours"]["reward_at_marks"] == out["runs"]["sf"]["reward_at_marks"] == [10.0, 20.0, 20.0]
    # --metric entropy: both trainers' train/entropy, Sample Factory's not divided by its reward scale
    write_ours(tmp_path / "ours_h", points, entropy=lambda r: r / 100)
    write_sf(tmp_path / "sf_h", points, 0.01, entropy=lambda r: r / 50)
    out = curves.main([str(tmp_path / "ours_h"), str(tmp_path / "sf_h"), "--metric", "entropy",
                       "--sf-reward-scale", "0.01", "--every", "200000"])
    assert out["runs"]["ours_h"]["reward_at_marks"] == pytest.approx([0.1, 0.2, 0.2])
    assert out["runs"]["sf_h"]["reward_at_marks"] == pytest.approx([0.2, 0.4, 0.4])
    write_ours(tmp_path / "before", points)  # logged before the true objective: its reward stands for it
    assert curves.main([str(tmp_path / "before"), "--every", "200000"])["runs"]["before"]["reward_at_marks"] == [
        10.0, 20.0, 20.0]


def test_sample_factorys_atari_score_is_its_whole_game_not_one_lifes(tmp_path):
    """Sample Factory's Atari example ends an episode at each lost life (EpisodicLifeEnv) and clips
    rewards, so its true objective is one life's brick count; the game's score over all lives is
    its RecordEpisodeStatistics reward, which the true objective reads wherever it is logged."""
    points = [(f, f / 5000, 2.0 if f < 300_000 else 4.0) for f in range(100_000, 600_001, 100_000)]
    write_sf(tmp_path / "sf", points, 1.0, whole=lambda r: 5 * r + 1)
    run = str(tmp_path / "sf")
    assert curves.main([run, "--every", "200000"])["runs"]["sf"]["reward_at_marks"] == [11.0, 21.0, 21.0]
    assert curves.main([run, "--every", "200000", "--sf-reward-scale", "0.5"])["runs"]["sf"]["reward_at_marks"] == [
        11.0, 21.0, 21.0]  # unscaled: the raw env's score
    assert curves.main([run, "--every", "200000", "--metric", "reward"])["runs"]["sf"]["reward_at_marks"] == [
        2.0, 4.0, 4.0]


def test_plot_draws_both_runs_into_an_image_file(runs, tmp_path):
    """--plot writes a real PNG (matplotlib's Agg) whose pixels hold both runs' lines: the figure is
    not blank, and leaving a run out changes it."""
    import numpy as np
    from matplotlib.image import imread

    both, one = tmp_path / "both.png", tmp_path / "one.png"
    curves.main([str(r) for r in runs] + ["--metric", "reward", "--sf-reward-scale", "0.01", "--plot", str(both),
                                          "--threshold", "70", "--title", "ours vs SF"])
    curves.main([str(runs[0]), "--metric", "reward", "--plot", str(one), "--threshold", "70", "--title", "ours vs SF"])
    a, b = imread(both), imread(one)
    assert a.shape == b.shape and a.shape[0] > 300 and a.shape[1] > 800
    assert a[..., :3].std() > 0.05  # lines and axes, not a blank page
    assert not np.array_equal(a, b)  # the second run's line is drawn


def test_plot_refuses_a_file_type_it_cannot_write_before_reading_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        curves.main([str(tmp_path / "nowhere"), "--plot", str(tmp_path / "curves.bmp")])
    assert exc.value.code == 2 and "must end in .png, .svg or .pdf" in capsys.readouterr().err


def test_runs_given_one_label_are_seeds_their_mean_and_band_are_reported_and_drawn(tmp_path, capsys):
    """LABEL=RUN_DIR groups seeds: the JSON line holds the label's mean, min and max at each mark
    (the seeds log at different frames and still line up), each seed keeps its own column, and the
    plot draws more than the seeds' lines alone (the mean and the band)."""
    import numpy as np
    from matplotlib.image import imread

    write_ours(tmp_path / "s0", [(f, f / 5000, 10.0 if f < 300_000 else 30.0) for f in range(10_000, 600_001, 10_000)])
    write_ours(tmp_path / "s1", [(f, f / 4000, 20.0 if f < 400_000 else 50.0) for f in range(25_000, 600_001, 25_000)])
    write_sf(tmp_path / "sf", [(f, f / 2500, 5.0) for f in range(100_000, 600_001, 100_000)], 1.0)
    args = ["--every", "200000", "--metric", "reward"]
    out = curves.main([f"ours={tmp_path / 's0'}", f"ours={tmp_path / 's1'}", str(tmp_path / "sf"), *args,
                       "--plot", str(tmp_path / "band.png")])
    assert out["marks"] == [200_000, 400_000, 600_000]
    g = out["groups"]["ours"]
    assert g["runs"] == ["ours/s0", "ours/s1"] and "sf" not in out["groups"]
    assert g["mean_at_marks"] == [15.0, 40.0, 40.0]
    assert g["min_at_marks"] == [10.0, 30.0, 30.0] and g["max_at_marks"] == [20.0, 50.0, 50.0]
    assert out["runs"]["ours/s1"]["reward_at_marks"] == [20.0, 50.0, 50.0]
    assert "ours: mean of 2 seeds at the marks: 15.0, 40.0, 40.0" in capsys.readouterr().out
    curves.main([str(tmp_path / "s0"), str(tmp_path / "s1"), str(tmp_path / "sf"), *args,
                 "--plot", str(tmp_path / "lines.png")])
    band, lines = imread(tmp_path / "band.png"), imread(tmp_path / "lines.png")
    assert band.shape == lines.shape and not np.array_equal(band, lines)
    with pytest.raises(SystemExit) as exc:  # two runs one name: the JSON would lose one
        curves.main([str(tmp_path / "s0"), f"x={tmp_path / 's1'}", f"x={tmp_path / 's1'}"])
    assert exc.value.code == 2
