"""The policy worker's big products on weights packed once per version (a CPU under bf16 autocast).

A policy pass multiplies a few rows (8 envs) by the encoder's fully connected weight and the GRU's
two: [8 x 2304] x [2304 x 512], [8 x 512] x [512 x 1536] twice on VizDoom. Through autocast each is
an addmm that oneDNN runs after reordering the whole weight into its blocked layout, on every call:
the product is bound by moving the weight, and the reorder moves it twice more. oneDNN's own linear
on a weight reordered once (the ops TorchInductor's CPU freezing uses) runs the same kernel without
that: 227 -> 182 us and 149 -> 115 us on those shapes, a policy pass of 8 envs 2.49 -> 2.42 ms
(1 thread, the Xeon VM, 2026-11-29; benchmarks/node_parts.py).

Same kernel, same bits: `PackedWeights` installs itself only where a probe batch gives results
equal to autocast's to the bit (on a CPU without bf16 in oneDNN, or a torch whose private ops
changed, it stays out of the way), and tests/test_models.py compares whole passes. The GRU's
equations are aten's gru_cell's, in its order and dtypes (its gates in bf16, the new state in
float32 as autocast leaves it). Weights change in place (nodes.sampling.weights): call `refresh`
after each new version, as the policy worker does with autocast's cached casts.
"""
from __future__ import annotations

import logging

import torch
from torch import nn

log = logging.getLogger("nodes")

MIN_WEIGHT = 1 << 16  # elements: the heads' small products gain nothing from packing
ROWS_HINT = 8  # rows oneDNN chooses its blocking for (a policy pass of the default layout)
BF16 = torch.bfloat16


def _linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x.to(BF16), packed, bias, "none", [], "")


class PackedWeights:
    """Packed bf16 copies of a model's big nn.Linear and nn.GRUCell weights, used by their forward
    while autocast runs in bf16 on the CPU (their own forward otherwise)."""

    def __init__(self, model: nn.Module):
        self.linears = [m for m in model.modules() if type(m) is nn.Linear and m.weight.numel() >= MIN_WEIGHT]
        self.grus = [m for m in model.modules() if type(m) is nn.GRUCell]
        self.packed: dict[nn.Module, tuple] = {}

    @classmethod
    def install(cls, model: nn.Module, device: torch.device, precision: str) -> PackedWeights | None:
        """Packed weights on `model`'s big layers, or None where they would not give autocast's bits
        (not a CPU, not bf16, oneDNN without bf16, or a probe batch that differs)."""
        if device.type != "cpu" or precision != "bf16" or not torch.backends.mkldnn.is_available():
            return None
        packs = cls(model)
        if not packs.linears and not packs.grus:
            return None
        try:
            if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
                return None
            packs.refresh()
            same = packs._probe()
        except (RuntimeError, AttributeError) as exc:  # a torch without these private ops
            log.info("packed weights off: %s", str(exc).splitlines()[0])
            return None
        if not same:
            log.info("packed weights off: their products differ from autocast's on this machine")
            return None
        for m in packs.linears:
            m.forward = lambda x, m=m: packs._linear_forward(m, x)
        for m in packs.grus:
            m.forward = lambda x, h=None, m=m: packs._gru_forward(m, x, h)
        return packs

    @torch.no_grad()
    def refresh(self) -> None:
        """Pack the current weights (after each in-place update)."""
        pack = torch.ops.mkldnn._reorder_linear_weight
        for m in self.linears:
            self.packed[m] = (pack(m.weight.to(BF16), ROWS_HINT), None if m.bias is None else m.bias.to(BF16))
        for m in self.grus:
            self.packed[m] = (pack(m.weight_ih.to(BF16), ROWS_HINT), m.bias_ih.to(BF16),
                              pack(m.weight_hh.to(BF16), ROWS_HINT), m.bias_hh.to(BF16))

    @staticmethod
    def _on() -> bool:
        """Inference under bf16 autocast (with gradients, e.g. a model that also learns, the layers'
        own forward: the packed copies carry none)."""
        return (not torch.is_grad_enabled() and torch.is_autocast_enabled("cpu")
                and torch.get_autocast_dtype("cpu") == BF16)

    def _linear_forward(self, m: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        if not self._on() or x.dim() != 2:
            return nn.Linear.forward(m, x)
        return _linear(x, *self.packed[m])

    def _gru_forward(self, m: nn.GRUCell, x: torch.Tensor, h: torch.Tensor | None) -> torch.Tensor:
        if not self._on() or x.dim() != 2 or h is None:
            return nn.GRUCell.forward(m, x, h)
        w_ih, b_ih, w_hh, b_hh = self.packed[m]
        i_r, i_z, i_n = _linear(x, w_ih, b_ih).chunk(3, 1)
        h_r, h_z, h_n = _linear(h, w_hh, b_hh).chunk(3, 1)
        r = h_r.add_(i_r).sigmoid_()
        z = h_z.add_(i_z).sigmoid_()
        n = i_n.add(h_n.mul_(r)).tanh_()
        return (h - n).mul_(z).add_(n)

    @torch.no_grad()
    def _probe(self) -> bool:
        """Whether every packed product equals autocast's on random rows (4 and 8 of them)."""
        g = torch.Generator().manual_seed(0)
        with torch.autocast("cpu", dtype=BF16):
            for rows in (4, ROWS_HINT):
                for m in self.linears:
                    x = torch.randn(rows, m.in_features, generator=g)
                    if not torch.equal(_linear(x, *self.packed[m]), nn.Linear.forward(m, x)):
                        return False
                for m in self.grus:
                    x = torch.randn(rows, m.input_size, generator=g)
                    h = torch.randn(rows, m.hidden_size, generator=g)
                    if not torch.equal(self._gru_forward(m, x, h), nn.GRUCell.forward(m, x, h)):
                        return False
        return True
