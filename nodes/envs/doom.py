"""VizDoom scenarios: pixels, optional measurements, one or several discrete action heads.

Rendering happens at 160x120 (the smallest 4:3 mode VizDoom has) and is resized to
env.width x env.height (128x72 by default, the benchmark size of Sample Factory, Petrenko et al. 2020) with
nearest-neighbour index arrays computed once (env.resize: which source pixel each takes).

Actions (env.actions):
- single: one head, no-op plus each available button alone (enough for basic, defend_*, ...);
- heads:  Sample Factory's decomposition (Petrenko et al. 2020) into independent heads, built from the buttons the
  scenario makes available: move (none/forward/backward), strafe (none/left/right), attack,
  sprint, interact, weapon (none or select weapon k), turn (left/right buttons, or 11 turn
  angles when TURN_LEFT_RIGHT_DELTA exists); any other button (JUMP, CROUCH, ...) gets its own
  on/off head. STRAFE, SELECT_NEXT/PREV_WEAPON and LOOK_UP_DOWN_DELTA are never pressed.

Measurements (env.measurements): the scenario's game variables (plus any named in env.shaping)
as a float32 vector beside the pixels; the "full" model feeds them through an MLP.

Reward shaping (env.shaping, {GAME_VARIABLE: weight}): the training reward adds
weight x (change of that variable) each step; env.pickups the same for increases only (health,
armor, weapons, ammo picked up). The logged episode score stays the game's reward. Each step's
info["terms"] holds every term's change (shaping's, then pickups', in their order), so a
population's members can weigh them with their own (PBT-mutated) weights.

Matches against the engine's scripted bots (env.bots > 0, nodes/envs/doom_match.py): the env
hosts a deathmatch of the agent and the bots; the episode is one match (env.match_minutes); a
death respawns at once, and the respawn's jump back to full health, pistol and ammo is never
counted as shaping (the variables are read again after it); the score (the logged reward) is
the agent's frags, and the match's result (frags, deaths, place, win/draw/loss) comes with the
last step as info["match"]. env.buttons replaces the scenario's buttons (e.g. the full set with
weapon selection and USE for a multiplayer map), env.doom_map picks the map.
"""
from __future__ import annotations

import os

import numpy as np

from nodes import seeds
from nodes.envs import NO_INFO, EnvSpec, doom_match
from nodes.errors import ConfigError, did_you_mean

RENDER_W, RENDER_H = 160, 120
TURN_DELTAS = np.linspace(-10.0, 10.0, 11)  # degrees per tic for TURN_LEFT_RIGHT_DELTA
NEVER_PRESSED = ("STRAFE", "SELECT_NEXT_WEAPON", "SELECT_PREV_WEAPON", "LOOK_UP_DOWN_DELTA")
ACTION_MODES = ("single", "heads")


def _vizdoom():
    try:
        import vizdoom
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise ConfigError(f"VizDoom engine missing: pip install vizdoom ({exc})") from None
    return vizdoom


def scenario_path(env_cfg) -> str:
    vzd = _vizdoom()
    return os.path.join(vzd.scenarios_path, env_cfg.id)


def check(env_cfg) -> None:
    _check_scenario(env_cfg)
    _check_names(env_cfg)
    game = _game(env_cfg)
    if env_cfg.measurements and not game.get_available_game_variables():
        raise ConfigError(f"env.measurements=true but scenario '{env_cfg.id}' defines no game variables "
                          "(set env.measurements=false)")
    doom_match.check(env_cfg, game.get_doom_scenario_path(), game.get_doom_map())


