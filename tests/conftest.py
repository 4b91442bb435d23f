"""Shared fixtures, the skip rules for markers (gpu skips without CUDA; latex without
pdflatex), and the check that the suite leaves nothing in the temporary directory.

The session gets a private TMPDIR (before collection, so torch, every subprocess and
pytest-xdist's workers see it); at the end anything left in it fails the session, and new files in the shared
temporary directory that look like ours are reported. pytest's own tmp_path folders are
made in the shared one and removed at the end, pass or fail (pyproject.toml:
tmp_path_retention_policy; `--basetemp DIR` keeps them in DIR).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from stop_on_ctrl_c import pytest_runtest_makereport  # noqa: F401  (a hook: Ctrl-C in a run ends the session)

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
# What dtgen and torch's launcher used to leave in the temporary directory.
OURS = ("dtgen-*", "pytorch-errorfile-*", "torchelastic_*", "watchdog_timer_*")
# torch makes its (empty) compile-cache folder on import wherever TMPDIR points.
IGNORED_IF_EMPTY = ("torchinductor_*",)
_session: dict = {}


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # a pytest-xdist worker (`make test` runs the tests without processes so) inherits the
        # controller's private TMPDIR; the controller checks it once every worker has finished
        return
    shared = tempfile.gettempdir()
    private = tempfile.mkdtemp(prefix="dtgen-pytest-tmp-")
    _session.update(shared=Path(shared), private=Path(private), saved=os.environ.get("TMPDIR"),
                    before=_ours_in(Path(shared)), set_temproot="PYTEST_DEBUG_TEMPROOT" not in os.environ,
                    pytest_roots=set(Path(shared).glob("pytest-of-*")))
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", shared)  # tmp_path stays where pytest keeps it
    os.environ["TMPDIR"] = private
    tempfile.tempdir = private


def pytest_sessionfinish(session, exitstatus):
    if "private" not in _session:  # an xdist worker: its controller checks
        return
    private, shared = _session["private"], _session["shared"]
    left = sorted(str(p.relative_to(private)) for p in private.iterdir()
                  if not (p.is_dir() and not any(p.iterdir()) and any(p.match(g) for g in IGNORED_IF_EMPTY)))
    # Other test sessions' private folders come and go on a shared machine: not ours to report.
    new_shared = sorted(name for name in _ours_in(shared) - _session["before"] if not name.startswith("dtgen-pytest-tmp-"))
    report = session.config.pluginmanager.get_plugin("terminalreporter")
    if new_shared and report:  # other programs on this machine may have made some: a warning
        report.write_line(f"WARNING: new entries in {shared} during the tests: {', '.join(new_shared)}", yellow=True)
    if left:
        message = f"the tests left files in their TMPDIR (tests use tmp_path): {', '.join(left)}"
        if report:
            report.write_line(f"FAILED: {message}", red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    if "private" not in _session:
        return
    tempfile.tempdir = None
    if _session["set_temproot"]:
        os.environ.pop("PYTEST_DEBUG_TEMPROOT", None)
    if _session["saved"] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = _session["saved"]
    shutil.rmtree(_session["private"], ignore_errors=True)  # ours; reported above
    # pytest removes every tmp_path (pyproject: tmp_path_retention_policy) but not its own folder
    for root in set(_session["shared"].glob("pytest-of-*")) - _session["pytest_roots"]:
        with contextlib.suppress(OSError):
            root.rmdir()  # only if empty: another session's may be in it


def _ours_in(folder: Path) -> set:
    return {p.name for pattern in OURS for p in folder.glob(pattern)}


@pytest.fixture(scope="session", autouse=True)
def _cached_runs_in_tmp_path(tmp_path_factory):
    """run_small's shared runs go to a pytest folder, not a fresh /tmp one each."""
    from opentikz_dt.runner import testing

    testing.DEFAULT_ROOT = tmp_path_factory.mktemp("runs")
    yield
    testing.DEFAULT_ROOT = None


@pytest.fixture(scope="session")
def _rank_server():
    """One fork server for every run the tests launch in this process, so their ranks import
    torch once (runner/forkserver.py); `dtgen run` subprocesses start their own, as users' do."""
    from opentikz_dt.runner import forkserver

    # multiprocessing keeps the server's socket in a folder of its own that it removes when this
    # process exits, after the private TMPDIR has been checked and removed: so in the shared one
    with forkserver.kept(socket_base=str(_session.get("shared") or tempfile.gettempdir())):
        yield


@pytest.fixture(autouse=True)
def _dist_tests_share_a_rank_server(request):
    if request.node.get_closest_marker("dist"):
        request.getfixturevalue("_rank_server")


def pytest_collection_modifyitems(config, items):
    no_tex = shutil.which("pdflatex") is None
    for item in items:
        # make test runs dist tests two at a time; emulated clusters share fixed ports and names
        if "netcluster" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("solo"):
            raise pytest.UsageError(f"{item.nodeid} uses netcluster: mark it solo (CONTRIBUTING.md, Markers)")
        # markers, not item.keywords: keywords hold the folders' names too, and a checkout in
        # a folder named gpu (or latex) would skip every test
        if item.get_closest_marker("latex") and no_tex:
            item.add_marker(pytest.mark.skip(reason="pdflatex not installed (see docs/install.md: TeX packages)"))
        if item.get_closest_marker("gpu") and not _cuda_available():
            item.add_marker(pytest.mark.skip(reason="no CUDA device on this machine"))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def netcluster():
    """Factory for emulated clusters (scripts/netcluster.sh): `netcluster(hosts, link)`.
    Every cluster it made is torn down afterwards, also when the test failed, and the
    test fails if any of their namespaces is left."""
    from opentikz_dt.runner.netcluster import NetCluster, namespaces, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    made = []

    def make(hosts: int, link: str = "200mbit"):
        cluster = NetCluster(hosts, link)
        made.append(cluster)
        return cluster.up()

    yield make
    for cluster in made:
        cluster.down()
    left = [ns for cluster in made for ns in namespaces(cluster.name + "-")]
    assert not left, f"namespaces left behind: {left}"
