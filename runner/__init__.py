"""The runner: everything that imports torch (imported as `opentikz_dt.runner`).

`launch.launch_run` is the entry point the CLI calls; `worker.rank_main` runs in every
rank; strategies live in `strategies/` and see the world through `context.RankContext`.
The contract with the rest of dtgen is docs/dev/runner-interface.md.
"""
