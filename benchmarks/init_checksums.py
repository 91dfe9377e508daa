"""The shipped envs' models at initialisation, of the checkout in the working directory:
`cd CHECKOUT && python /path/to/benchmarks/init_checksums.py`, in two checkouts (e.g. a `git
worktree` of the commit before a change to nodes/models/; this file need not be in it), prints, per env, the
parameter checksum after torch.manual_seed(0), the first state-dict keys and the sum of one
step's action parameters on zero observations; equal lines mean the change left the shipped
models' names, initialisation order and arithmetic as they were (checkpoints load, checksums hold)."""
import os
import sys

import torch

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]  # the checkout's code, not an installed one
from helpers import compose  # noqa: E402

from nodes.envs import env_spec  # noqa: E402
from nodes.models.actor_critic import ActorCritic  # noqa: E402
from nodes.models.numerics import param_checksum  # noqa: E402

CASES = (["env=doom_basic"], ["env=doom_defend_the_center", "model=full"], ["env=gym", "env.id=CartPole-v1"],
         ["env=mujoco_hopper"], ["env=atari_pong"])

for args in CASES:
    cfg = compose(*args)
    spec = env_spec(cfg.env)
    torch.manual_seed(0)
    model = ActorCritic(spec, cfg.model)
    obs = torch.zeros(2, *spec.obs_shape, dtype=torch.uint8 if spec.is_image else torch.float32)
    params, _, _ = model.step(obs, torch.zeros(2, spec.meas_size), torch.zeros(2, model.state_size))
    print(" ".join(args), param_checksum(model)[:16], list(model.state_dict())[:3], f"{float(params.sum()):.9g}")
