"""A trained policy as a folder that runs without the trainer (`write_export`):

    policy.onnx        the policy's step as ONNX (nodes.models.deploy: inputs, outputs)
    policy.ts          the same as TorchScript (torch.jit.load)
    model.safetensors  the model's weights and normaliser statistics (its state dict)
    config.yaml        the run's resolved config (what launch.enjoy and the Python API rebuild it from)
    policy.json        the graph's inputs and outputs, the action layout, the checkpoint it came from
    README.md          the model card (launch.share.card)

The folder is what `python -m launch.push` uploads to the Hugging Face Hub and what
`launch.enjoy run_dir=FOLDER` (or `hub=user/name`) plays (launch.share.loading).
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import traceback
import warnings

import numpy as np
import torch
from omegaconf import OmegaConf

from nodes.errors import ConfigError, one_line
from nodes.models.deploy import OUTPUTS, DeployedPolicy

ONNX, TORCHSCRIPT, WEIGHTS, CONFIG, DESCRIPTION, CARD = (
    "policy.onnx", "policy.ts", "model.safetensors", "config.yaml", "policy.json", "README.md")
FORMATS = ("both", "onnx", "torchscript")
OPSET = 18
ONNX_TORCH = (2, 6)  # torch.onnx.export(dynamo=True, dynamic_shapes=..., optimize=...)


class ExportError(ConfigError):
    """The policy cannot be exported as asked (one line: which op, which input)."""


def write_export(out_dir: str, cfg, model, state: dict, source: str, formats: str = "both",
                 card: str = "") -> list[str]:
    """The folder above for `model` (an ActorCritic in eval mode, loaded from checkpoint `source`
    whose run state is `state`): the files written. Written into a temporary sibling and renamed
    over `out_dir`, so a failed export leaves the previous one as it was."""
    tmp = out_dir.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        deployed = DeployedPolicy(model).eval()
        if formats in ("both", "onnx"):
            to_onnx(deployed, os.path.join(tmp, ONNX))
        if formats in ("both", "torchscript"):
            to_torchscript(deployed, os.path.join(tmp, TORCHSCRIPT))
        parity = check_parity(deployed, tmp, formats)
        write_weights(model, os.path.join(tmp, WEIGHTS), state)
        with open(os.path.join(tmp, CONFIG), "w") as f:
            f.write(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
        with open(os.path.join(tmp, DESCRIPTION), "w") as f:
            json.dump(dict(describe(deployed, state, source), parity=parity), f, indent=1)
        with open(os.path.join(tmp, CARD), "w") as f:
            f.write(card)
        shutil.rmtree(out_dir, ignore_errors=True)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(os.listdir(out_dir))


def example(deployed: DeployedPolicy, batch: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A random batch of every input (the tracer's example; a test's observations)."""
    rng = np.random.default_rng(seed)
    return tuple(torch.from_numpy(i.example(batch, rng)) for i in deployed.inputs)


def to_onnx(deployed: DeployedPolicy, path: str) -> None:
    """ONNX through torch.export (the exporter PyTorch maintains), the batch dim dynamic."""
    if tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2]) < ONNX_TORCH:
        raise ExportError(f"ONNX export needs torch>={'.'.join(map(str, ONNX_TORCH))} (its torch.export-based "
                          f"exporter), this is torch {torch.__version__}: use format=torchscript, or a newer torch")
    batch = torch.export.Dim("batch", min=1)
    shapes = (tuple({0: batch} for _ in deployed.inputs),)  # forward(*args): one entry, the args' tuple
    names = [i.name for i in deployed.inputs]
    with warnings.catch_warnings(), _quiet_loggers():
        warnings.simplefilter("ignore")
        try:
            program = torch.onnx.export(deployed, example(deployed, 2), input_names=names, output_names=list(OUTPUTS),
                                        dynamic_shapes=shapes, dynamo=True, opset_version=OPSET, verbose=False,
                                        optimize=True)
        except ImportError as exc:
            raise ExportError(f"ONNX export needs onnx and onnxscript ({one_line(exc)}): pip install -e '.[export]'") \
                from None
        except Exception as exc:  # noqa: BLE001 - whatever the tracer meets in a user's encoder, one line
            raise ExportError(f"the policy does not export to ONNX: {_cause(exc)}") from None
    program.save(path)


