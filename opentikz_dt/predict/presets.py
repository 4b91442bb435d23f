"""Cluster presets for `dtgen predict --link NAME` and `--device NAME`: they live in
opentikz_dt.hardware (below the memory model and the spec's rules, which read them too);
this module keeps the names predict has always imported.

Compute from a calibration is carried to a device preset only where the preset's device
is the one the calibration measured (`matches`); a spec's `hardware:` block predicts from
the datasheet instead (predict/datasheet.py). Must not import torch.
"""

from __future__ import annotations

from ..hardware import (DEVICES, GB, LINKS, DevicePreset, LinkPreset, device_preset, link_preset, matches,  # noqa: F401
                        names_line, presets_table)
