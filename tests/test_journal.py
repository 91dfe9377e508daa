"""What a run keeps of its evaluation rounds (nodes.evaluation.journal), at unit level: eval.jsonl
read back after a write that was cut short, and best.pt written before the round is counted best."""
import json
import logging
import os
import threading

import pytest

from nodes.evaluation.journal import JOURNAL, Journal, JournalError, best_path
from nodes.record import checkpoint as ckpt


def entry(round_: int, score: float) -> dict:
    return {"round": round_, "env_frames": 1000 * (round_ + 1), "version": round_, "score": score, "member": 0}


def write_journal(run_dir, text: str) -> str:
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, JOURNAL)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_a_torn_last_line_is_cut_off_with_a_warning_and_the_complete_rounds_load(run_dir, caplog):
    """A write cut short (a full disk, a crash) leaves part of a line at the end: the rounds before
    it load, the part is cut off the file (with a warning), and the next round's line starts clean."""
    lines = [json.dumps(entry(0, 1.0)), json.dumps(entry(1, 3.0))]
    path = write_journal(run_dir, "\n".join(lines) + "\n" + json.dumps(entry(2, 9.0))[:25])
    journal = Journal(run_dir)
    with caplog.at_level(logging.WARNING):
        loaded = journal.load()
    assert [e["round"] for e in loaded] == [0, 1] and journal.rounds == 2 and journal.best["round"] == 1
    assert any(JOURNAL in r.getMessage() and "cut short" in r.getMessage() for r in caplog.records)
    journal.add(entry(2, 2.0), {"policy_version": 2})
    assert [e["round"] for e in Journal(run_dir).load()] == [0, 1, 2]
    assert open(path).read() == "\n".join([*lines, json.dumps(entry(2, 2.0))]) + "\n"


def test_a_complete_last_line_without_its_newline_is_kept(run_dir):
    path = write_journal(run_dir, json.dumps(entry(0, 1.0)) + "\n" + json.dumps(entry(1, 2.0)))
    assert [e["round"] for e in Journal(run_dir).load()] == [0, 1]
    assert open(path).read().endswith("}\n")  # the next round's line goes on a line of its own


def test_a_torn_line_before_the_last_is_one_line_naming_the_file_and_the_line(run_dir):
    path = write_journal(run_dir, json.dumps(entry(0, 1.0)) + "\n" + json.dumps(entry(1, 2.0))[:25] + "\n"
                         + json.dumps(entry(2, 3.0)) + "\n")
    with pytest.raises(JournalError) as raised:
        Journal(run_dir).load()
    message = str(raised.value)
    assert "\n" not in message and f"{path} line 2 " in message, message


def test_best_is_recorded_only_once_best_pt_is_written(run_dir):
    """A round that beats the best is the best only once its state is in best.pt: a failed write
    (here a state that cannot be saved) leaves best, best.pt and eval.jsonl as they were."""
    journal = Journal(run_dir)
    journal.load()
    journal.add(entry(0, 1.0), {"policy_version": 0})
    assert ckpt.load(best_path(run_dir))["policy_version"] == 0
    with pytest.raises(TypeError, match="cannot pickle"):
        journal.add(entry(1, 5.0), {"policy_version": 1, "unsaveable": threading.Lock()})
    assert journal.best["round"] == 0
    assert ckpt.load(best_path(run_dir))["policy_version"] == 0
    assert [e["round"] for e in Journal(run_dir).load()] == [0]
    journal.add(entry(1, 5.0), {"policy_version": 1})  # the next write that works: the best now
    assert journal.best["round"] == 1 and ckpt.load(best_path(run_dir))["policy_version"] == 1
