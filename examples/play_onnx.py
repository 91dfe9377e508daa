"""Play an exported policy with ONNX Runtime and the env alone: no PyTorch, no trainer processes.

    python -m launch.export run_dir=runs/doom_basic                 # writes runs/doom_basic/export
    python examples/play_onnx.py runs/doom_basic/export --episodes 20
    python examples/play_onnx.py runs/doom_basic/export --greedy    # each head's most likely action

Reads the export's config.yaml (which env, with the observation wrapper the policy was trained
behind: VizDoom's resolution, frame skip, game variables), makes one env through the project's env
code (numpy and the engine only), and runs policy.onnx one step at a time: the observation, the
recurrent state it gave at the step before (zeros at an episode's start), and the noise that
decides a sampled action (`uniform`, `normal`: policy.json lists the inputs). Prints each
episode's score, their mean and std, and the policy's step time at batch 1 (ONNX Runtime's run,
median). The last line is JSON. It refuses to run if anything imported torch.

Envs whose observation is the plain pair (an image or a vector, and VizDoom's game variables):
VizDoom, Atari, MuJoCo, gymnasium vectors. An env of named keys (a Dict) feeds the graph one input
per key as the env gives it; this example does not unpack the env wrapper's pair back into keys.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project, for its envs

from launch.process.resolved import read_resolved  # noqa: E402
from nodes.envs import action_converter, env_spec, env_workdir, make_env  # noqa: E402


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="an export folder (python -m launch.export)")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--greedy", action="store_true", help="each head's most likely action instead of a sample")
    ap.add_argument("--max-steps", type=int, default=100_000)
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    with open(os.path.join(args.folder, "policy.json")) as f:
        described = json.load(f)
    cfg = read_resolved(args.folder)
    spec = env_spec(cfg.env)
    if spec.keys:
        sys.exit(f"error: {cfg.env.name}'s observation has named keys; this example feeds the plain pair only")
    session = ort.InferenceSession(os.path.join(args.folder, "policy.onnx"), providers=["CPUExecutionProvider"])
    inputs = {i["name"]: i for i in described["inputs"]}
    to_env = action_converter(spec)
    rng = np.random.default_rng(args.seed)
    out_name = "greedy" if args.greedy else "action"
    scores, lengths, step_s = [], [], []
    with env_workdir(cfg.env, tempfile.gettempdir(), "play_onnx"):
        env = make_env(cfg.env, args.seed)
        try:
            for _ in range(args.episodes):
                obs, state = env.reset(), np.zeros((1, described["state_size"]), np.float32)
                score, length = 0.0, 0
                while length < args.max_steps:
                    feed = {"state": state}
                    pixels, meas = obs if "meas" in inputs else (obs, None)
                    feed["obs"] = np.asarray(pixels)[None]
                    if meas is not None:
                        feed["meas"] = np.asarray(meas, np.float32)[None]
                    if "uniform" in inputs:
                        feed["uniform"] = rng.random((1, *inputs["uniform"]["shape"][1:]), dtype=np.float32)
                    if "normal" in inputs:
                        feed["normal"] = rng.standard_normal((1, *inputs["normal"]["shape"][1:]), dtype=np.float32)
                    t0 = time.perf_counter()
                    action, state = session.run([out_name, "state_out"], feed)
                    step_s.append(time.perf_counter() - t0)
                    obs, reward, done, info = env.step(to_env(action[0]))
                    score += reward
                    length += 1
                    if done:
                        if info.get("episode_end", True):
                            break
                        state = np.zeros_like(state)  # a lost life: a new state, as in training
                scores.append(score)
                lengths.append(length)
                print(f"episode {len(scores)}: score {score:.2f}, {length} steps", flush=True)
        finally:
            env.close()
    if "torch" in sys.modules:
        sys.exit("error: torch was imported: this example must run without it")
    result = {"episodes": len(scores), "reward_mean": statistics.fmean(scores),
              "reward_std": statistics.pstdev(scores), "length_mean": statistics.fmean(lengths),
              "step_us_median": 1e6 * statistics.median(step_s), "torch_imported": False}
    print(f"{cfg.env.name}: {len(scores)} episodes, reward {result['reward_mean']:.2f} +- {result['reward_std']:.2f}, "
          f"policy step (ONNX Runtime, batch 1) {result['step_us_median']:.0f} us median")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