def _check_scenario(env_cfg) -> None:
    """The scenario file, the screen size, the engine restarts and the action mode."""
    if not env_cfg.id.endswith(".cfg"):
        raise ConfigError(f"env.id for a VizDoom env must name a scenario .cfg, got '{env_cfg.id}'")
    path = scenario_path(env_cfg)
    if not os.path.isfile(path):
        folder = os.path.dirname(path)
        bundled = [f for f in os.listdir(folder) if f.endswith(".cfg")] if os.path.isdir(folder) else []
        raise ConfigError(f"VizDoom scenario '{env_cfg.id}' is not bundled with vizdoom"
                          f"{did_you_mean(env_cfg.id, bundled)} ({path})")
    if env_cfg.width > RENDER_W or env_cfg.height > RENDER_H or min(env_cfg.width, env_cfg.height) < 16:
        raise ConfigError(f"env.width x env.height must be between 16x16 and {RENDER_W}x{RENDER_H}, "
                          f"got {env_cfg.width}x{env_cfg.height}")
    if env_cfg.restart_episodes < 0:
        raise ConfigError(f"env.restart_episodes must be >= 0 (0: never restart the engine), "
                          f"got {env_cfg.restart_episodes}")
    if env_cfg.actions not in ACTION_MODES:
        raise ConfigError(f"env.actions must be one of {', '.join(ACTION_MODES)}, got '{env_cfg.actions}'")
    _check_game_settings(env_cfg)


RESIZE = ("centre", "floor")  # env.resize


def _check_game_settings(env_cfg) -> None:
    """The .cfg settings the config may replace (null keeps the scenario's own)."""
    for key in ("living_reward", "death_penalty"):
        value = getattr(env_cfg, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"env.{key} must be a number (null: the scenario's own), got {value!r}")
    for key in ("render_hud", "render_screen_flashes"):
        value = getattr(env_cfg, key)
        if value is not None and not isinstance(value, bool):
            raise ConfigError(f"env.{key} must be true, false or null (the scenario's own), got {value!r}")
    if env_cfg.resize not in RESIZE:
        raise ConfigError(f"env.resize must be one of {', '.join(RESIZE)}, got {env_cfg.resize!r}")


def _check_names(env_cfg) -> None:
    """Every button and game variable the config names is one VizDoom knows."""
    buttons = _vizdoom().Button.__members__
    for name in env_cfg.buttons:
        if name not in buttons:
            raise ConfigError(f"env.buttons: '{name}' is not a VizDoom button (e.g. MOVE_FORWARD, ATTACK, USE, "
                              "SELECT_WEAPON2, TURN_LEFT_RIGHT_DELTA)")
    known = _vizdoom().GameVariable.__members__
    for key, terms in (("shaping", env_cfg.shaping), ("pickups", env_cfg.pickups)):
        for name in terms:
            if name not in known:
                raise ConfigError(f"env.{key}: '{name}' is not a VizDoom game variable "
                                  "(e.g. HEALTH, AMMO2, KILLCOUNT, FRAGCOUNT)")


def _game(env_cfg):
    """A configured, not yet initialised DoomGame (loading the .cfg starts no engine)."""
    vzd = _vizdoom()
    game = vzd.DoomGame()
    game.load_config(scenario_path(env_cfg))
    if env_cfg.buttons:
        game.set_available_buttons([vzd.Button.__members__[b] for b in env_cfg.buttons
                                    if b in vzd.Button.__members__])  # check() refuses the others
    if env_cfg.doom_map:
        game.set_doom_map(env_cfg.doom_map)
    if env_cfg.living_reward is not None:
        game.set_living_reward(float(env_cfg.living_reward))
    if env_cfg.death_penalty is not None:
        game.set_death_penalty(float(env_cfg.death_penalty))
    if env_cfg.render_hud is not None:
        game.set_render_hud(bool(env_cfg.render_hud))
    if env_cfg.render_screen_flashes is not None:
        game.set_render_screen_flashes(bool(env_cfg.render_screen_flashes))
    have = set(game.get_available_game_variables())
    for name in [*env_cfg.shaping, *env_cfg.pickups]:
        var = vzd.GameVariable.__members__.get(name)
        if var is None:
            continue  # check() refuses it; spec() may be asked first
        if var not in have:
            game.add_available_game_variable(var)
    return game


