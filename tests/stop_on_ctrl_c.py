"""A pytest plugin (tests/conftest.py imports its hook): Ctrl-C while a test runs dtgen in
process (launch_run, run_small) ends the session, as Ctrl-C anywhere else in it does.

The launcher turns Ctrl-C into an interrupted run (every rank stopped, run.json written,
RunError with exit code 130, as `dtgen run` exits): right for the command, but the test
around it only fails, and the session would go on to the next. Here the session stops
after that test's teardown (its processes, its network namespaces), with the reason.
"""

from __future__ import annotations

import pytest

from opentikz_dt.errors import EXIT_INTERRUPTED


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    yield
    if call.excinfo is not None and getattr(call.excinfo.value, "exit_code", None) == EXIT_INTERRUPTED:
        item.session.shouldstop = "a run inside a test was interrupted (Ctrl-C): the session stops"
