"""Every random stream of a run is derived here from the run's `seed`, through numpy's SeedSequence.

A stream is named by a spawn key: its kind (one of the constants below) and its place (rank,
worker, env, ...). Streams with different keys are independent by SeedSequence's construction, so
no two streams of a run can collide, whatever the rank, worker and env counts (offsets such as
`seed + 100_003 * rank` collide as soon as the counts grow past the offset). The same key gives
the same seed in every process, so a run is reproducible for its `seed`.
"""
from __future__ import annotations

import numpy as np

# () or (member,) for population members after the first: the initial parameters (identical on
# every rank; rank 0's are broadcast anyway)
MODEL_INIT = 0
# (rank, env index in the rank, policy version at launch): an env's engine and its own random
# stream. The env's index in the rank, not (worker, index in the worker): the same env gets the
# same stream whatever the number of rollout workers; the version keeps a resumed run from
# replaying the first launch's episodes.
ENV = 1
POLICY_SAMPLING = 2  # (rank, policy worker): action sampling in a policy worker (async and sync modes)
SIMULATE = 3  # (rank, worker): the benchmark's random actions
# (rank, env index in the rank, collection round since version 0): the uniforms that decide an
# env's actions in sampler.mode=deterministic (one stream per env and rollout, whoever infers)
ACTIONS = 4
# (the env's own seed, restart count): a VizDoom env's fresh engine (nodes/envs/doom.py)
ENV_RESTART = 5
# (the env's own seed, episode): which of bots.cfg's bots join a VizDoom match (nodes/envs/doom_match.py)
BOTS = 6
# (the match's seed, player index, restart count): one player engine of a match between agents
# (nodes/envs/doom_agents.py)
PLAYER = 7
# (rank, env index in the rank, policy version at launch): which population member plays each of an
# env's episodes (nodes/population/assignment.py, population.assign=episode and self-play)
ASSIGN = 8
# (PBT step): a PBT step's draws (which top member a replaced one copies, what mutates); the same
# on every rank, so every rank takes the same decision (nodes/population/pbt.py)
PBT = 9
# (evaluation round, member): the eval envs of one round of evaluation during training (nodes/evaluation/evaluator.py)
EVAL = 10


def derive(seed: int, stream: int, *place: int) -> int:
    """A non-negative 31-bit seed (what every engine accepts) for one stream of the run."""
    state = np.random.SeedSequence(int(seed), spawn_key=(stream, *place)).generate_state(1)[0]
    return int(state) >> 1
