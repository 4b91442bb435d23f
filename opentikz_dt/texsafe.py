"""Making user strings safe for TeX: escape text, allow-list math.

Labels come from specs, AI edits and runs, so they are untrusted. Text outside `$...$`
is escaped character by character; text inside `$...$` may use only the commands in
MATH_COMMANDS. Anything else is refused with a message, never passed through. A label a
user typed is first checked for control characters (check_typed_label, from the spec's
labels-safe invariant): a newline or tab there is most often YAML's reading of "\\nabla"
or "\\theta" in double quotes, which escaping alone would print as "abla" or "heta".
"""

from __future__ import annotations

import re

GREEK = (
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi "
    "pi varpi rho varrho sigma varsigma tau upsilon phi varphi chi psi omega "
    "Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega"
).split()
MATH_COMMANDS = frozenset(
    GREEK
    + (
        "nabla partial mathbf mathrm mathit mathcal mathsf frac dfrac tfrac cdot times sum prod "
        "hat bar tilde vec dot ell log exp min max leftarrow rightarrow to gets top infty approx "
        "leq geq neq in sim propto prime ldots cdots sqrt left right"
    ).split()
)
# Control symbols that only add space or print a brace.
MATH_SYMBOLS = frozenset(",;:!{}| ")
MAX_LABEL_CHARS = 120

_TEXT_ESCAPES = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "#": r"\#",
    "$": r"\$",
    "%": r"\%",
    "&": r"\&",
    "_": r"\_",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
# pdflatex with T1 + utf8 typesets Latin-1 and these; anything else would halt the compile.
_EXTRA_OK = set("–—‘’“”…•€")
# Chinese and Japanese (CJK punctuation, kana, unified ideographs, full-width forms) compile
# through CJKutf8 with the Arphic fonts (Debian latex-cjk-chinese); a figure whose labels use
# them is set inside a CJK environment (needs_cjk), others are unchanged.
CJK_RANGES = ((0x3000, 0x303F), (0x3040, 0x30FF), (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
              (0xFF00, 0xFFEF))
# Hangul needs Korean fonts for CJK (Debian latex-cjk-korean with fonts-unfonts-core), not installed here.
HANGUL_RANGES = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xAC00, 0xD7AF), (0xD7B0, 0xD7FF))
CJK_PACKAGES = "latex-cjk-chinese fonts-arphic-uming fonts-arphic-ukai"


def is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in CJK_RANGES)


def needs_cjk(text: str) -> bool:
    """True when a label has Chinese or Japanese characters (the figure then loads CJKutf8)."""
    return any(is_cjk(ch) for ch in text)
_CONTROL_SEQ = re.compile(r"\\([A-Za-z]+|.)", re.DOTALL)
_MATH_OK_CHARS = re.compile(r"[A-Za-z0-9\s_^{}()\[\]+\-=*/,.;:'|<>!\\]*")


class LabelError(ValueError):
    """A label that cannot be typeset safely; the message says why, for the user."""


def _check_printable(text: str) -> None:
    for ch in text:
        if ch in "\n\t":
            continue
        code = ord(ch)
        if code < 32 or 127 <= code < 160:
            raise LabelError(f"control character U+{code:04X} is not allowed in a label")
        if any(lo <= code <= hi for lo, hi in HANGUL_RANGES):
            raise LabelError(f"Korean character {ch!r} (U+{code:04X}) cannot be typeset: pdflatex's CJK package "
                             "needs the Korean fonts of Debian's latex-cjk-korean and fonts-unfonts-core, which "
                             "dtgen does not install; use Chinese, Japanese or Latin-1 text")
        if code > 255 and ch not in _EXTRA_OK and not is_cjk(ch):
            raise LabelError(f"character {ch!r} (U+{code:04X}) cannot be typeset by pdflatex; use Latin-1, "
                             "Chinese or Japanese text")


def is_control(ch: str) -> bool:
    """C0 and C1 control characters (newline and tab included), DEL, and Unicode's line and
    paragraph separators: nothing a label a user types can print."""
    code = ord(ch)
    return code < 32 or 127 <= code < 160 or ch in "\u2028\u2029"


# What a double-quoted YAML string makes of a backslash and a letter (PyYAML's escapes that
# give a control character): "$\nabla$" holds a newline and "abla", "$\theta$" a tab and "heta".
YAML_ESCAPES = {"\n": "n", "\t": "t", "\r": "r", "\a": "a", "\b": "b", "\v": "v", "\f": "f", "\x1b": "e",
                "\x00": "0", "\x85": "N", "\u2028": "L", "\u2029": "P"}
