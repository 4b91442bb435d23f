"""`edit_file` / `edit_batch`: apply contract operations to a spec file, check everything,
write or refuse.

The order is the contract's promise: arguments against each operation's schema; under
the file's edit lock, re-read the file, apply the operations in turn to the round-trip
document, validate the final text exactly as `dtgen validate` would (schema, cross-field
rules, spec invariants, every issue at once), render the figures and run the TeX
invariants; only when all hold is the new text written, atomically. A refusal -- of
any one operation of a batch -- changes nothing. A result carries notes on what the
arguments alone do not say (edit/notes.py). Must not import torch.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ruamel.yaml.error import YAMLError

from ..errors import DtgenError, EditRefused, Issue, SpecError
from ..schema import check_schema
from ..spec import load_spec, resolve
from ..yamlpos import load_located, read_text
from .args import EditArgumentError, check_args
from .notes import edit_notes
from .nodepaths import locate_figure_problem
from .operations import OPERATIONS, EditContext, OperationRefused
from .safefile import locked, write_atomic
from .texcheck import check_tex_invariants, compile_invariants
from .yamldoc import YamlDoc

_INVARIANT_TAG = re.compile(r"\[invariant ([a-z0-9-]+)\]")


@dataclass
class EditResult:
    """What an edit did or would do; `to_json()` is the `--json` output."""

    ok: bool
    operation: str
    args: dict
    file: str
    changed: bool = False
    written: bool = False
    dry_run: bool = False
    diff: str = ""
    issues: list = field(default_factory=list)
    invariant: str | None = None  # the first contract invariant that refused the edit
    refused_by: str | None = None  # arguments | spec-before-edit | operation | schema | rule | invariant
    skipped: list = field(default_factory=list)  # invariants not checked (--no-compile)
    notes: list = field(default_factory=list)  # side effects, edits no figure shows, comments that may be stale

    def to_json(self) -> dict:
        out = asdict(self)
        out["issues"] = [asdict(issue) for issue in self.issues]
        return out


class EditRefusal(EditRefused):
    """The edit would break the spec or a contract invariant; the file is unchanged."""

    exit_code = 1

    def __init__(self, result: EditResult, headline: str):
        self.result = result
        lines = [headline] + [str(issue) for issue in result.issues]
        super().__init__("\n".join(lines))


def error_result(exc: DtgenError, operation: str, file: str, dry_run: bool = False,
                 args: dict | None = None) -> EditResult:
    """The --json result for an edit that could not start (bad arguments, unreadable spec);
    `args`: the arguments as given (as far as they could be read)."""
    if isinstance(exc, SpecError):
        kind, issues = "spec-before-edit", list(exc.issues)
    else:
        kind = "arguments" if isinstance(exc, EditArgumentError) else "error"
        issues = [Issue(file, 1, 1, "", str(exc))]
    return EditResult(ok=False, operation=operation, args=dict(args or {}), file=file, dry_run=dry_run,
                      issues=issues, refused_by=kind)


def edit_file(path, operation: str, args: dict | None = None, *, dry_run: bool = False,
              compile: bool = True) -> EditResult:
    """Apply `operation` to the spec at `path`; write it unless `dry_run`. Raises EditRefusal."""
    args = dict(args or {})
    check_args(operation, args)
    return _edit(path, [(operation, args)], operation, args, dry_run, compile)


def edit_batch(path, steps: list, *, dry_run: bool = False, compile: bool = True) -> EditResult:
    """Apply [(operation, args), ...] in order, all or none: one check of the final spec, one write."""
    if not steps:
        raise EditArgumentError("batch: no operations given")
    steps = [(operation, dict(args or {})) for operation, args in steps]
    for index, (operation, args) in enumerate(steps, 1):
        try:
            check_args(operation, args)
        except EditArgumentError as exc:
            raise EditArgumentError(f"batch step {index}: {exc}") from None
    listed = [{"op": operation, "args": args} for operation, args in steps]
    return _edit(path, steps, "batch", {"ops": listed}, dry_run, compile)


def _edit(path, steps: list, operation: str, args: dict, dry_run: bool, compile: bool) -> EditResult:
    name = str(path)
    target = Path(path).resolve()  # write through a symlink, do not replace it
    text = read_text(path)  # a missing or unreadable spec is reported before any lock file appears
    if dry_run:
        return _propose(name, text, steps, operation, args, compile, dry_run=True)[0]
    if not os.access(target, os.W_OK):  # a rename could replace it anyway; respect the mode
        raise DtgenError(f"{name}: the file is read-only; nothing changed")
    try:
        with locked(target):
            # Re-read under the lock: a concurrent edit may have landed since we looked.
            text = read_text(target)
            result, new_text = _propose(name, text, steps, operation, args, compile, dry_run=False)
            if result.changed:
                write_atomic(target, new_text.encode("utf-8"))
                result.written = True
    except OSError as exc:
        raise DtgenError(f"{name}: cannot write the edit: {exc.strerror or exc}") from None
    return result


def _apply(name: str, original: str, text: str, operation: str, args: dict, result: EditResult,
           step: str = "", first: bool = True) -> tuple[str, EditContext]:
    """One operation on `text`. The spec is judged before the first operation only: a batch
    is all or none, so a later step may start from a state that is valid only once the
    batch is complete (a fault set key by key); the final text is judged as a whole. Every
    issue points into the file as it is (`original`), never into an unwritten state."""
    headline = f"{name}: {step}{operation} refused: the spec has problems before the edit; fix them first (dtgen validate)"
    try:
        located = load_located(name, text)
    except SpecError as exc:
        _refuse(result, "spec-before-edit", in_file_as_is(name, original, text, exc.issues), headline)
    if first:
        before = check_schema(located)
        if before:
            _refuse(result, "spec-before-edit", before, headline)
    try:
        doc = YamlDoc(text)
    except YAMLError as exc:  # ruamel is stricter than the loader in a few corners
        _refuse(result, "spec-before-edit", [Issue(name, 1, 1, "", f"cannot edit this YAML: {exc}")], headline)
    try:
        data = resolve(located.data, name)
    except Exception:  # an earlier step left a state the defaults cannot be filled into
        if first:
            raise
        issues = check_schema(located) or [Issue(name, 1, 1, "", "the earlier steps left a spec this step cannot read")]
        _refuse(result, "schema", in_file_as_is(name, original, text, issues),
                f"{name}: {step}{operation} refused: it cannot apply to the spec the earlier steps leave; nothing changed")
    context = EditContext(doc, data)
    try:
        OPERATIONS[operation](context, **args)
    except OperationRefused as exc:
        _refuse(result, "operation", in_file_as_is(name, original, text, [located.issue(exc.path, exc.message)]),
                f"{name}: {step}{operation} refused; nothing changed")
    return doc.text(), context


def _propose(name: str, text: str, steps: list, operation: str, args: dict, compile: bool, *,
             dry_run: bool) -> tuple[EditResult, str]:
    result = EditResult(ok=False, operation=operation, args=args, file=name, dry_run=dry_run,
                        skipped=[] if compile else compile_invariants())
    new_text, contexts = text, []
    for index, (step_operation, step_args) in enumerate(steps, 1):
        step = f"batch step {index}: " if len(steps) > 1 or operation == "batch" else ""
        new_text, context = _apply(name, text, new_text, step_operation, step_args, result, step, first=index == 1)
        contexts.append(context)
    result.changed = new_text != text
    result.diff = "".join(difflib.unified_diff(text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                               fromfile=f"a/{name}", tofile=f"b/{name}"))
    headline = f"{name}: {operation} refused; nothing changed (line:col above point into the file as it is)"
    try:
        spec = load_spec(name, text=new_text)
    except SpecError as exc:
        try:
            kind = "schema" if check_schema(load_located(name, new_text)) else "rule"
        except SpecError:
            kind = "schema"
        _refuse(result, kind, in_file_as_is(name, text, new_text, exc.issues), headline)
    problems = check_tex_invariants(spec, compile=compile)
    if problems:
        issues = [locate_figure_problem(spec, invariant, message) for invariant, message in problems]
        _refuse(result, "invariant", in_file_as_is(name, text, new_text, issues), headline)
    result.ok = True
    result.notes = [note for context in contexts for note in context.notes]
    if result.changed:
        result.notes += edit_notes(name, text, new_text, contexts[0].data, spec, [s for s, _ in steps])
    return result, new_text


_PATH_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def _path_keys(path: str) -> tuple:
    """'a.b[2].c' -> ('a', 'b', 2, 'c'): yamlpos's path keys."""
    return tuple(int(index) if index else key for index, key in _PATH_PART.findall(path))


