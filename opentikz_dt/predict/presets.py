"""Cluster presets for `dtgen predict --link NAME` and `--device NAME`, each with its source.

A prediction for a machine nobody has here (an H100 node, an InfiniBand cluster) needs
the link's bandwidth and latency; these presets carry the numbers a public source gives,
and the source itself, so a figure's reader can check them. A number no source gives is
not here: a preset whose source gives no latency has `latency_s = None`, and the
prediction keeps the calibrated latency and says so.

Bandwidths are per direction, in bytes/s, as the simulator's `beta = 1 / bandwidth`
needs them (a spec sheet's "900 GB/s bidirectional" is 450 GB/s here).

Compute is never a preset: a calibration's compute is carried to a preset only where the
preset's device is the one the calibration measured (`device_key`), since the same
model computes at another speed on another device. A link inside one kind of machine
(NVLink 4 between H100s) names that device; a network between hosts (InfiniBand, Ethernet)
names none, and the prediction's caption says whose compute it carries.
Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError


@dataclass(frozen=True)
class LinkPreset:
    name: str
    what: str
    bytes_per_s: float            # per direction
    latency_s: float | None       # None: the source gives none (the calibrated latency stays)
    source: str                   # URL of the public source of the numbers
    note: str                     # what the source says, in its own units
    device: str | None = None     # a link inside a machine of this device preset, or None (network)


@dataclass(frozen=True)
class DevicePreset:
    name: str
    what: str
    device_key: str               # how the NVIDIA driver names it (a calibration's device.name contains it)
    link: str                     # the link between its GPUs inside one node (a LinkPreset name)
    source: str
    note: str


GB = 1e9

LINKS = {p.name: p for p in (
    LinkPreset("nvlink4-h100", "NVLink 4 between H100 SXM GPUs in one HGX node (18 links)", 450 * GB, None,
               "https://github.com/NVIDIA/nccl/issues/1264",
               "900 GB/s bidirectional per GPU = 450 GB/s per direction (theoretical); the source gives no latency",
               device="h100-sxm"),
    LinkPreset("nvlink4-h100-measured", "NVLink 4 between two H100 SXM GPUs, as measured (p2p writes)", 376 * GB,
               None, "https://github.com/NVIDIA/nccl/issues/1264",
               "p2pBandwidthLatencyTest, unidirectional P2P=Enabled writes: 371-377 GB/s between GPU pairs",
               device="h100-sxm"),
    LinkPreset("nvlink4-h200", "NVLink 4 between H200 SXM GPUs in one node (18 links)", 450 * GB, None,
               "https://raw.githubusercontent.com/mlcommons/inference_results_v4.1/main/closed/NVIDIA/systems/"
               "H200-SXM-141GBx8_TRT_MaxQ.json",
               "accelerator_interconnect: 18x 4th Gen NVLink, 900GB/s (bidirectional)", device="h200"),
    LinkPreset("pcie5-x16", "PCI Express 5.0, 16 lanes (32 GT/s per lane, 128b/130b)", 63.0 * GB, None,
               "https://hpc-notes.pages.dev/reference/pcie",
               "5.0: 32.0 GT/s, 128b/130b, 63.0 GB/s per direction for x16 (PCI-SIG 5.0 release: "
               "https://firmwaresecurity.com/2019/05/31/pcie-5-0-spec-released/)"),
    LinkPreset("ib-ndr", "InfiniBand NDR, one 400 Gb/s port per GPU (ConnectX-7)", 400e9 / 8, None,
               "https://docs.nvidia.com/networking/display/ConnectX7VPI/Introduction",
               "ConnectX-7 single-port OSFP: NDR 400Gb/s; the source gives no latency"),
    LinkPreset("ib-ndr200", "InfiniBand NDR200, one 200 Gb/s port (ConnectX-7)", 200e9 / 8, None,
               "https://docs.nvidia.com/networking/display/ConnectX7VPI/Introduction",
               "ConnectX-7: NDR200 200Gb/s; the source gives no latency"),
    LinkPreset("100gbe", "100 Gigabit Ethernet, one port (ConnectX-7 QSFP112)", 100e9 / 8, None,
               "https://docs.nvidia.com/networking/display/ConnectX7VPI/Introduction",
               "ConnectX-7 dual-port QSFP112: 100GbE; the source gives no latency"),
)}

DEVICES = {p.name: p for p in (
    DevicePreset("h100-sxm", "NVIDIA H100 SXM5 80 GB (HGX node, 8 GPUs on NVLink 4)", "H100 80GB HBM3",
                 "nvlink4-h100", "https://github.com/NVIDIA/nccl/issues/1264",
                 "the driver names it 'NVIDIA H100 80GB HBM3'; 18 NVLink 4 links, 900 GB/s bidirectional"),
    DevicePreset("h100-pcie", "NVIDIA H100 PCIe (PCI Express 5.0 card)", "H100 PCIe", "pcie5-x16",
                 "https://manuals.plus/m/d4b5dc21484df3ba8fbe84918338461cc074a3fcebcc13423eadc2b10ac3bda4",
                 "product brief PB-11133-001: dual-slot PCI Express Gen5 card, 350 W"),
    DevicePreset("h200", "NVIDIA H200 SXM 141 GB (8 GPUs on NVLink 4)", "H200", "nvlink4-h200",
                 "https://raw.githubusercontent.com/mlcommons/inference_results_v4.1/main/closed/NVIDIA/systems/"
                 "H200-SXM-141GBx8_TRT_MaxQ.json",
                 "accelerator_model_name: NVIDIA H200-SXM-141GB; 18x 4th Gen NVLink, 900GB/s"),
)}


def names_line() -> str:
    return (f"links: {', '.join(LINKS)}; devices: {', '.join(DEVICES)} "
            "(dtgen predict --list-presets shows their numbers and sources)")


def link_preset(name: str) -> LinkPreset | None:
    return LINKS.get(str(name).strip().lower())


def device_preset(name: str) -> DevicePreset:
    preset = DEVICES.get(str(name).strip().lower())
    if preset is None:
        raise UsageError(f"--device: {name!r} is not a device preset; {names_line()}")
    return preset


def matches(preset: DevicePreset, device_name: str | None) -> bool:
    """Whether a calibration's device (the driver's model name) is the preset's device."""
    return bool(device_name) and preset.device_key.casefold() in " ".join(str(device_name).split()).casefold()


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / GB:g} GB/s ({bytes_per_s * 8 / GB:g} Gbit/s)"


