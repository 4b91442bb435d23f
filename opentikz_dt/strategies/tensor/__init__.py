"""The `tensor` strategy (opentikz_dt/plugins.py): strategy.py (descriptor, rules,
edit hooks), figures.py (drawing), predict.py (simulation); its torch side is
runner/strategies/tensor.py. Must not import torch."""
