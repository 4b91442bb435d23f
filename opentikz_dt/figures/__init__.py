"""Paper figures from a spec: topology diagrams and timelines, rendered from templates/.

names (styles, macros, node names) · model (topology Layout) · topology (Spec -> Layout)
· timeline (the one Timeline model and its drawing) · schedule (Spec -> expected Timeline)
· render (pure: -> TeX) · compile (TeX -> PDF/SVG/PNG, safely) · bbox + checks (geometry
probe, TeX invariants) · write (render_figures: files) · samples (one spec per strategy).
Must not import torch.
"""
