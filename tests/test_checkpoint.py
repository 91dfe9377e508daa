"""Checkpoints: atomic save, newest found, truncated or foreign files give one clear error."""
import os

import pytest
import torch

from nodes.record import checkpoint as ckpt


def state(version):
    return {"model": {"w": torch.ones(3) * version}, "optimizer": {}, "policy_version": version,
            "env_frames": version * 10, "episodes": 0, "recent_rewards": []}


def test_save_keeps_newest_and_loads_weights_only(tmp_path):
    run = str(tmp_path)
    for v in (1, 2, 3):
        ckpt.save(run, state(v), keep=2)
    names = [os.path.basename(p) for p in ckpt.list_checkpoints(run)]
    assert names == ["checkpoint_000000002.pt", "checkpoint_000000003.pt"]
    loaded = ckpt.load(ckpt.latest(run))
    assert loaded["policy_version"] == 3 and loaded["model"]["w"].tolist() == [3.0, 3.0, 3.0]
    assert not [f for f in os.listdir(ckpt.checkpoint_dir(run)) if ".tmp" in f]


def test_truncated_checkpoint_is_one_clear_error(tmp_path):
    path = ckpt.save(str(tmp_path), state(1), keep=2)
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(ckpt.CheckpointError) as err:
        ckpt.load(path)
    assert "unreadable (truncated or not a torch checkpoint)" in str(err.value)
    assert "\n" not in str(err.value)


def test_foreign_checkpoint_is_refused(tmp_path):
    path = tmp_path / "checkpoint_000000001.pt"
    torch.save({"something": torch.zeros(2)}, path)
    with pytest.raises(ckpt.CheckpointError, match="is not a distrl-checkpoint-v1 checkpoint"):
        ckpt.load(str(path))
    path.write_bytes(b"not a zip file at all")
    with pytest.raises(ckpt.CheckpointError, match="unreadable"):
        ckpt.load(str(path))
