"""The toy strategy's descriptor: one worker trains alone, its step scaled by `toy_factor`
(a key of its own, to show a plugin's schema and rules)."""

from opentikz_dt.strategies import Strategy

KIND = "toy"
STRATEGY = Strategy(KIND, "Toy training", ("optimizer",), options=("toy_factor",),
                    workers=(1, 1), default_workers=1, order=900)
# Its own strategy keys, merged into the spec schema's strategy block.
SCHEMA = {"toy_factor": {"type": "number", "exclusiveMinimum": 0, "default": 1.0,
                         "description": "Multiplies the gradients (a toy knob)."}}
