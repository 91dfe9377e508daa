"""Makes this folder's fixture with Sample Factory 2.1.1 itself (run with the Python of its own venv;
tests/test_sf_import.py reads what it writes, with no Sample Factory installed):

    sfvenv/bin/python tests/data/sf_doom_basic/make_fixture.py SF_EXPERIMENT_DIR

SF_EXPERIMENT_DIR is a short Sample Factory run of doom_basic with small sizes, trained here with

    sfvenv/bin/python -m sf_examples.vizdoom.train_vizdoom --env=doom_basic --device=cpu \\
      --serial_mode=True --async_rl=False --num_workers=1 --num_envs_per_worker=2 --rnn_size=16 \\
      --encoder_conv_mlp_layers 16 --res_w=64 --res_h=36 --batch_size=64 --rollout=16 \\
      --train_for_env_steps=4000 --seed=3 --experiment=sf_tiny --train_dir=TRAIN_DIR

Written here: config.json (its own), checkpoint_p0/<its latest checkpoint> (the run here was stopped
at 3,300 frames; its latest was at 2,816) without the optimizer
state (its Adam moments, which an import does not read, would triple the file), and
sf_outputs.npz: real doom_basic frames from its own env (obs [T, B, 3, 36, 64] uint8: B = 2
episodes stepped with random actions, T = 4 steps) and what its network gives for them from a zero
recurrent state, step by step, in eval mode: action_logits [T, B, 4], values [T, B], rnn_states
[T, B, 16]. And cv2_nearest_160x120_to_128x72.npz: the source pixel (row * 160 + column) of each
pixel of a 160x120 frame resized to 128x72 by OpenCV's INTER_NEAREST, the resize behind Sample
Factory's frames (what env.resize=floor must reproduce).
"""
import glob
import os
import shutil
import sys

import gymnasium as gym
import numpy as np
import torch
from sample_factory.cfg.arguments import load_from_checkpoint
from sample_factory.envs.create_env import create_env
from sample_factory.model.actor_critic import create_actor_critic
from sf_examples.vizdoom.train_vizdoom import parse_vizdoom_cfg, register_vizdoom_components

STEPS, EPISODES = 4, 2


def frames(cfg) -> np.ndarray:
    """[STEPS, EPISODES, C, H, W] uint8 from Sample Factory's own doom_basic env (random actions)."""
    out = []
    for episode in range(EPISODES):
        env = create_env(cfg.env, cfg=cfg, render_mode=None)
        obs, _ = env.reset(seed=100 + episode)
        rng = np.random.default_rng(episode)
        seen = []
        for _ in range(STEPS):
            seen.append(obs)  # its env gives the frame (CHW); its batching wraps it in {"obs": ...}
            obs, *_ = env.step(int(rng.integers(env.action_space.n)))
        env.close()
        out.append(np.stack(seen))
    return np.stack(out, 1)


def main() -> None:
    sf_dir = os.path.abspath(sys.argv[1])
    here = os.path.dirname(os.path.abspath(__file__))
    register_vizdoom_components()
    cfg = parse_vizdoom_cfg(argv=["--env=doom_basic", f"--experiment={os.path.basename(sf_dir)}",
                                  f"--train_dir={os.path.dirname(sf_dir)}", "--device=cpu"], evaluation=True)
    cfg = load_from_checkpoint(cfg)
    path = sorted(glob.glob(os.path.join(sf_dir, "checkpoint_p0", "checkpoint_*.pth")))[-1]
    state = torch.load(path, map_location="cpu", weights_only=True)
    obs = frames(cfg)
    env = create_env(cfg.env, cfg=cfg, render_mode=None)
    # its batched envs give the model a Dict observation space of one key, "obs"
    model = create_actor_critic(cfg, gym.spaces.Dict({"obs": env.observation_space}), env.action_space)
    env.close()
    model.load_state_dict(state["model"])
    model.eval()
    rnn = torch.zeros(EPISODES, cfg.rnn_size)
    logits, values, states = [], [], []
    with torch.no_grad():
        for t in range(STEPS):
            out = model(model.normalize_obs({"obs": torch.from_numpy(obs[t])}), rnn)
            rnn = out["new_rnn_states"]
            logits.append(out["action_logits"].numpy())
            values.append(out["values"].numpy())
            states.append(rnn.numpy())
    os.makedirs(os.path.join(here, "checkpoint_p0"), exist_ok=True)
    shutil.copy(os.path.join(sf_dir, "config.json"), os.path.join(here, "config.json"))
    del state["optimizer"]
    torch.save(state, os.path.join(here, "checkpoint_p0", os.path.basename(path)))
    np.savez_compressed(os.path.join(here, "sf_outputs.npz"), obs=obs, action_logits=np.stack(logits),
                        values=np.stack(values), rnn_states=np.stack(states))
    import cv2
    index = np.arange(120 * 160, dtype=np.float32).reshape(120, 160)  # exact in float32
    np.savez_compressed(os.path.join(here, "cv2_nearest_160x120_to_128x72.npz"), opencv=cv2.__version__,
                        index=cv2.resize(index, (128, 72), interpolation=cv2.INTER_NEAREST).astype(np.int32))
    print("wrote", here, "from", path)


if __name__ == "__main__":
    main()
