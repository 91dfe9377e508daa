"""One policy step of an export, timed three ways at batch 1 and 8 on the CPU: our model in eager
PyTorch (what launch.enjoy runs: ActorCritic.step and a sampled action), the TorchScript file, and
the ONNX file under ONNX Runtime; and the export's parity figures (policy.json).

    python -m launch.export run_dir=runs/doom_basic            # a trained run's export
    python benchmarks/export_latency.py runs/doom_basic/export [--threads 1] [--repeats 300]

Each runtime gets the same random inputs (launch.share.export.example) and is run `--repeats`
times after a warm-up; the table gives the median and the 10th-90th percentiles in microseconds,
and each runtime's median as a ratio to ours measured in the same run. --threads sets both
torch's and ONNX Runtime's intra-op threads (1: what a rollout worker or a robot's one core has).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def timed(fn, repeats: int) -> list[float]:
    for _ in range(20):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(1e6 * (time.perf_counter() - t0))
    return out


def contenders(deployed, scripted, session, batch: int) -> dict:
    """{name: one step at this batch size}: ours on the pair the env wrapper gives (packed before the
    clock, as the trainer's envs pack), the TorchScript and ONNX files on the env's own inputs."""
    import torch

    from launch.share.export import example
    inputs = example(deployed, batch, seed=batch)
    model, n = deployed.model, deployed.n_obs
    with torch.no_grad():
        if model.spec.keys:
            pixels, meas = deployed._stored(inputs[:n])
        else:
            pixels, meas = inputs[0], inputs[1] if n > 1 else None
    meas = meas if meas is not None else torch.zeros(batch, 0)
    state = inputs[n]
    feed = {i.name: t.numpy() for i, t in zip(deployed.inputs, inputs)}

    def ours():
        with torch.inference_mode():
            params, _, _ = model.step(pixels, meas, state)
            model.heads.sample(params)

    def torchscript():
        with torch.inference_mode():
            scripted(*inputs)

    return {"ours (eager)": ours, "TorchScript": torchscript, "ONNX Runtime": lambda: session.run(None, feed)}


def machine() -> str:
    with open("/proc/cpuinfo") as f:
        return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=300)
    args = ap.parse_args()
    import numpy as np
    import onnxruntime as ort
    import torch

    from launch.process.resolved import read_resolved
    from launch.share.export import ONNX, TORCHSCRIPT
    from launch.share.loading import load_policy
    from nodes.models.deploy import DeployedPolicy
    torch.set_num_threads(args.threads)
    cfg = read_resolved(args.folder)
    models, _, _ = load_policy(cfg)
    deployed = DeployedPolicy(models[0]).eval()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(os.path.join(args.folder, ONNX), options, providers=["CPUExecutionProvider"])
    scripted = torch.jit.load(os.path.join(args.folder, TORCHSCRIPT))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    cpu = machine()
    print(f"# {cfg.env.name}, model {cfg.model.name}; {time.strftime('%Y-%m-%d')}, {cpu}, {platform.python_version()}, "
          f"torch {torch.__version__}, onnxruntime {ort.__version__}, commit {commit.strip()}, threads {args.threads}")
    print("| batch | runtime | median us | p10-p90 us | speed-up over ours |")
    print("| --- | --- | --- | --- | --- |")
    for batch in (1, 8):
        rows = {name: timed(fn, args.repeats) for name, fn in contenders(deployed, scripted, session, batch).items()}
        base = statistics.median(rows["ours (eager)"])
        for name, times in rows.items():
            p10, p90 = np.percentile(times, [10, 90])
            print(f"| {batch} | {name} | {statistics.median(times):.0f} | {p10:.0f}-{p90:.0f} | "
                  f"{base / statistics.median(times):.2f}x |")
    with open(os.path.join(args.folder, "policy.json")) as f:
        parity = json.load(f).get("parity", {})
    for runtime, diffs in parity.items():
        print(f"parity {runtime}: max abs difference {max(diffs.values()):.2e} ({json.dumps(diffs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
