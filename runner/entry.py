"""Resolve a spec's `module:function` entry points (python models, losses, datasets).

The module is looked up in the spec file's folder first, then on sys.path, the way
users expect from `torchrun script.py` (the script's folder) or pytest's rootdir. A
module of the same name imported earlier from somewhere else (another spec's
`model.py` in the same process, e.g. the launcher's preflight in a test run) is
evicted first, so each spec gets its own file.

Errors are InputErrors of one line naming the spec file, line and key.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from ..errors import InputError


def spec_location(spec, path: tuple) -> str:
    """'file:line:col: dotted.key' of a spec key, for error messages."""
    if spec.located is None:
        return ".".join(path)
    issue = spec.located.issue(path, "")
    return f"{issue.file}:{issue.line}:{issue.col}: {issue.path}"


def _local_file(module: str, spec_dir: Path) -> Path | None:
    top = module.split(".")[0]
    for candidate in (spec_dir / f"{top}.py", spec_dir / top / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _evict_if_elsewhere(module: str, local: Path) -> None:
    top = module.split(".")[0]
    loaded = sys.modules.get(top)
    where = getattr(loaded, "__file__", None)
    if loaded is not None and (where is None or Path(where).resolve() != local.resolve()):
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]


def resolve_entry(entry: str, spec, key: tuple, spec_dir: str | Path | None):
    """The callable named by `entry` ('pkg.module:fn'); InputError naming the spec key if not."""
    module, _, name = entry.partition(":")
    where = spec_location(spec, key)
    searched = "sys.path"
    if spec_dir is not None:
        spec_dir = Path(spec_dir).resolve()
        local = _local_file(module, spec_dir)
        searched = f"{spec_dir} and sys.path"
        if local is not None:
            _evict_if_elsewhere(module, local)
            if str(spec_dir) not in sys.path:
                sys.path.insert(0, str(spec_dir))
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise InputError(f"{where}: cannot import '{module}' (looked in {searched})") from None
        raise InputError(f"{where}: importing '{module}' failed: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # the user's module raised while importing
        raise InputError(f"{where}: importing '{module}' failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(mod, name, None)
    if not callable(fn):
        found = "is not callable" if fn is not None else "does not exist"
        raise InputError(f"{where}: '{name}' in {getattr(mod, '__file__', module)} {found}")
    return fn


def call_entry(fn, kwargs: dict, spec, key: tuple, what: str):
    """fn(**kwargs), with a raise turned into one line naming the spec key."""
    try:
        return fn(**kwargs)
    except Exception as exc:
        raise InputError(f"{spec_location(spec, key)}: {what} raised {type(exc).__name__}: {exc}") from None
