"""Whether a checkpoint fits the model a run builds (nodes.models.identity), at unit level: two builds
of the model, one's state checked against the other. A misfit is one line that says what changed
(checkpoint -> this run): the observation key or the actions with both sizes, and the tensors."""
import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from nodes.config.schema import Config
from nodes.envs import EnvSpec
from nodes.envs.observations import keys_of, stored
from nodes.errors import CheckpointError
from nodes.models.actor_critic import ActorCritic
from nodes.models.identity import check_identity, model_identity

MODEL = dataclasses.replace(Config().model, fc_size=64, hidden_size=64)
PATH = "run/checkpoints/checkpoint_000000002.pt"


def dict_spec(direction_classes: int, actions=(3,)) -> EnvSpec:
    """A Dict observation: a vector and a categorical key, `direction`, of `direction_classes` classes."""
    space = gym.spaces.Dict({"vec": gym.spaces.Box(-1, 1, (4,), np.float32),
                             "direction": gym.spaces.Discrete(direction_classes)})
    keys = keys_of(space, "test")
    obs_shape, obs_dtype, meas_size = stored(keys)
    return EnvSpec(obs_shape, obs_dtype, actions, meas_size=meas_size, keys=keys)


def misfit(saved_model: ActorCritic, model: ActorCritic, identity: str | None = "saved") -> str:
    """The one line `model` refuses `saved_model`'s checkpoint state with."""
    saved_identity = saved_model.identity() if identity == "saved" else identity
    with pytest.raises(CheckpointError) as raised:
        model.check_fit(saved_identity, saved_model.state_dict(), PATH)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"checkpoint {PATH} "), message
    return message


def test_a_categorical_key_with_other_classes_is_refused_before_a_model_is_built():
    """The launcher's check (no model, no tensors): the identity records the number of classes."""
    saved = model_identity(dict_spec(8), MODEL).line
    with pytest.raises(CheckpointError) as raised:
        check_identity(model_identity(dict_spec(16), MODEL), saved, PATH)
    assert "observation 'direction' categorical [] of 8 classes -> categorical [] of 16 classes" in str(raised.value)
    check_identity(model_identity(dict_spec(8), MODEL), saved, PATH)  # the same env: it fits


def test_a_discrete_action_with_other_sizes_names_the_action_and_the_tensors():
    message = misfit(ActorCritic(dict_spec(8, (8,)), MODEL), ActorCritic(dict_spec(8, (16,)), MODEL))
    assert "holds another model (checkpoint -> this run): actions Discrete(8) -> Discrete(16)" in message
    assert "actor.weight [8, 64] -> [16, 64]" in message and "actor.bias [8] -> [16]" in message


def test_another_model_config_names_the_tensors_whose_shapes_differ():
    """The same env (the same identity) with another model.hidden_size: the tensors say what differs."""
    spec = EnvSpec((4,), np.float32, (2,))
    message = misfit(ActorCritic(spec, MODEL), ActorCritic(spec, dataclasses.replace(MODEL, hidden_size=32)))
    assert "does not fit this model/config (checkpoint -> this run): tensors core.weight_ih [192, 64] -> [96, 64]" \
        in message, message
    assert "more" in message  # GRU, actor and critic tensors: the first few named, the rest counted


# What nodes.models.identity recorded before the number of classes and the actions (tests/test_own_env.py
# has the first from a real run): checkpoints written then resume as they did.
LEGACY_VECTOR = "encoder built-in on obs [4]"
LEGACY_DICT = "encoder built-in on direction categorical [], vec vector [4]"


def test_a_checkpoint_from_before_classes_and_actions_were_recorded_still_fits():
    spec = EnvSpec((4,), np.float32, (2,))
    ActorCritic(spec, MODEL).check_fit(LEGACY_VECTOR, ActorCritic(spec, MODEL).state_dict(), PATH)
    check_identity(model_identity(spec, MODEL), LEGACY_VECTOR, PATH)
    check_identity(model_identity(dict_spec(8), MODEL), LEGACY_DICT, PATH)
    # its classes were not recorded: a change shows in the tensors, named with both shapes
    message = misfit(ActorCritic(dict_spec(8), MODEL), ActorCritic(dict_spec(16), MODEL), identity=LEGACY_DICT)
    assert "does not fit this model/config" in message and "core.weight_ih [192, 72] -> [192, 80]" in message, message
    # and another model than the legacy line says is refused with both lines
    with pytest.raises(CheckpointError) as raised:
        check_identity(model_identity(spec, MODEL), LEGACY_DICT, PATH)
    assert f"holds another model (checkpoint -> this run): {LEGACY_DICT} -> {LEGACY_VECTOR}" in str(raised.value)