def presets_table() -> str:
    """`dtgen predict --list-presets`: every preset with its numbers and source."""
    rows = [("link", p.name, _rate(p.bytes_per_s),
             f"{p.latency_s * 1e6:g} us" if p.latency_s is not None else "not sourced",
             f"calibration on {p.device}" if p.device else "any calibration", p.what, p.source, p.note) for p in LINKS.values()]
    rows += [("device", p.name, f"link {p.link}", "", f"calibration on {p.device_key}", p.what, p.source, p.note)
             for p in DEVICES.values()]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    head = ("kind", "name", "bandwidth per direction", "latency")
    widths = [max(w, len(h)) for w, h in zip(widths, head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  compute from / what / source"]
    for r in rows:
        lines.append("  ".join(v.ljust(w) for v, w in zip(r[:4], widths)) + f"  {r[4]}: {r[5]}")
        lines.append(" " * (sum(widths) + 8) + f"  source: {r[6]}")
        lines.append(" " * (sum(widths) + 8) + f"  ({r[7]})")
    lines.append("Bandwidths are per direction. A latency no source gives is left out: the prediction keeps "
                 "the calibrated one and its caption says so. Compute always comes from a calibration: a "
                 "device preset (or a link inside one device) needs a calibration made on that device.")
    return "\n".join(lines)
