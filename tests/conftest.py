"""Fixtures only; helpers live in tests/helpers.py."""
import pytest


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "run")
