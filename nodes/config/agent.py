"""What is learned: the env the agent plays (EnvConfig), its model (ModelConfig) and the algorithm
that trains it (AlgoConfig).

Sections of the structured config (nodes.config.schema.Config). Every default of these keys lives
here, and the comments beside and above each field are its entry in docs/configuration.md
(launch.config_docs reads them from this source).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EnvConfig:
    name: str = "doom_basic"  # the conf/env/ option that selected this env (run directories are named by it)
    family: str = "doom"  # doom | atari | dmlab | gym
    # doom: a scenario .cfg bundled with vizdoom; atari: ALE/<Game>-v5; dmlab: a level; gym: a gymnasium id
    # ("pkg.module:EnvId" imports pkg.module first, which registers EnvId)
    id: str = "basic.cfg"
    # gym: a function that returns a gymnasium.Env, "pkg.module:function", used instead of env.id
    # when set (a module of your own, importable in every process: docs/your-environment.md); it is
    # called with env.kwargs, and may wrap the env in gymnasium's wrappers (resize, grayscale, frame stacking)
    make: str = ""
    # gym: keyword arguments for gym.make(env.id, ...) or env.make's function (+env.kwargs.size=8)
    kwargs: dict[str, Any] = field(default_factory=dict)
    # gym: keys of a Dict observation the model never sees (not stored either), e.g. MiniGrid's
    # text `mission`, which no encoder takes
    drop_keys: list[str] = field(default_factory=list)
    # gym: where a uint8 image observation keeps its channels: auto (HxWxC when the last dim is 1, 3
    # or 4, else CxHxW when the first is) | last (HxWxC) | first (CxHxW)
    channels: str = "auto"
    # python: each env a Python object stepped by its rollout worker | envpool: each env group of a
    # rollout worker one EnvPool batch stepped in C++ (Atari and EnvPool's gym tasks: MuJoCo,
    # classic control; nodes/envs/envpool_env.py); evaluation and enjoy step the python backend
    backend: str = "python"
    frameskip: int = 4  # engine frames per agent step (env_frames count these)
    width: int = 128  # observation size fed to the model (VizDoom renders 160x120 and is resized)
    height: int = 72  # the model's input height
    reward_scale: float = 0.01  # training reward = game reward x this; logged rewards stay unscaled
    episode_timeout: int = 0  # VizDoom tics; 0 keeps the scenario's own
    # pixel preprocessing (Atari: 84x84 grayscale, 4 stacked frames):
    grayscale: bool = False  # one luminance channel instead of RGB
    frame_stack: int = 1  # the last this many frames stacked as the observation
    # Atari-style episode handling:
    noop_max: int = 0  # up to this many no-ops after reset (random start states)
    episodic_life: bool = False  # a lost life ends the trajectory for training; the score runs on
    clip_rewards: bool = False  # train on sign(reward); the logged score stays the game's
    # gym Box actions: true clips the policy's unbounded samples to the bounds before the env sees
    # them; false passes them on as sampled (MuJoCo clamps its controls itself, but charges its
    # control cost on the actions it was given, as in Sample Factory's MuJoCo example)
    clip_actions: bool = True
    # gym Box actions: true lets the policy act in units of the bounds, -1..1 per dim mapped linearly
    # onto low..high (gymnasium's RescaleAction), so the Gaussian's initial std of model.action_std
    # spans the same share of every task's range (Humanoid's +-0.4 as Ant's +-1); a no-op on tasks
    # bounded at +-1. Clipping (clip_actions) then clips to -1..1 in these units
    rescale_actions: bool = False
    # Atari: press FIRE for one agent step after a game reset and after a lost life, in games whose
    # action set has it (Breakout serves the ball on FIRE), as Sample Factory's and CleanRL's
    # wrappers do; these frames are not counted in env_frames. The python backend only
    fire_reset: bool = False
    # DeepMind Lab:
    level_cache_dir: str = ""  # generated level layouts are cached here ("" = ~/.cache/distrl/dmlab)
    # VizDoom:
    actions: str = "single"  # single: no-op + one button per action | heads: one discrete head per button group
    measurements: bool = True  # game variables (health, ammo, ...) beside the pixels (used by model=full)
    shaping: dict[str, float] = field(default_factory=dict)  # game variable -> training reward per unit of change
    pickups: dict[str, float] = field(default_factory=dict)  # the same per unit of increase only (health, armor, ...)
    # a fresh engine after this many episodes (0: never): VizDoom's engine keeps a little memory per
    # new episode for good, which adds up over hours (docs/benchmarks.md#figures-behind-the-codes-choices)
    restart_episodes: int = 5000
    buttons: list[str] = field(default_factory=list)  # replaces the scenario's buttons ([]: its .cfg's)
    doom_map: str = ""  # the map to play ("": the scenario's own, MAP01)
    # the game's reward per tic alive and for dying (VizDoom's living_reward, death_penalty: null
    # keeps the scenario .cfg's); part of the game reward, so of what is logged as the score
    living_reward: Any = None
    death_penalty: Any = None  # subtracted from the game reward at death (VizDoom's death_penalty)
    # the status bar (health, ammo) drawn into the frames the model sees: true | false | null (the
    # .cfg's own; the bundled ones hide it, Sample Factory's .cfg variants of basic, defend_* and
    # deadly_corridor show it)
    render_hud: Any = None
    # the engine's full-screen tints (red when the player is hurt, gold on a pickup): true | false |
    # null (the .cfg's own; the bundled defend_*, deadly_corridor and health_gathering* turn them off,
    # Sample Factory's .cfg variants leave them on, the engine's default)
    render_screen_flashes: Any = None
    # which pixel of the 160x120 render each pixel of the resized frame takes: centre (the one under
    # its centre) | floor (the one under its top-left corner, as OpenCV's INTER_NEAREST samples:
    # the frames a Sample Factory agent was trained on; launch.import_sf sets it)
    resize: str = "centre"
    # A match against the engine's scripted bots (nodes/envs/doom_match.py): the env hosts a
    # deathmatch of itself and `bots` bots; an episode is one match of match_minutes, a death
    # respawns, and the score (the logged episode reward) is the agent's frags.
    bots: int = 0  # 0: the single-player game
    bot_skill: str = "mixed"  # easy | medium | hard | mixed: which of bots.cfg's bots join (by their skill)
    match_minutes: float = 4.0  # the length of one match (one episode)
    max_players: int = 0  # players the map takes (0: its deathmatch starts, at most the engine's 16)
    # A match between learning agents (nodes/envs/doom_agents.py): `agents` > 1 players, one engine
    # each in a subprocess, stepped in lock-step; each agent is an env slot of its own, so a match
    # fills `agents` consecutive slots of one env group. A match whose engines die or stop answering
    # for match_timeout_s is restarted (and counted).
    agents: int = 1
    match_timeout_s: float = 20.0  # a match whose engines do not answer this long is restarted



@dataclass
class ModelConfig:
    name: str = "simplified"  # the conf/model/ option
    # auto: conv for image observations, mlp for vectors | conv (Sample Factory's simplified stack,
    # 32-64-128, ELU) | nature (DQN's 32-64-64 3x3/1, ReLU: Sample Factory 2's Atari encoder) | impala | mlp
    encoder: str = "auto"
    fc_size: int = 512  # width of the fully connected layers after the encoder
    # the observation normaliser's epsilon: (x - running mean) / sqrt(running var + this), per element,
    # in the observation's own units (pixels 0-255). 1e-5 magnifies a pixel that is constant but for
    # a rare change of one grey level about 300x (to the clip, 5); Sample Factory divides pixels by
    # 255 first and adds 1e-5 there, which is 0.65 here: pixels that vary by less than about one grey
    # level are damped instead (its VizDoom and Atari examples;
    # docs/environments.md#defend_the_center-what-was-ruled-out)
    obs_norm_eps: float = 1e-5
    # the mlp encoder's activation: elu | tanh (Sample Factory's MuJoCo model; model=feedforward has it) | relu
    mlp_activation: str = "elu"
    # orthogonal: every conv and linear layer orthogonal at gain 1 with zero biases, the rows for
    # Gaussian means at gain 0.01 (Sample Factory's VizDoom models; CleanRL's means) |
    # torch_default: PyTorch's own initialisation for every layer (Sample Factory's MuJoCo example,
    # its policy_initialization=torch_default: Ant and Humanoid gained, HalfCheetah lost its running
    # gait, so model=feedforward keeps orthogonal; docs/environments.md#mujoco) |
    # orthogonal_heads: the actor and critic orthogonal, the encoder's weights PyTorch's with zero
    # biases, the core PyTorch's (what Sample Factory 2.1.1's orthogonal init does in effect: its
    # TorchScript encoder escapes it). env=doom_defend_the_center's (presets/): 4 of 6 seeds took off
    # by 3M against 1 of 6 at orthogonal; on health_gathering_supreme both seeds ended lower than at
    # orthogonal (still above Sample Factory's), so not the family's default
    # (docs/environments.md#defend_the_center-the-initialisation)
    init: str = "orthogonal"
    # fully connected layers of fc_size after the conv or IMPALA encoder (Sample Factory 2's conv
    # encoder has one, encoder_conv_mlp_layers=[512]: its encoder_mlp_layers=[512, 512] is the MLP
    # encoder's for vector observations; the mlp encoder here always has its own two)
    fc_layers: int = 1
    core: str = "gru"  # gru | lstm | none
    hidden_size: int = 512  # the recurrent core's state size
    measurements: bool = False  # feed the env's measurements (game variables) through an MLP
    # continuous actions (a Box): the Gaussian's std at the start, the same for every dim (a learned
    # log-std per dim, state-independent; the means start near 0). 1.0 is Sample Factory's and
    # CleanRL's; a task whose control cost at this spread outweighs what staying alive pays may
    # learn to end its episodes (Ant did, before its means started near 0 and its actions reached
    # the task unclipped: docs/environments.md#ant-the-die-early-optimum)
    action_std: float = 1.0


@dataclass
class AlgoConfig:
    name: str = "appo"  # asynchronous PPO: PPO clipping + GAE, or V-trace targets (algo.vtrace)
    # Adam's learning rate. A resumed run trains at this launch's algo.lr (a changed value too) x
    # lr_schedule at its progress x lr_scaling for its nodes, not at the checkpoint's optimizer's lr
    lr: float = 1e-4
    # constant | linear: lr x (1 - env frames / train.max_env_frames), to 0 at the run's end (Sample
    # Factory's linear_decay, of its MuJoCo and Atari examples); PBT's lr is the one scaled
    lr_schedule: str = "constant"
    # none | sqrt | linear: the lr x (nodes in the world)^(0 | 1/2 | 1), followed through elastic
    # changes. For sync.global_batch=false, where every update averages N nodes' batches and N
    # nodes take N times fewer steps per frame (docs/multi-node.md#batch-size-and-learning-rate)
    lr_scaling: str = "none"
    gamma: float = 0.99  # discount factor
    # V-trace targets (the Sample Factory paper's APPO); off: GAE (gae_lambda) on the behaviour
    # values, as Sample Factory 2 runs VizDoom. GAE by default: with the policy lag near 1.5 and
    # PPO's clipping it learns more per frame than V-trace on defend_the_center, as much on
    # doom_basic and defend_the_line (docs/benchmarks.md; docs/changelog.md). A node with a much
    # larger policy lag may want V-trace
    vtrace: bool = False
    vtrace_rho: float = 1.0  # V-trace's importance-weight clip on the targets (rho bar)
    vtrace_c: float = 1.0  # V-trace's trace-cutting clip (c bar)
    gae_lambda: float = 0.95  # GAE's lambda (vtrace=false)
    ppo_clip: bool = True  # PPO clipped surrogate; off: plain policy gradient
    clip_ratio: float = 0.1  # PPO's clipping: the policy ratio is kept within 1 +- this
    value_loss_coeff: float = 0.5  # weight of the value loss against the policy loss
    # The next four are Sample Factory's VizDoom settings: on doom_basic, defend_the_center and
    # defend_the_line they learn more per frame than an entropy bonus of 0.003 without the other three.
    # > 0: PPO's clipped value loss, values kept within this of the behaviour value (in the
    # normalised units when normalize_returns is on); 0: plain squared error
    value_clip: float = 0.2
    # entropy: the entropy bonus (entropy_coeff) | symmetric_kl: a penalty of entropy_coeff x half the
    # symmetric KL divergence to the uniform policy, its batch mean capped at 30 (Sample Factory 2's
    # exploration_loss=symmetric_kl, nodes.learning.losses)
    exploration_loss: str = "symmetric_kl"
    entropy_coeff: float = 0.001  # the exploration loss's coefficient, whichever it is
    # > 0: a penalty of this x the KL divergence from the behaviour policy to the current one
    # (estimated from the batch's actions: nodes.learning.losses.kl_to_behaviour), as MuJoCo PPO setups add
    # (Sample Factory's kl_loss_coeff, 0.1 in its MuJoCo example); logged as train/kl whatever it is
    kl_coeff: float = 0.0
    max_grad_norm: float = 4.0  # 0 disables clipping
    adam_eps: float = 1e-6  # Adam's epsilon
    adam_beta1: float = 0.9  # Adam's beta1
    adam_beta2: float = 0.999  # Adam's beta2
    # Passes over each batch (epochs) and the optimizer steps of each pass (minibatches, the batch's
    # trajectories split at random into this many): PPO's usual 4-10 x 4-32 on MuJoCo, Sample
    # Factory's MuJoCo example 2 x 4. 1 x 1 (the default, Sample Factory's VizDoom setting): one step
    # per batch. Every step is an all-reduce across nodes and a policy version (the policy lag
    # counts optimizer steps, as in Sample Factory); a batch's observation and return statistics
    # are folded into the running norms once, in its first epoch
    epochs: int = 1  # passes over each batch
    # optimizer steps of each pass, each on this share of the trajectories a node learns on (its
    # share of the world's batch with sync.global_batch; a round of every env in sync modes)
    minibatches: int = 1
    normalize_advantages: bool = True  # per node (per minibatch), as in DD-PPO
    # the critic predicts value targets divided by their running std (after their running mean is
    # taken off; moments over all nodes), and values are scaled back for V-trace/GAE; changes
    # what the value loss sees, not the policy loss
    normalize_returns: bool = True
    # an episode cut by a time limit (the env says `truncated`: gymnasium's envs, MuJoCo's 1,000
    # steps) is not the task's end: its last reward gets gamma x the behaviour value of the state it
    # was cut at (Sample Factory's value_bootstrap, the value there standing for the next state's).
    # Acts only where an env reports a time limit; VizDoom's and Atari's limits are the game's rules
    value_bootstrap: bool = True
