"""The `central-storage` strategy (opentikz_dt/plugins.py): strategy.py (descriptor, rules,
edit hooks), figures.py (drawing), predict.py (simulation); its torch side is
runner/strategies/central_storage.py. Must not import torch."""