class _Heads:
    """The heads env.actions=heads builds over a scenario's buttons, and the buttons they cover."""

    def __init__(self, buttons):
        self.width = len(buttons)
        self.index = {b.name: i for i, b in enumerate(buttons)}
        self.used = set(NEVER_PRESSED)
        self.heads = []

    def add(self, name: str, rows: list[dict], covers=()) -> None:
        """A head whose options press the buttons of each row (name: value; the first row, {}: none)."""
        m = np.zeros((len(rows), self.width), np.float32)
        for r, presses in enumerate(rows):
            for button, value in presses.items():
                m[r, self.index[button]] = value
        self.heads.append((name, m))
        self.used.update(covers)

    def pair(self, name: str, a: str, b: str, delta: str | None = None) -> None:
        """A head of none / a / b, or of none / +delta / -delta when the scenario has only the delta."""
        if a in self.index and b in self.index:
            self.add(name, [{}, {a: 1}, {b: 1}], (a, b, delta) if delta else (a, b))  # the buttons cover the delta
        elif delta and delta in self.index:
            self.add(name, [{}, {delta: 1}, {delta: -1}], (delta,))


def action_heads(buttons) -> list:
    """[(head name, options [n, len(buttons)] float32)] for env.actions=heads."""
    h = _Heads(buttons)
    h.pair("move", "MOVE_FORWARD", "MOVE_BACKWARD", "MOVE_FORWARD_BACKWARD_DELTA")
    h.pair("strafe", "MOVE_LEFT", "MOVE_RIGHT", "MOVE_LEFT_RIGHT_DELTA")
    for name, button in (("attack", "ATTACK"), ("sprint", "SPEED"), ("interact", "USE")):
        if button in h.index:
            h.add(name, [{}, {button: 1}], (button,))
    weapons = [n for n in h.index if n.startswith("SELECT_WEAPON")]
    if weapons:
        h.add("weapon", [{}] + [{w: 1} for w in weapons], weapons)
    if "TURN_LEFT_RIGHT_DELTA" in h.index:  # finer aiming than the two buttons
        h.add("turn", [{"TURN_LEFT_RIGHT_DELTA": float(d)} for d in TURN_DELTAS],
              ("TURN_LEFT_RIGHT_DELTA", "TURN_LEFT", "TURN_RIGHT"))
    else:
        h.pair("turn", "TURN_LEFT", "TURN_RIGHT")
    for name in h.index:
        if name not in h.used:
            h.add(name.lower(), [{}, {name: 1}])
    return h.heads


def _actions(env_cfg, buttons):
    """(head sizes, per-head option matrices)."""
    if env_cfg.actions == "heads":
        mats = [m for _, m in action_heads(buttons)]
    else:
        n = len(buttons)
        mats = [np.concatenate([np.zeros((1, n), np.float32), np.eye(n, dtype=np.float32)])]
    return tuple(len(m) for m in mats), mats


def spec(env_cfg) -> EnvSpec:
    game = _game(env_cfg)
    sizes, _ = _actions(env_cfg, game.get_available_buttons())
    meas = len(game.get_available_game_variables()) if env_cfg.measurements else 0
    return EnvSpec((3, env_cfg.height, env_cfg.width), np.uint8, sizes, meas)


