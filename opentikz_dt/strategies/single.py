"""Single-device training: one worker, no communication (the reference every synchronous
strategy must match)."""

from ._base import Strategy

KIND = "single"
STRATEGY = Strategy(KIND, "Single-device training", "single", ("optimizer",),
                    workers=(1, 1), default_workers=1, order=10)
