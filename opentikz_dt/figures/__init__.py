"""Paper figures from a spec: topology diagrams and timelines, rendered from templates/.

names (styles, macros, node names) · model (topology Layout) · spacing (the gaps a layout
needs) · topology (Spec -> Layout; topology_ps, topology_allreduce, topology_peer over
topology_common) · timeline (the one Timeline model and its drawing) · schedule (Spec -> expected Timeline)
· render (pure: -> TeX) · compile (TeX -> PDF/SVG/PNG, safely) · bbox + checks (geometry
probe, TeX invariants) · write (render_figures: files) · samples (one spec per strategy).
Must not import torch.
"""