def in_file_as_is(name: str, text: str, new_text: str, issues: list) -> list:
    """A refused edit's issues, pointing into the file as it is (a refusal writes nothing,
    so an editor jumping to file:line:col lands there, never past its end) and naming the
    key the edit changed: an issue about a section the edit wrote into (figure.colors for
    a recolor of weight) names the changed key (figure.colors.weight). A key the file does
    not have yet is placed at its nearest ancestor that it has."""
    from .notes import changed_values

    if new_text == text:
        return issues
    try:
        before, after = load_located(name, text), load_located(name, new_text)
    except SpecError:
        return issues
    changed = list(changed_values(before.data if isinstance(before.data, dict) else {},
                                  after.data if isinstance(after.data, dict) else {}))
    out = []
    for issue in issues:
        path = issue.path
        inside = [c for c in changed if path and c.startswith(path + ".")]
        if inside:
            path = inside[0]
        line, col = before.where(_path_keys(path)) if path else (1, 1)
        out.append(Issue(issue.file, line, col, path, issue.message))
    return out


def _refuse(result: EditResult, kind: str, issues: list, headline: str) -> None:
    result.issues = sorted(issues)
    result.refused_by = kind
    for issue in result.issues:
        match = _INVARIANT_TAG.search(issue.message)
        if match:
            result.invariant = match.group(1)
            result.refused_by = "invariant" if kind == "rule" else kind
            break
    raise EditRefusal(result, headline)
