"""Strategy plugins: how each side of dtgen finds the module that answers its questions
about one strategy.

A strategy is one folder, opentikz_dt/strategies/<kind with '-' as '_'>/, holding a module
per side that does not import torch, and one runner module; each names the
`strategy.kind` it serves in `KIND`:

  side        module                                     interface (hooks, signatures, defaults)
  strategy    opentikz_dt.strategies.<kind>.strategy     strategies/interface.py   descriptor, rules, edit
  figures     opentikz_dt.strategies.<kind>.figures      figures/interface.py      drawing, expected schedule
  predict     opentikz_dt.strategies.<kind>.predict      predict/interface.py      simulation, calibration fit
  runner      opentikz_dt.runner.strategies.<kind>       runner/strategies/interface.py  roles, train (torch)

A side asks its registry for the plugin of a kind and calls it; it never compares the
kind itself. Strategies from outside dtgen come as a Python package named in the
environment variable DTGEN_PLUGINS (comma-separated package names): its module
`<package>.<side>` is that side's plugin. The variable is read in every process, so the
runner's ranks (which inherit the environment) find the same plugins.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import pkgutil

from .errors import InputError

ENV = "DTGEN_PLUGINS"


def external_packages() -> list[str]:
    """The plugin packages DTGEN_PLUGINS names, in order."""
    return [name.strip() for name in os.environ.get(ENV, "").split(",") if name.strip()]


def bind(module, interface):
    """The plugin object of `module` for a side whose interface is the dataclass
    `interface`: each of its fields the module defines is the module's, every other field
    keeps the interface's default. A required field (no default) the module lacks is an
    InputError naming it."""
    names = [f.name for f in dataclasses.fields(interface)]
    given = {name: getattr(module, name) for name in names if hasattr(module, name)}
    missing = [f.name for f in dataclasses.fields(interface) if f.name not in given
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise InputError(f"the plugin {getattr(module, '__name__', module)} lacks {', '.join(missing)} "
                         f"(required by {interface.__module__}.{interface.__qualname__})")
    return interface(**given)


def module_name(kind: str) -> str:
    """The module that serves `kind` in a side's package: the kind with '-' as '_'
    (parameter-server -> parameter_server)."""
    return kind.replace("-", "_")


class SideRegistry:
    """One side's plugins by kind: its own package's module named after the kind
    (module_name), else DTGEN_PLUGINS' packages' `<package>.<side>` modules, else whatever
    `register` added. A lookup imports only the module it needs (the runner's import
    torch); listing every kind imports them all."""

    def __init__(self, side: str, package: str, interface: str, submodule: str | None = None):
        # package: where a kind's module is found, `<package>.<kind>` or, with `submodule`,
        # `<package>.<kind>.<submodule>` (a strategy's folder: opentikz_dt/strategies/<kind>/).
        # interface: "module:Class", the side's plugin dataclass (imported on first lookup:
        # it may sit in a higher layer than this module)
        self.side, self.package, self.interface = side, package, interface
        self.submodule = submodule
        self._bound: dict = {}
        self._own: dict = {}
        self._external: dict | None = None
        self._registered: dict = {}

    def _own_module(self, name: str):
        if name not in self._own:
            full = f"{self.package}.{name}" + (f".{self.submodule}" if self.submodule else "")
            module = importlib.import_module(full) if self._findable(full) else None
            self._own[name] = module if getattr(module, "KIND", None) else None
        return self._own[name]

    @staticmethod
    def _findable(full: str) -> bool:
        try:
            return importlib.util.find_spec(full) is not None
        except (ModuleNotFoundError, ValueError):  # its parent is no package (no kind's folder)
            return False

    def _externals(self) -> dict:
        if self._external is None:
            found = {}
            for external in external_packages():
                name = f"{external}.{self.side}"
                try:
                    module = importlib.import_module(name)
                except ModuleNotFoundError as exc:
                    if exc.name == external:
                        raise InputError(f"{ENV} names the package {external!r}, which Python cannot import "
                                         f"(is its folder on PYTHONPATH?)") from None
                    if exc.name == name:
                        continue  # this plugin has nothing for this side
                    raise
                kind = getattr(module, "KIND", None)
                if not kind:
                    raise InputError(f"{ENV}: {name} does not name the strategy kind it serves (KIND = \"...\")")
                found[kind] = module
            self._external = found
        return self._external

    def register(self, module) -> None:
        """Add (or replace) the plugin of `module.KIND` in this process (tests; programs
        embedding dtgen). Other processes see only DTGEN_PLUGINS."""
        self._registered[module.KIND] = module

    def unregister(self, kind: str) -> None:
        self._registered.pop(kind, None)

    def kinds(self) -> tuple[str, ...]:
        """Every kind this side serves: its package's modules (imported), then plugins."""
        own = []
        package = importlib.import_module(self.package)
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
            skip = info.name.startswith("_") or (self.submodule is not None and not info.ispkg)
            module = None if skip else self._own_module(info.name)
            if module is not None:
                own.append(module.KIND)
        return tuple(dict.fromkeys(own + list(self._externals()) + list(self._registered)))

    def has(self, kind: str) -> bool:
        try:
            self.raw(kind)
        except InputError:
            return False
        return True

    def raw(self, kind: str):
        """The plugin module itself (no defaults)."""
        if kind in self._registered:
            return self._registered[kind]
        module = self._own_module(module_name(kind)) if kind and "." not in kind else None
        if module is not None and module.KIND == kind:
            return module
        if kind in self._externals():
            return self._externals()[kind]
        raise InputError(f"no {self.side} plugin for strategy kind {kind!r} (known: {', '.join(self.kinds())})")

    def get(self, kind: str):
        """The plugin of `kind`: the side's interface dataclass, with its defaults for what
        the module leaves out."""
        module = self.raw(kind)
        cached = self._bound.get(kind)
        if cached is None or cached[0] is not module:
            where, name = self.interface.split(":")
            cached = (module, bind(module, getattr(importlib.import_module(where), name)))
            self._bound[kind] = cached
        return cached[1]