@contextlib.contextmanager
def _quiet_loggers():
    """The exporter's own output (its log records, the partial graph torch.export prints to stderr
    when it fails) off the console for the block: a failure is reported in one line (_cause)."""
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)


def to_torchscript(deployed: DeployedPolicy, path: str) -> None:
    """TorchScript by tracing (the step has no data-dependent control flow). The tracer records
    operations, not Python: a value that leaves torch (a branch on a tensor, numpy) would be frozen
    into the file as it was on the example, so its warning is a refusal."""
    with warnings.catch_warnings(record=True) as seen, torch.no_grad():
        warnings.simplefilter("always")
        try:
            traced = torch.jit.trace(deployed, example(deployed, 2), check_trace=False)
        except Exception as exc:  # noqa: BLE001
            raise ExportError(f"the policy does not trace to TorchScript: {_cause(exc)}") from None
    frozen = [w for w in seen if issubclass(w.category, torch.jit.TracerWarning)]
    if frozen:
        w = frozen[0]
        raise ExportError(f"the policy does not trace to TorchScript: at {w.filename}:{w.lineno}: "
                          f"{str(w.message).split('. ')[0]}")
    traced.save(path)


def check_parity(deployed: DeployedPolicy, folder: str, formats: str, steps: int = 16) -> dict:
    """Each exported file against the model on random inputs over `steps` recurrent steps
    (launch.share.parity): the largest difference per runtime and output; ExportError beyond
    parity.TOLERANCE."""
    from launch.share.parity import TOLERANCE, compare
    rng = np.random.default_rng(0)
    inputs = [i for i in deployed.inputs if i.name != "state"]
    sequence = [{i.name: i.example(2, rng) for i in inputs} for _ in range(steps)]
    onnx_path = os.path.join(folder, ONNX) if formats in ("both", "onnx") else None
    ts_path = os.path.join(folder, TORCHSCRIPT) if formats in ("both", "torchscript") else None
    worst = compare(deployed, sequence, onnx_path, ts_path)
    for runtime, diffs in worst.items():
        output, diff = max(diffs.items(), key=lambda kv: kv[1])
        if diff > TOLERANCE:
            raise ExportError(f"the {runtime} export differs from the model by {diff:.3g} in '{output}' on random "
                              f"inputs (tolerance {TOLERANCE}): a bug of the exporter, please report it")
    return worst


def write_weights(model, path: str, state: dict) -> None:
    """The state dict as safetensors, contiguous (the conv weights are channels-last in memory), with
    the model identity and the checkpoint's version in its metadata."""
    from safetensors.torch import save_file
    tensors = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    meta = {"model_identity": model.identity(), "policy_version": str(int(state.get("policy_version", 0))),
            "env_frames": str(int(state.get("env_frames", 0)))}
    save_file(tensors, path, metadata=meta)
    os.chmod(path, 0o644)  # as the other files (safetensors writes it owner-only)


def describe(deployed: DeployedPolicy, state: dict, source: str) -> dict:
    spec = deployed.spec
    return {
        "inputs": [i.describe() for i in deployed.inputs],
        "outputs": list(OUTPUTS),
        "state_size": deployed.model.state_size,
        "action_heads": list(spec.action_heads),
        "action_low": list(spec.action_low), "action_high": list(spec.action_high),
        "model_identity": deployed.model.identity(),
        "policy_version": int(state.get("policy_version", 0)), "env_frames": int(state.get("env_frames", 0)),
        "checkpoint": os.path.abspath(source),
    }


def _cause(exc: BaseException) -> str:
    """What the tracer stopped at: the innermost exception's type and first line, and the last line
    of the traceback outside torch's own files (the user's encoder, or the model's code)."""
    inner = exc
    while inner.__cause__ is not None or (inner.__context__ is not None and not inner.__suppress_context__):
        inner = inner.__cause__ or inner.__context__
    torch_dir = os.path.dirname(torch.__file__)
    frames = traceback.extract_tb(inner.__traceback__)
    where = [f for f in frames if not f.filename.startswith(torch_dir) and "site-packages" not in f.filename]
    at = f" (at {where[-1].filename}:{where[-1].lineno}: {where[-1].line})" if where else ""
    return f"{type(inner).__name__}: {one_line(inner)}{at}"
