"""What each trainer's agent sees on a VizDoom scenario, frame by frame: our env option (the bundled
.cfg with our overrides, nodes.envs.doom) against Sample Factory 2.1.1's own copy of the .cfg, both
engines seeded alike and stepped with the same random buttons. Prints, at every 25th step and at
each step that costs health, the mean absolute difference between the two frames (0-255), and
writes the first frames of those steps side by side (ours left, Sample Factory's right) to a PNG.

    python benchmarks/doom_frames_vs_sf.py SF_SCENARIOS_DIR [--env doom_defend_the_center]
        [--set env.render_screen_flashes=true ...] [--steps 300] [--png OUT.png]

SF_SCENARIOS_DIR: sf_examples/vizdoom/doom/scenarios in Sample Factory's install (its venv). Both
render 160x120 RGB (the size both trainers render at before their resize), frameskip 4.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def env_cfg(name: str, overrides: list[str]):
    """Our env option as launch.train composes it (conf/env/NAME.yaml plus overrides), checked."""
    import launch.cli.app  # noqa: F401 - registers the schema in Hydra's ConfigStore
    from launch.cli.overrides import compose_checked
    return compose_checked("config", [f"env={name}", *overrides]).env


def start(game, seed: int):
    import vizdoom as vzd
    game.set_screen_resolution(vzd.ScreenResolution.RES_160X120)
    game.set_screen_format(vzd.ScreenFormat.RGB24)
    game.set_window_visible(False)
    game.set_seed(seed)
    game.init()
    return game


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sf_scenarios")
    p.add_argument("--env", default="doom_defend_the_center")
    p.add_argument("--set", action="append", default=[], help="an override of ours, e.g. env.render_hud=true")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--png", default="")
    a = p.parse_args()
    import vizdoom as vzd

    from nodes.envs import doom

    cfg = env_cfg(a.env, a.set)
    ours = start(doom._game(cfg), a.seed)
    sf = vzd.DoomGame()
    sf.load_config(os.path.join(a.sf_scenarios, cfg.id))
    sf = start(sf, a.seed)
    rng = np.random.default_rng(0)
    n = ours.get_available_buttons_size()
    health = vzd.GameVariable.HEALTH
    shots = []
    for t in range(a.steps):
        before = sf.get_game_variable(health)
        buttons = [0] * n
        buttons[int(rng.integers(n))] = 1
        ours.make_action(buttons, 4)
        sf.make_action(buttons, 4)
        if ours.is_episode_finished() or sf.is_episode_finished():
            print(f"step {t}: episode over")
            break
        x, y = ours.get_state().screen_buffer, sf.get_state().screen_buffer
        hurt = sf.get_game_variable(health) < before
        if t % 25 == 0 or hurt:
            diff = np.abs(x.astype(np.int16) - y.astype(np.int16)).mean()
            print(f"step {t:4d} health {ours.get_game_variable(health):5.0f} / {sf.get_game_variable(health):5.0f}"
                  f"{' hurt' if hurt else '     '}  mean |ours - sf| {diff:6.2f}")
            if hurt and len(shots) < 4:
                shots.append(np.concatenate([x, y], 1))
    ours.close()
    sf.close()
    if a.png and shots:
        from PIL import Image
        image = Image.fromarray(np.concatenate(shots, 0))
        image.resize((image.width * 2, image.height * 2), Image.NEAREST).save(a.png)
        print("wrote", a.png)


if __name__ == "__main__":
    main()
