"""Fixtures, and the suite's time per file at the end of a run; helpers live in tests/helpers.py."""
import collections
import os

import pytest

# seconds (setup + call + teardown) and tests, per test file: where the suite's time goes, for
# whoever has to keep it well under 20 minutes (--durations names single tests only)
_FILE_SECONDS: dict[str, float] = collections.defaultdict(float)
_FILE_TESTS: dict[str, int] = collections.Counter()


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "run")


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] += report.duration
    if report.when == "call" or (report.when == "setup" and report.skipped):
        _FILE_TESTS[path] += 1


def pytest_terminal_summary(terminalreporter):
    if not _FILE_SECONDS:
        return
    total = sum(_FILE_SECONDS.values())
    terminalreporter.section("time per test file (slowest 15)")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:15]:
        terminalreporter.write_line(f"{seconds:8.1f} s {100 * seconds / total:5.1f} % {_FILE_TESTS[path]:4d} tests  "
                                    f"{os.path.basename(path)}")
    terminalreporter.write_line(f"{total:8.1f} s in all, {len(_FILE_SECONDS)} files")
