"""A toy strategy from outside dtgen, written the way CONTRIBUTING.md ("Add a strategy")
says, as tests/test_toy_strategy.py uses it: with DTGEN_PLUGINS=dtgen_toy and this
folder's parent on PYTHONPATH, `strategy.kind: toy` validates, draws, runs and predicts
without any change to dtgen. One module per side: strategy.py (descriptor, rules),
figures.py, predict.py, runner.py (the only one importing torch)."""
