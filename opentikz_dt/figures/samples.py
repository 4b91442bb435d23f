"""One small spec per strategy and algorithm, and the figures they render.

`dtgen contract --check` renders these to verify that every node name the templates
produce follows the contract's node_naming; tests and benchmarks reuse the specs.
Must not import torch.
"""

from __future__ import annotations

SAMPLE_SPECS = {
    "parameter-server": {"strategy": {"kind": "parameter-server"}},
    "parameter-server-sharded": {"strategy": {"kind": "parameter-server", "sync": "async"},
                                 "topology": {"servers": {"count": 2}}},
    "central-storage": {"strategy": {"kind": "central-storage"}},
    "allreduce-native": {"strategy": {"kind": "allreduce"}},
    "allreduce-ring": {"strategy": {"kind": "allreduce", "algorithm": "ring"}, "topology": {"workers": {"count": 4}}},
    "allreduce-tree": {"strategy": {"kind": "allreduce", "algorithm": "tree"}, "topology": {"workers": {"count": 12}},
                       "training": {"dataset": {"samples": 4096}}},
    "allreduce-hierarchical": {"strategy": {"kind": "allreduce", "algorithm": "hierarchical"},
                               "topology": {"workers": {"count": 12}, "hosts": 6},
                               "training": {"dataset": {"samples": 4096}}},
    "gossip": {"strategy": {"kind": "gossip"}, "topology": {"workers": {"count": 10}},
               "training": {"dataset": {"samples": 4096}}},
    "pipeline": {"strategy": {"kind": "pipeline", "microbatches": 4}},
    "single": {"strategy": {"kind": "single"}},
}


def sample_specs():
    """(name, Spec) for every sample."""
    from ..spec import spec_from_data

    return [(name, spec_from_data(data, f"<sample {name}>")) for name, data in SAMPLE_SPECS.items()]


def sample_figures() -> list[tuple[str, str]]:
    """(figure name, TeX) of the topology and the expected timeline of every sample."""
    from .render import render_timeline, render_topology

    out = []
    for name, spec in sample_specs():
        out.append((f"{name}-topology", render_topology(spec)))
        out.append((f"{name}-timeline", render_timeline(spec)))
    return out


MEASURED_PREFIX = "measured-"


def write_example_pngs(out_dir, examples_dir="examples", dpi: int = 120, kinds=("topology", "timeline")) -> list:
    """The PNGs of docs/figures/: every example's two figures, plus 1,024 workers and the dark palette.
    Writes only <name>-topology.png / <name>-timeline.png; never touches measured-*.png.

        python -m opentikz_dt.figures.samples docs/figures [topology|timeline]
    """
    from pathlib import Path

    from ..errors import DtgenError
    from ..spec import load_spec, spec_from_data
    from .compile import compile_pdf, pdf_to_png
    from .render import render_timeline, render_topology

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specs = [(spec.name, spec) for spec in map(load_spec, sorted(Path(examples_dir).glob("*.yaml")))]
    big = {"training": {"dataset": {"samples": 2_000_000}}}
    specs.append(("ps-1024-workers", spec_from_data({"strategy": {"kind": "parameter-server"}, **big,
                                                     "topology": {"workers": {"count": 1024, "slowdown": {"w2": 1.5}}}})))
    specs.append(("hierarchical-1024-workers", spec_from_data({"strategy": {"kind": "allreduce", "algorithm": "hierarchical"},
                                                               "topology": {"workers": {"count": 1024}, "hosts": 128}, **big})))
    ps_sync = dict(next(spec for name, spec in specs if name == "ps-sync").data)
    ps_sync["figure"] = {**ps_sync["figure"], "palette": "dark"}
    specs.append(("ps-sync-dark", spec_from_data(ps_sync)))
    for name in ("ps-sync", "pipeline-1f1b"):  # laid out for one column of a two-column paper
        data = dict(next(spec for n, spec in specs if n == name).data)
        data["figure"] = {**data["figure"], "width": "column"}
        specs.append((f"{name}-column", spec_from_data(data)))
    reserved = [name for name, _ in specs if name.startswith(MEASURED_PREFIX)]
    if reserved:  # docs/figures/measured-*.png belong to the measured gallery (opentikz_dt.measured)
        raise DtgenError(f"example name {reserved[0]!r} would overwrite the measured gallery's {MEASURED_PREFIX}*.png")
    written = []
    for name, spec in specs:
        for kind, render in (("topology", render_topology), ("timeline", render_timeline)):
            if kind not in kinds:
                continue
            path = out / f"{name}-{kind}.png"
            path.write_bytes(pdf_to_png(compile_pdf(render(spec)).pdf, dpi=dpi))
            written.append(path)
    return written


if __name__ == "__main__":
    import sys

    chosen = tuple(sys.argv[2:]) or ("topology", "timeline")
    for written_path in write_example_pngs(sys.argv[1] if len(sys.argv) > 1 else "docs/figures", kinds=chosen):
        print(written_path)
