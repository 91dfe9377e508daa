"""launch.process.exits.report: how a node's end becomes its exit code and the line the user sees."""
import signal

import pytest

from launch.process.exits import TOO_FEW_NODES, report
from nodes.errors import ConfigError, Stopped, TooFewNodes
from sync.rendezvous import RunOver


def test_a_node_that_comes_to_a_run_that_ended_exits_zero_saying_so(capsys):
    assert report(RunOver("the run is over (finished): nothing to join")) == 0
    assert capsys.readouterr().err.strip() == "the run is over (finished): nothing to join"


def test_run_over_is_matched_by_class_not_by_name(capsys):
    class Late(RunOver):
        pass

    assert report(Late("the run is over (stopped): nothing to join")) == 0
    named_alike = type("RunOver", (RuntimeError,), {})  # another class of the same name is a failure
    assert report(named_alike("boom")) == 1


@pytest.mark.parametrize("exc, code", [
    (Stopped(signal.SIGTERM), 128 + signal.SIGTERM),
    (KeyboardInterrupt(), 130),
    (TooFewNodes("2 nodes left, sync.min_nodes=3"), TOO_FEW_NODES),
    (ConfigError("bad value"), 2),
    (RuntimeError("unexpected"), 1),
], ids=["stopped", "ctrl-c", "too-few", "config", "unexpected"])
def test_exit_codes(exc, code):
    assert report(exc) == code
