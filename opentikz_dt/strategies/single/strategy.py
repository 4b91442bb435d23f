"""Single-device training: one worker, no communication (the reference every synchronous
strategy must match)."""

from .._base import Strategy

KIND = "single"
STRATEGY = Strategy(KIND, "Single-device training", ("optimizer",),
                    workers=(1, 1), default_workers=1, order=10)


def starter_block(kind: str) -> str:
    return """\
strategy:
  kind: single                # one process, no communication: the baseline"""