class DoomEnv:
    """One VizDoom game. Its engine process is replaced by a fresh one every env.restart_episodes
    episodes (at a reset): the engine's heap grows with every new episode and never shrinks
    (Farama-Foundation/ViZDoom#239, #318: "recreate ViZDoom instances during long runs"), and a
    restart costs about 0.1 s. The new engine's seed is derived from the env's seed and the
    restart count, so a run stays reproducible."""

    def __init__(self, env_cfg, seed: int, seat: doom_match.Seat | None = None):
        """seat: this engine's place in a match between agents (nodes/envs/doom_agents.py runs
        one DoomEnv per player, each in a process of its own); None: the single-player game or a
        match against bots only."""
        self.spec = spec(env_cfg)
        self.frameskip = env_cfg.frameskip
        self.cfg, self.seed, self.seat = env_cfg, seed, seat
        self.restarts = self.episodes = 0
        self.match = env_cfg.bots > 0 or seat is not None
        self.hosts_bots = env_cfg.bots > 0 and (seat is None or seat.index == 0)
        if self.hosts_bots:
            self.bot_profiles = doom_match.bot_profiles(os.path.join(os.path.dirname(_vizdoom().__file__), "bots.cfg"))
        self._frags, self._match_base, self._total = 0.0, (0.0, 0.0), 0.0
        self._deaths, self._was_dead = 0.0, False  # an agent match's death count and state at the last step
        self.game = self._start(seed)
        _, self.options = _actions(env_cfg, self.game.get_available_buttons())
        self.single = len(self.options) == 1
        variables = [v.name for v in self.game.get_available_game_variables()]
        self.measurements = env_cfg.measurements
        # (variable index, weight, increases only)
        self.shaping = [(variables.index(k), float(w), False) for k, w in env_cfg.shaping.items()]
        self.shaping += [(variables.index(k), float(w), True) for k, w in env_cfg.pickups.items()]
        self._vars = np.zeros(len(variables), np.float32)  # last seen game variables
        self._before = self._vars
        self._screen = None
        h, w = env_cfg.height, env_cfg.width
        at = 0.5 if env_cfg.resize == "centre" else 0.0  # env.resize: floor, OpenCV's nearest-neighbour rows
        self._rows = ((np.arange(h) + at) * RENDER_H / h).astype(np.intp)[:, None]
        self._cols = ((np.arange(w) + at) * RENDER_W / w).astype(np.intp)[None, :]

    def _start(self, seed: int):
        vzd = _vizdoom()
        game = _game(self.cfg)
        game.set_screen_resolution(vzd.ScreenResolution.RES_160X120)
        game.set_screen_format(vzd.ScreenFormat.CRCGCB)  # channels first: no transpose needed
        game.set_window_visible(False)
        game.set_sound_enabled(False)
        if self.cfg.episode_timeout:
            game.set_episode_timeout(self.cfg.episode_timeout)
        if self.match:
            game.set_mode(vzd.Mode.PLAYER)  # lock-step: the engine waits for every action
            game.add_game_args(doom_match.host_args(self.cfg) if self.seat is None
                               else doom_match.seat_args(self.cfg, self.seat))
        game.set_seed(seed % (2**31))
        game.init()
        self.game = game
        self._match_start()
        return game

    def _match_start(self) -> None:
        """A match begins (bots leave at every new episode): add this episode's bots."""
        self._total = 0.0
        if not self.match:
            return
        if self.seat is not None:
            # a match between agents begins one tic in, every player at once (each does this right
            # after its new episode, like a lock-step tic): at the first tic the host's player is not
            # in the game yet and reads HEALTH -999,900 (measured), which would be a measurement and a
            # pickup of 10^6 health
            self.game.advance_action(1)
        if self.hosts_bots:
            self.game.send_game_command("removebots")
            for name in doom_match.roster(self.bot_profiles, self.cfg.bot_skill, self.cfg.bots,
                                          seeds.derive(self.seed, seeds.BOTS, self.episodes)):
                self.game.send_game_command(f"addbot {name}")
        # the match's own counts: the engine keeps DEATHCOUNT across episodes (measured), so both
        # are counted from here
        self._frags = self.game.get_game_variable(_vizdoom().GameVariable.FRAGCOUNT)
        self._match_base = (self._frags, self.game.get_game_variable(_vizdoom().GameVariable.DEATHCOUNT))
        self._deaths, self._was_dead = self._match_base[1], False

    def _obs(self):
        state = self.game.get_state()
        if state is None:  # episode over: the next reset() supplies the real observation
            return None
        self._screen = state.screen_buffer
        if state.game_variables is not None:
            self._vars = state.game_variables.astype(np.float32)
        pixels = state.screen_buffer[:, self._rows, self._cols]
        return (pixels, self._vars) if self.measurements else pixels

    def first_obs(self):
        """The observation of the episode the engine is in (after init, without a new episode)."""
        return self._obs()

    def reset(self):
        self.episodes += 1
        if self.seat is None and self.cfg.restart_episodes and self.episodes % self.cfg.restart_episodes == 0:
            self.game.close()  # init() starts the first episode of the fresh engine
            self.restarts += 1
            self.game = self._start(seeds.derive(self.seed, seeds.ENV_RESTART, self.restarts))
        else:
            self.game.new_episode()
            self._match_start()
        return self._obs()

    def step(self, action):
        self.act(action)
        self.game.advance_action(self.frameskip)
        return self.outcome()

    def act(self, action) -> None:
        """Press the buttons of `action` (held until the next act) and remember the variables."""
        buttons = self.options[0][int(action)] if self.single else sum(m[int(a)] for m, a in zip(self.options, action))
        self._before = self._vars
        self.game.set_action(buttons.tolist())

    def tic(self, last: bool) -> None:
        """One tic of a match between agents: every player's engine takes it before the next
        (nodes/envs/doom_agents.py); the state is read only after the step's last tic."""
        self.game.advance_action(1, last)

    def outcome(self):
        """(obs, reward, done, info) of the step the engine has just taken."""
        vzd = _vizdoom()
        total = self.game.get_total_reward()
        reward, self._total = total - self._total, total
        done = self.game.is_episode_finished()
        respawned = False
        if self.match:  # the score is the frags (the game itself rewards nothing in a match)
            frags = self.game.get_game_variable(vzd.GameVariable.FRAGCOUNT)
            reward, self._frags = reward + frags - self._frags, frags
        obs = None if done else self._obs()
        before = self._before
        if self.seat is not None and not done:
            # agent matches respawn by the engine (sv_forcerespawn), inside some step: a step that
            # began dead or saw a death refills health and ammo, which is no pickup
            deaths = self.game.get_game_variable(vzd.GameVariable.DEATHCOUNT)
            respawned, self._deaths = self._was_dead or deaths > self._deaths, deaths
            self._was_dead = self.game.is_player_dead()
        info = NO_INFO
        if self.shaping:
            if done:  # no state any more, but the variables can still be read
                self._vars = np.array([self.game.get_game_variable(v)
                                       for v in self.game.get_available_game_variables()], np.float32)
            shaped, terms = reward, np.zeros(len(self.shaping), np.float32)
            for k, (i, w, up_only) in enumerate(self.shaping):
                change = float(self._vars[i] - before[i])
                if up_only:
                    change = 0.0 if respawned else max(change, 0.0)
                shaped += w * change
                terms[k] = change
            # terms: each shaping term's change, for a population whose members weigh them apart
            info = {"train_reward": shaped, "terms": terms}
        if self.seat is None and self.match and not done and self.game.is_player_dead():
            self.game.respawn_player()  # its tic may be the match's last one
            done = self.game.is_episode_finished()
            obs = None if done else self._obs()  # the respawned player: the next step's baseline
        if self.match and done:
            me = int(self.game.get_game_variable(vzd.GameVariable.PLAYER_NUMBER))
            frags = self._frags - self._match_base[0]
            deaths = self.game.get_game_variable(vzd.GameVariable.DEATHCOUNT) - self._match_base[1]
            info = {**info, "match": doom_match.result(self.game.get_server_state(), me, frags, deaths)}
        return obs, reward, done, info

    def render(self) -> np.ndarray:
        """The last full 160x120 frame, HxWx3 (for videos)."""
        if self._screen is None:
            return np.zeros((RENDER_H, RENDER_W, 3), np.uint8)
        return np.ascontiguousarray(self._screen.transpose(1, 2, 0))

    def close(self) -> None:
        self.game.close()


def make(env_cfg, seed: int) -> DoomEnv:
    if env_cfg.agents > 1:  # one engine alone would play a multiplayer map single-handed
        raise ConfigError(f"env.agents={env_cfg.agents}: a match between agents is made with nodes.envs.make_envs "
                          "(one env slot per agent), not make_env")
    return DoomEnv(env_cfg, seed)
