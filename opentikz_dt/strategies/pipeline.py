"""Pipeline parallelism (the vertical model split): whole layers per stage, microbatches
through torch's pipelining schedules (GPipe, 1F1B)."""

from ._base import Strategy

KIND = "pipeline"
STRATEGY = Strategy(KIND, "Pipeline-parallel training", "pipeline", ("send", "recv", "optimizer"),
                    options=("microbatches", "schedule", "stages"), workers=(2, None), data_parallel=False, order=60)