CONTROL_NAMES = {"\n": "a newline", "\t": "a tab", "\r": "a carriage return", "\a": "a bell character",
                 "\b": "a backspace", "\v": "a vertical tab", "\f": "a form feed", "\x1b": "an escape character",
                 "\x00": "a NUL character", "\x85": "a next-line character", "\u2028": "a line separator",
                 "\u2029": "a paragraph separator"}
_LETTERS = re.compile(r"[A-Za-z]*")


def _control_name(ch: str) -> str:
    return CONTROL_NAMES.get(ch, f"control character U+{ord(ch):04X}")


def _lost_command(text: str, index: int) -> bool:
    """True when the control character at `index` is what YAML made of a TeX command's
    backslash and first letter: that letter and the letters after it spell an allowed command."""
    letter = YAML_ESCAPES.get(text[index])
    return letter is not None and letter + _LETTERS.match(text, index + 1).group(0) in MATH_COMMANDS


def check_typed_label(text: str, line_breaks: bool = False) -> None:
    """Refuse a control character in a label a user wrote (a spec, an edit): a newline, a tab,
    any other C0 or C1 control. render_label would print a newline or tab as a space, so
    "$\\nabla\\theta$" in double quotes (YAML reads a newline and a tab in it) would draw as
    "ablaheta". With `line_breaks` (a note whose line breaks start new lines) a newline
    outside $...$ is allowed. The message says which character, and the fix: where the
    characters are a TeX command's lost backslash, the label to write in single quotes."""
    parts = re.split(r"(?<!\\)\$", text)  # even: text, odd: math
    start = 0
    for k, part in enumerate(parts):
        for offset, ch in enumerate(part):
            if is_control(ch) and not (line_breaks and ch == "\n" and k % 2 == 0):
                raise LabelError(_control_message(text, start + offset, k % 2 == 1, line_breaks))
        start += len(part) + 1


def _control_message(text: str, index: int, math: bool, line_breaks: bool) -> str:
    ch = text[index]
    name = _control_name(ch)
    if _lost_command(text, index):
        restored = "".join("\\" + YAML_ESCAPES[c] if _lost_command(text, i) else c for i, c in enumerate(text))
        quoted = "'" + restored.replace("'", "''") + "'"
        return (f'contains {name} (in a double-quoted YAML string "\\{YAML_ESCAPES[ch]}" is {name}: '
                f"write {quoted} in single quotes)")
    if math:
        return f"contains {name} inside $...$ math (remove it; math is one line)"
    if ch in "\r\u2028\u2029" and line_breaks:
        return f"contains {name} (only a newline starts a new line here)"
    if ch in "\n\r\u2028\u2029":
        return f"contains {name}: this label prints on one line (write it on one line)"
    if ch == "\t":
        return f"contains {name} (write a space instead)"
    return f"contains {name}, which cannot be printed (remove it)"


def escape_text(text: str) -> str:
    """Escape plain text so every character prints as itself (newlines become spaces)."""
    _check_printable(text)
    text = re.sub(r"\s+", " ", text)
    return "".join(_TEXT_ESCAPES.get(ch, ch) for ch in text)


def check_math(math: str) -> str:
    """Return `math` unchanged if it uses only allowed commands and characters, else raise."""
    if "^^" in math:
        raise LabelError("'^^' (TeX character codes) is not allowed in math")
    if not _MATH_OK_CHARS.fullmatch(math):
        bad = sorted({ch for ch in math if not _MATH_OK_CHARS.fullmatch(ch)})
        raise LabelError(f"character {bad[0]!r} is not allowed in math")
    for match in _CONTROL_SEQ.finditer(math):
        name = match.group(1)
        if len(name) == 1 and not name.isalpha():
            if name not in MATH_SYMBOLS:
                raise LabelError(f"control symbol '\\{name}' is not allowed in math")
        elif name not in MATH_COMMANDS:
            raise LabelError(f"command '\\{name}' is not allowed in math (allowed: Greek letters, \\nabla, \\partial, \\mathbf, \\frac, ...)")
    depth = 0
    for ch in re.sub(r"\\[{}]", "", math):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            break
    if depth != 0:
        raise LabelError("unbalanced braces in math")
    return math


def render_label(label: str) -> str:
    """TeX for a label: escaped text with `$...$` math segments checked against the allow-list."""
    if len(label) > MAX_LABEL_CHARS:
        raise LabelError(f"label is {len(label)} characters long; the maximum is {MAX_LABEL_CHARS}")
    # Unescaped `$` split text from math; `\$` is a literal dollar in text.
    parts = re.split(r"(?<!\\)\$", label)
    if len(parts) % 2 == 0:
        raise LabelError("unmatched '$' (write '\\$' for a literal dollar sign)")
    out = []
    for index, part in enumerate(parts):
        if index % 2:
            out.append("$" + check_math(part) + "$")
        else:
            out.append(escape_text(part.replace("\\$", "$")))
    return "".join(out)
