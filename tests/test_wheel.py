"""A plain wheel, installed in a fresh virtual environment without torch, works:
it finds its templates and schemas, and the figure side runs without torch."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(root), str(REPO)],
                   check=True, timeout=300)
    wheel = next(root.glob("dtgen-*.whl"))
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=600)
    return env_dir


@pytest.mark.slow
def test_wheel_has_resources_and_runs_without_torch(installed, tmp_path):
    dtgen = installed / "bin" / "dtgen"
    python = installed / "bin" / "python"
    check = subprocess.run([str(python), "-c", "import importlib.util as u, opentikz_dt, pathlib; "
                            "p = pathlib.Path(opentikz_dt.__file__).parent; "
                            "print((p / 'templates').is_dir(), (p / 'schemas' / 'spec.schema.json').is_file(), "
                            "(p / 'runner' / '__init__.py').is_file(), u.find_spec('torch') is None)"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert check.stdout.split() == ["True", "True", "True", "True"], check.stderr
    # Every source package (opentikz_dt/** and runner/**) made it into the wheel.
    expected = sorted({str(p.parent.relative_to(REPO / "opentikz_dt")) for p in (REPO / "opentikz_dt").rglob("__init__.py")}
                      | {str(Path("runner") / p.parent.relative_to(REPO / "runner")) for p in (REPO / "runner").rglob("__init__.py")})
    listing = subprocess.run([str(python), "-c", "import opentikz_dt, pathlib; p = pathlib.Path(opentikz_dt.__file__).parent; "
                              "print('\\n'.join(sorted(str(i.parent.relative_to(p)) for i in p.rglob('__init__.py'))))"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert sorted(listing.stdout.split()) == sorted(e.replace("runner/.", "runner") for e in expected)
    spec = REPO / "examples" / "ps-sync.yaml"
    result = subprocess.run([str(dtgen), "validate", str(spec)], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    contract = subprocess.run([str(dtgen), "contract"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert '"edit_contract"' in contract.stdout
    init = subprocess.run([str(dtgen), "init", "--strategy", "allreduce", "s.yaml"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert init.returncode == 0, init.stderr
    schema_line = (tmp_path / "s.yaml").read_text().splitlines()[0]
    # the schema's $id: no path of this installation (or of the checkout) in the spec
    assert schema_line == "# yaml-language-server: $schema=https://opentikz.org/dtgen/spec.schema.json"
    assert str(installed) not in schema_line and str(REPO) not in schema_line
    figure = subprocess.run([str(dtgen), "figure", str(spec), "-o", str(tmp_path / "fig"), "--format", "tex"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert figure.returncode == 0, figure.stderr
    assert sorted(p.suffix for p in (tmp_path / "fig").rglob("*.tex"))
    run = subprocess.run([str(dtgen), "run", str(spec), "--out", str(tmp_path / "run")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert run.returncode == 4  # a tool is missing (errors.py's table)
    assert run.stderr == ("dtgen: error: dtgen run needs PyTorch, which is not installed: pip install 'dtgen[run]' "
                          "(for the CPU build: pip install torch==2.13.0 first)\n")
