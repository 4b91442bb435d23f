"""The contract's TeX invariants, run on the figures an edited spec generates.

Which checks exist, and where their code lives, is read from schemas/meta.json
(invariants with applies_to "tex", resolved by contract.resolve_check), so adding an
invariant to the contract adds it to every edit. A check is called with the artifact
its first parameter names: `tex` (the generated source), `log` (the pdflatex log of
one compile), `bboxes` (the geometry probe's boxes from that log) or `pdf` (the
compiled PDF's bytes); a check with a second parameter `spec` also gets the Spec. The
compile is done once per figure and only when a check asks for it. `--no-compile`
skips the invariants that need pdflatex (marked "compiles" in contract.exec.json), when
speed matters more than the last guarantee.
Must not import torch.
"""

from __future__ import annotations

import inspect

from ..contract import load_contract, resolve_check
from ..errors import CompileError, DtgenError, ToolMissingError

def needs_compile(invariant: dict) -> bool:
    # "compiles": true in contract.exec.json marks checks that compile by themselves
    # (figure-compiles takes the TeX); any check wanting log, bboxes or pdf compiles too.
    return bool(invariant.get("compiles")) or _artifact(_resolve(invariant)) != "tex"


def compile_invariants() -> list[str]:
    """The TeX invariants that need pdflatex; `--no-compile` skips exactly these."""
    return sorted(inv["id"] for inv in load_contract()["edit_contract"]["invariants"]
                  if inv["applies_to"] == "tex" and needs_compile(inv))


def tex_invariants(compile: bool = True) -> list[dict]:
    invariants = [inv for inv in load_contract()["edit_contract"]["invariants"] if inv["applies_to"] == "tex"]
    return [inv for inv in invariants if compile or not needs_compile(inv)]


def _artifact(check) -> str:
    return next(iter(inspect.signature(check).parameters))


def render_for_checks(spec) -> list[tuple[str, str]]:
    """(figure name, TeX) of every figure the spec alone determines."""
    from ..figures.render import render_timeline, render_topology

    return [("topology", render_topology(spec)), ("timeline", render_timeline(spec))]


def check_tex_invariants(spec, compile: bool = True) -> list[tuple[str, str]]:
    """(invariant id, problem) for every TeX invariant the spec's figures break."""
    invariants = [(inv, _resolve(inv)) for inv in tex_invariants(compile)]
    problems: list[tuple[str, str]] = []
    for figure_name, tex in render_for_checks(spec):
        artifacts = _Artifacts(tex, spec)
        for invariant, check in invariants:
            for message in artifacts.run(check):
                problems.append((invariant["id"], f"{figure_name} figure: {message}"))
    return problems


def _resolve(invariant: dict):
    try:
        return resolve_check(invariant["check"])
    except (ImportError, AttributeError):
        raise DtgenError(f"invariant {invariant['id']} cannot be checked: {invariant['check']} is missing "
                         "(incomplete installation?)") from None


class _Artifacts:
    """One figure's TeX and, on demand, its single compile's log and probe boxes."""

    def __init__(self, tex: str, spec=None):
        self.tex = tex
        self.spec = spec
        self._compiled = None
        self._failed = False

    def run(self, check) -> list[str]:
        wanted = _artifact(check)
        if wanted == "tex":
            argument = self.tex
        else:
            compiled = self._compile()
            if compiled is None:  # figure-compiles reports the failure; nothing to measure
                return []
            argument = {"log": compiled.log, "pdf": compiled.pdf}.get(wanted) or _bboxes(compiled.log)
        extra = [self.spec] if "spec" in inspect.signature(check).parameters else []
        try:
            return [str(problem) for problem in check(argument, *extra)]
        except ToolMissingError:
            raise
        except DtgenError as exc:  # a failed compile is the invariant's finding, not a crash
            return [str(exc)]

    def _compile(self):
        if self._compiled is None and not self._failed:
            from ..figures.compile import compile_cached

            try:  # memoised: figure-compiles (check_figure_compiles) already ran this compile
                self._compiled = compile_cached(self.tex)
            except CompileError:
                self._failed = True
        return self._compiled


def _bboxes(log: str):
    from ..figures.bbox import parse_bboxes

    return parse_bboxes(log)
