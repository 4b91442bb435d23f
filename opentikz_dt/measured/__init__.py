"""Figures from measured runs: the real timeline, the annotated topology, result plots, comparison.

Reads a run directory (docs/dev/runner-interface.md) and turns it into the same drawable
models the spec's own figures use. Must not import torch.
"""
