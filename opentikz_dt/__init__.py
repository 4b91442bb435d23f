"""dtgen: one YAML spec -> a real torch.distributed run and matching TikZ figures.

Only `opentikz_dt.runner` imports torch; everything else here must stay torch-free so
`dtgen validate` and `dtgen figure` start fast on a laptop without it.
"""

__version__ = "0.1.0"
