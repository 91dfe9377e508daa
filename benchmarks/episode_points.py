"""A run's episode return and length (TensorBoard's episode/reward and episode/length, the last-100
means the trainer logs) at 5, 10, 20, 40, 60, 80 and 100 % of its frames, one line per run.
Usage: python benchmarks/episode_points.py RUN_DIR [RUN_DIR ...]"""
import glob
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def scalars(run_dir: str, tag: str) -> list[tuple[int, float]]:
    out = []
    for path in glob.glob(os.path.join(run_dir, "tb", "events.*")):
        acc = EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        if tag in acc.Tags()["scalars"]:
            out += [(e.step, e.value) for e in acc.Scalars(tag)]
    return sorted(out)


def nearest(points: list[tuple[int, float]], step: float) -> tuple[int, float]:
    return min(points, key=lambda p: abs(p[0] - step))


def main(run_dirs: list[str]) -> None:
    for run in run_dirs:
        rewards, lengths = scalars(run, "episode/reward"), scalars(run, "episode/length")
        last = rewards[-1][0]
        cells = []
        for frac in (0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0):
            step, reward = nearest(rewards, last * frac)
            cells.append(f"{step / 1000:.0f}k: return {reward:.0f}, episode {nearest(lengths, step)[1]:.0f}")
        print(run, " | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
