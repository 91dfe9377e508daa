"""Adam for the CPU learner, without torch.optim.

torch.optim's Optimizer imports torch._dynamo the first time a parameter group is added (its
methods are wrapped in torch._disable_dynamo): on a small CPU node about as long as torch's own
import, at every node's start, for a compiler the trainer never uses. This is the same
algorithm as torch.optim.Adam's single-tensor path (what it runs on a CPU), operation for operation,
so a step gives the same bits (tests/test_adam.py), and its state_dict has torch's layout, so a
checkpoint moves between this and torch.optim.Adam (the CUDA learner keeps torch's fused Adam).
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

# torch.optim.Adam's group keys beyond the hyper-parameters, saved as it saves them so that it can
# load this optimizer's state_dict (and the reverse)
_TORCH_GROUP_KEYS = {"weight_decay": 0, "amsgrad": False, "maximize": False, "foreach": None,
                     "capturable": False, "differentiable": False, "fused": None,
                     "decoupled_weight_decay": False}


class Adam:
    """One parameter group: lr, betas, eps (no weight decay, no amsgrad)."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, betas: tuple[float, float],
                 eps: float):
        self.params = list(params)
        self.param_groups = [{"lr": lr, "betas": tuple(betas), "eps": eps, **_TORCH_GROUP_KEYS,
                              "params": self.params}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        for p in self.params:
            if p.grad is None:
                continue
            s = self.state.get(p)
            if s is None:
                s = self.state[p] = {"step": torch.zeros((), dtype=torch.float32),
                                     "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                     "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
            grad, exp_avg, exp_avg_sq = p.grad, s["exp_avg"], s["exp_avg_sq"]
            s["step"] += 1
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step = s["step"].item()
            bias_correction1 = 1 - beta1**step
            bias_correction2 = 1 - beta2**step
            denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(eps)
            p.addcdiv_(exp_avg, denom, value=-(lr / bias_correction1))

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if p.grad is not None and set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def state_dict(self) -> dict:
        """torch.optim's layout: state by parameter index, the group with its parameters' indices."""
        index = {p: i for i, p in enumerate(self.params)}
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {"state": {index[p]: dict(s) for p, s in self.state.items()},
                "param_groups": [{**group, "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError(f"the saved optimizer holds {[len(g['params']) for g in groups]} parameters "
                             f"in its groups, this model {len(self.params)} in one")
        saved = groups[0]
        for key in ("lr", "betas", "eps"):
            self.param_groups[0][key] = tuple(saved[key]) if key == "betas" else saved[key]
        self.state = {}
        for i, s in state_dict["state"].items():
            p = self.params[saved["params"].index(int(i))]
            self.state[p] = {"step": torch.as_tensor(s["step"], dtype=torch.float32).detach().clone().cpu(),
                             "exp_avg": s["exp_avg"].detach().to(p.device, p.dtype, copy=True),
                             "exp_avg_sq": s["exp_avg_sq"].detach().to(p.device, p.dtype, copy=True)}
