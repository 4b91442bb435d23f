"""tests/stop_on_ctrl_c.py: an interrupted run inside a test ends the session."""

from __future__ import annotations

from pathlib import Path

pytest_plugins = ("pytester",)

HERE = Path(__file__).resolve().parent

TWO_TESTS = """
from opentikz_dt.errors import RunError

def test_a_run_the_user_interrupts():
    error = RunError("interrupted: every rank was stopped")
    error.exit_code = 130  # what runner/launch.py raises for an interrupted run
    raise error

def test_one_more():
    pass
"""


def test_an_interrupted_run_stops_the_session_after_its_test(pytester):
    pytester.syspathinsert(HERE)
    pytester.makepyfile(test_two=TWO_TESTS)
    result = pytester.runpytest("-p", "stop_on_ctrl_c", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)  # test_one_more never ran
    result.stdout.fnmatch_lines(["*a run inside a test was interrupted (Ctrl-C): the session stops*"])


def test_a_run_that_failed_otherwise_does_not(pytester):
    pytester.syspathinsert(HERE)
    pytester.makepyfile(test_two=TWO_TESTS.replace("error.exit_code = 130", "error.exit_code = 3"))
    result = pytester.runpytest("-p", "stop_on_ctrl_c", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=1)
