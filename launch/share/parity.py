"""Does an exported policy compute what the model computes? (`compare`)

Runs the model (DeployedPolicy in eager PyTorch: ActorCritic.step and the heads' draw) and each
exported file (ONNX Runtime, TorchScript) side by side over a sequence of steps, each feeding
its own recurrent state back, on the same observations and noise; returns the largest absolute
difference of each output per runtime. launch.export checks every export this way on random
inputs before it says it is done; tests/test_export.py on recorded observations of real envs.
"""
from __future__ import annotations

import numpy as np
import torch

from nodes.models.deploy import OUTPUTS, DeployedPolicy

TOLERANCE = 1e-4  # fp32: differences of kernel order, far below what changes an action


def runtimes(onnx_path: str | None, ts_path: str | None) -> dict:
    """{name: step(inputs dict of numpy arrays) -> list of numpy outputs} for the files given."""
    out = {}
    if onnx_path:
        import onnxruntime as ort
        session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        out["onnx"] = lambda feed: session.run(list(OUTPUTS), feed)
    if ts_path:
        module = torch.jit.load(ts_path)

        def scripted(feed):
            with torch.no_grad():
                return [t.numpy() for t in module(*(torch.from_numpy(v) for v in feed.values()))]
        out["torchscript"] = scripted
    return out


def compare(deployed: DeployedPolicy, steps: list[dict], onnx_path: str | None = None,
            ts_path: str | None = None, starts: list[bool] | None = None) -> dict:
    """{runtime: {output: max abs difference}} over `steps` (each a dict of numpy inputs by name,
    `state` left out: each runtime feeds its own back, from zeros; starts[t]: an episode starts at
    step t, the state is zeroed). Discrete actions compared as numbers too: 0 when every index agrees."""
    names = [i.name for i in deployed.inputs]
    width = deployed.model.state_size
    runs = runtimes(onnx_path, ts_path)
    worst = {name: dict.fromkeys(OUTPUTS, 0.0) for name in runs}
    batch = len(next(iter(steps[0].values())))
    states = {name: np.zeros((batch, width), np.float32) for name in ["model", *runs]}
    for t, step in enumerate(steps):
        if starts is not None and starts[t]:
            states = {k: np.zeros_like(v) for k, v in states.items()}
        feed = {k: dict(step, state=v) for k, v in states.items()}
        with torch.no_grad():
            ref = [o.numpy() for o in deployed(*(torch.from_numpy(feed["model"][n]) for n in names))]
        states["model"] = ref[-1]
        for name, run in runs.items():
            got = run({n: feed[name][n] for n in names})
            states[name] = got[-1]
            for key, a, b in zip(OUTPUTS, got, ref):
                worst[name][key] = max(worst[name][key], float(np.abs(a - b).max()))
    return worst
