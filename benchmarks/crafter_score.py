"""Crafter's score (Hafner 2021) of a run: `python benchmarks/crafter_score.py STATS.jsonl [--steps 1e6]`.

STATS.jsonl: crafter's recorder output, one line per finished episode (examples/crafter_env.py
writes it with env.kwargs.stats_dir). The score is the paper's: the success rate s_i (in %) of each
of the 22 achievements over every episode that ended within the first --steps env steps (summed
episode lengths), then S = exp(mean_i ln(1 + s_i)) - 1. Also printed: the mean episode reward
and length, and each achievement's success rate. Sampled by every env of the run, as the
paper's agents report theirs (training episodes, not a separate evaluation).
"""
import argparse
import json
import math

ACHIEVEMENTS = 22


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("stats")
    p.add_argument("--steps", type=float, default=1e6, help="episodes that ended within this many env steps")
    a = p.parse_args()
    episodes, steps = [], 0
    with open(a.stats) as f:
        for line in f:
            e = json.loads(line)
            steps += e["length"]
            if steps > a.steps:
                break
            episodes.append(e)
    if not episodes:
        raise SystemExit(f"{a.stats}: no episode ended within {a.steps:.0f} steps")
    names = sorted(k for k in episodes[0] if k.startswith("achievement_"))
    assert len(names) == ACHIEVEMENTS, names
    rates = {k.removeprefix("achievement_"): 100 * sum(e[k] > 0 for e in episodes) / len(episodes) for k in names}
    score = math.exp(sum(math.log(1 + r) for r in rates.values()) / len(rates)) - 1
    reward = sum(e["reward"] for e in episodes) / len(episodes)
    length = sum(e["length"] for e in episodes) / len(episodes)
    print(f"{len(episodes)} episodes in {min(steps, a.steps):,.0f} steps: score {score:.2f} %, "
          f"reward {reward:.2f}, length {length:.0f}")
    for k, r in sorted(rates.items(), key=lambda kv: -kv[1]):
        print(f"  {k:24s} {r:6.2f} %")
    print(json.dumps({"episodes": len(episodes), "score": score, "reward": reward, "length": length,
                      "success": rates}))


if __name__ == "__main__":
    main()
