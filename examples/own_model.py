"""Your own model: an encoder class written here, trained on Catch (examples/own_env.py) through the
Python API.

    python examples/own_model.py                        # ~1 min on 2 cores
    python -m launch.train env=gym env.make=own_env:make_catch model.encoder=own_model:CatchEncoder \\
        hydra.run.dir=runs/catch_own_model              # the same from the command line (PYTHONPATH=examples)

The contract (docs/your-model.md): the class is built as Class(spec, model_cfg) and sets
`out_size`; forward takes the observation as a dict of batched tensors, raw (images uint8
[B, C, H, W], vectors float32, categorical indices int64) and returns [B, out_size] features. The
trainer adds the recurrent core (model.core), the actor heads and the critic, and keeps the rest as
for its own models: checkpoints, several nodes, evaluation, launch.enjoy.
"""
import sys

import torch
from own_env import make_catch
from torch import nn


class CatchEncoder(nn.Module):
    """The screen through a small convolution, the paddle's column through an embedding."""

    def __init__(self, spec, model_cfg):
        super().__init__()
        keys = {k.name: k for k in spec.keys}  # what the env observes: name, kind, shape (images C,H,W)
        channels, height, width = keys["screen"].shape
        self.screen = nn.Sequential(nn.Conv2d(channels, 32, 3, padding=1), nn.ELU(), nn.Flatten(),
                                    nn.Linear(32 * height * width, 256), nn.ELU())
        self.paddle = nn.Embedding(keys["paddle"].classes, 16)
        self.out_size = 256 + 16

    def forward(self, obs: dict) -> torch.Tensor:
        screen = obs["screen"].float() / 64.0  # ball 4, paddle 2, empty 0
        return torch.cat([self.screen(screen), self.paddle(obs["paddle"])], -1)


if __name__ == "__main__":
    from launch import api

    with api.command_line_refusals():  # bad input: one line and exit code 2, as on the command line
        cfg = api.config("env=gym", "train.max_env_frames=200000", "sampler.num_workers=2",
                         "sampler.envs_per_worker=8", *sys.argv[1:], env_make=make_catch, model_encoder=CatchEncoder)
        summary = api.train(cfg, run_dir="runs/catch_own_model")
    print(f"trained {summary['env_frames']:,} frames with {cfg.model.encoder}: mean episode reward "
          f"{summary['mean_episode_reward']:.2f} (a random paddle: about -0.6, a perfect one: 1)")
