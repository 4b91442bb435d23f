"""Hardware presets: GPUs and the links between them, each number with its public vendor source.

A prediction for a cluster nobody has here (1,024 H100s on InfiniBand) needs what the
vendor's datasheet says about the device (dense peak FLOP/s per precision, HBM capacity
and bandwidth) and about the links (NVLink inside a host, the NIC between hosts). These
presets carry those numbers and the URL of the datasheet or standard that gives them, so
a reader can check every one; `dtgen predict --list-presets` prints them.

Conventions, stated once:
- FLOP/s are DENSE peaks. NVIDIA's Hopper and Blackwell datasheets print tensor-core
  figures "with sparsity" (footnoted); the dense peak is half of that, and the note of
  each preset quotes the printed figure. A precision the datasheet gives no tensor-core
  figure for (fp8 on an A100) is None: the device lacks it.
- Bandwidths are per direction, in bytes/s, as the simulator's `beta = 1 / bandwidth`
  needs them (a datasheet's "900 GB/s" NVLink is bidirectional: 450 GB/s here).
- Memory capacity is the datasheet's GB (10^9 bytes); the driver reports a little more.
- A latency no source gives is None (the caller says what it assumes instead).

The spec's optional `hardware:` block (schemas/spec.schema.json) names these presets;
`check_hardware` says what is wrong with one, located. Must not import torch.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from .errors import UsageError

GB = 1e9
TERA = 1e12

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class LinkPreset:
    name: str
    what: str
    bytes_per_s: float            # per direction
    latency_s: float | None       # None: the source gives none
    source: str                   # URL of the public source of the numbers
    note: str                     # what the source says, in its own units
    device: str | None = None     # a link inside a machine of this device preset, or None (network)


@dataclass(frozen=True)
class DevicePreset:
    name: str
    what: str
    device_key: str               # how the NVIDIA driver names it (a calibration's device.name contains it)
    link: str                     # the link between its GPUs inside one host (a LinkPreset name)
    nic: str                      # the network between hosts its reference system carries (default inter_host)
    memory_bytes: float           # HBM capacity
    hbm_bytes_per_s: float        # HBM bandwidth
    peak_flops: dict = field(default_factory=dict)  # precision -> dense peak FLOP/s, None where it lacks it
    source: str = ""
    note: str = ""
    short: str = ""               # for captions: "H100 SXM"

    def peak(self, precision: str) -> float | None:
        return self.peak_flops.get(precision)

    def precisions(self) -> list[str]:
        return [p for p in PRECISIONS if self.peak_flops.get(p)]


A100_DATASHEET = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                  "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
H100_DATASHEET = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
H200_PAGE = "https://www.nvidia.com/en-us/data-center/h200/"
B200_PAGE = "https://www.nvidia.com/en-us/data-center/gb200-nvl72/"
CONNECTX7 = "https://docs.nvidia.com/networking/display/ConnectX7VPI/Introduction"
CONNECTX6 = "https://docs.nvidia.com/networking/display/ConnectX6VPI/Introduction"
NCCL_1264 = "https://github.com/NVIDIA/nccl/issues/1264"
PCIE_SPEC = "https://pcisig.com/specifications"

LINKS = {p.name: p for p in (
    LinkPreset("nvlink3-a100", "NVLink 3 between A100 SXM GPUs in one HGX/DGX node (through NVSwitch)", 300 * GB,
               None, A100_DATASHEET, "A100 80GB SXM: NVLink 600GB/s (bidirectional); the source gives no latency",
               device="a100-sxm-80gb"),
    LinkPreset("nvlink4-h100", "NVLink 4 between H100 SXM GPUs in one HGX node (18 links)", 450 * GB, None,
               H100_DATASHEET, "H100 SXM: NVIDIA NVLink 900GB/s (bidirectional); the source gives no latency",
               device="h100-sxm"),
    LinkPreset("nvlink4-h100-measured", "NVLink 4 between two H100 SXM GPUs, as measured (p2p writes)", 376 * GB,
               None, NCCL_1264,
               "a measurement, not a datasheet: p2pBandwidthLatencyTest, unidirectional P2P=Enabled writes: "
               "371-377 GB/s between GPU pairs", device="h100-sxm"),
    LinkPreset("nvlink4-h200", "NVLink 4 between H200 SXM GPUs in one node (18 links)", 450 * GB, None,
               H200_PAGE, "H200 SXM: NVIDIA NVLink 900GB/s (bidirectional); the source gives no latency",
               device="h200"),
    LinkPreset("nvlink5-b200", "NVLink 5 between B200 GPUs in one HGX node", 900 * GB, None, B200_PAGE,
               "HGX B200: 5th Generation NVLink 1.8TB/s per GPU (bidirectional); the source gives no latency",
               device="b200"),
    LinkPreset("pcie5-x16", "PCI Express 5.0, 16 lanes (32 GT/s per lane, 128b/130b)", 63.0 * GB, None, PCIE_SPEC,
               "PCI Express Base Specification 5.0: 32.0 GT/s per lane, 128b/130b encoding; "
               "x16 = 16 x 32e9 x 128/130 / 8 = 63.0 GB/s per direction"),
    LinkPreset("ib-hdr", "InfiniBand HDR, one 200 Gb/s port per GPU (ConnectX-6)", 200e9 / 8, None, CONNECTX6,
               "ConnectX-6 VPI: HDR 200Gb/s InfiniBand; the source gives no latency"),
    LinkPreset("ib-ndr", "InfiniBand NDR, one 400 Gb/s port per GPU (ConnectX-7)", 400e9 / 8, None, CONNECTX7,
               "ConnectX-7 single-port OSFP: NDR 400Gb/s; the source gives no latency"),
    LinkPreset("ib-ndr200", "InfiniBand NDR200, one 200 Gb/s port (ConnectX-7)", 200e9 / 8, None, CONNECTX7,
               "ConnectX-7: NDR200 200Gb/s; the source gives no latency"),
    LinkPreset("100gbe", "100 Gigabit Ethernet, one port (ConnectX-7 QSFP112)", 100e9 / 8, None, CONNECTX7,
               "ConnectX-7 dual-port QSFP112: 100GbE; the source gives no latency"),
    LinkPreset("400gbe", "400 Gigabit Ethernet, one port per GPU (ConnectX-7)", 400e9 / 8, None, CONNECTX7,
               "ConnectX-7: up to 400GbE Ethernet; the source gives no latency"),
)}


def _dense(fp32, tf32, bf16, fp8, sparse: bool) -> dict:
    """Dense peaks in FLOP/s from the datasheet's TFLOPS; `sparse`: its tensor-core figures are
    printed with sparsity (halved here; fp32 is not a tensor-core figure and is never halved)."""
    half = 0.5 if sparse else 1.0
    return {"fp32": fp32 * TERA, "tf32": tf32 * half * TERA, "bf16": bf16 * half * TERA,
            "fp16": bf16 * half * TERA, "fp8": fp8 * half * TERA if fp8 else None}


DEVICES = {p.name: p for p in (
    DevicePreset("a100-sxm-80gb", "NVIDIA A100 SXM 80 GB (HGX/DGX A100, 8 GPUs on NVLink 3)", "A100-SXM4-80GB",
                 "nvlink3-a100", "ib-hdr", 80 * GB, 2039 * GB, _dense(19.5, 156, 312, None, sparse=False),
                 A100_DATASHEET,
                 "A100 80GB SXM: FP32 19.5 TFLOPS; TF32 Tensor Core 156 TFLOPS (312 with sparsity); BF16/FP16 "
                 "Tensor Core 312 TFLOPS (624 with sparsity); no FP8; 80GB HBM2e, 2,039GB/s",
                 short="A100 SXM 80 GB"),
    DevicePreset("h100-sxm", "NVIDIA H100 SXM5 80 GB (HGX node, 8 GPUs on NVLink 4)", "H100 80GB HBM3",
                 "nvlink4-h100", "ib-ndr", 80 * GB, 3350 * GB, _dense(67, 989, 1979, 3958, sparse=True),
                 H100_DATASHEET,
                 "H100 SXM: FP32 67 TFLOPS; TF32 989, BF16/FP16 1,979, FP8 3,958 Tensor Core TFLOPS "
                 "(with sparsity; dense is half); 80GB, 3.35TB/s",
                 short="H100 SXM"),
    DevicePreset("h100-pcie", "NVIDIA H100 PCIe 80 GB (PCI Express 5.0 card)", "H100 PCIe", "pcie5-x16", "ib-ndr",
                 80 * GB, 2000 * GB, _dense(51, 756, 1513, 3026, sparse=True), H100_DATASHEET,
                 "H100 PCIe: FP32 51 TFLOPS; TF32 756, BF16/FP16 1,513, FP8 3,026 Tensor Core TFLOPS "
                 "(with sparsity; dense is half); 80GB, 2TB/s",
                 short="H100 PCIe"),
    DevicePreset("h200", "NVIDIA H200 SXM 141 GB (8 GPUs on NVLink 4)", "H200", "nvlink4-h200", "ib-ndr",
                 141 * GB, 4800 * GB, _dense(67, 989, 1979, 3958, sparse=True), H200_PAGE,
                 "H200 SXM: FP32 67 TFLOPS; TF32 989, BF16/FP16 1,979, FP8 3,958 Tensor Core TFLOPS "
                 "(with sparsity; dense is half); 141GB HBM3e, 4.8TB/s",
                 short="H200 SXM"),
    DevicePreset("b200", "NVIDIA B200 180 GB (HGX B200, 8 GPUs on NVLink 5)", "B200", "nvlink5-b200", "ib-ndr",
                 180 * GB, 7700 * GB, _dense(75, 2.2e3, 4.5e3, 9e3, sparse=True), B200_PAGE,
                 "HGX B200 column, per GPU: FP32 75 TFLOPS; TF32 2.2, FP16/BF16 4.5, FP8 9 Tensor Core PFLOPS "
                 "(with sparsity; dense is half); 180GB HBM3E, 7.7TB/s",
                 short="B200"),
)}


def close_names(name: str, names) -> str:
    """'did you mean X?' for a misspelt preset name, else the list of them."""
    close = difflib.get_close_matches(str(name).strip().lower(), list(names), n=1, cutoff=0.5)
    if close:
        return f"did you mean '{close[0]}'? (presets: {', '.join(names)})"
    return f"presets: {', '.join(names)}"


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


# --- the spec's `hardware:` block --------------------------------------------------------

@dataclass(frozen=True)
class Hardware:
    """The spec's `hardware:` block, resolved: preset names, never None once loaded."""
    device: str
    gpus_per_host: int
    intra_host: str
    inter_host: str
    precision: str | None = None  # the matmul precision to predict with; None: training.precision
    nics_per_host: int | None = None  # network ports a host, each at inter_host's rate; None: one a GPU

    @property
    def device_preset(self) -> DevicePreset:
        return DEVICES[self.device]

    @property
    def memory_bytes(self) -> float:
        """HBM capacity of one GPU (the device preset's, from its datasheet)."""
        return self.device_preset.memory_bytes

    @property
    def intra_link(self) -> LinkPreset:
        return LINKS[self.intra_host]

    @property
    def inter_link(self) -> LinkPreset:
        return LINKS[self.inter_host]

    def hosts(self, gpus: int) -> int:
        return max(1, -(-gpus // self.gpus_per_host))

    def describe(self, gpus: int) -> str:
        """'1,024 H100 SXM' for captions."""
        return f"{gpus:,} {self.device_preset.short}"


def resolve_hardware(block: dict | None) -> Hardware | None:
    """The block with its defaults (the device's own NVLink and network); names are lower-cased.
    An unknown name stays as written: check_hardware reports it before anything reads it."""
    if not block:
        return None
    name = str(block["device"]).strip().lower()
    device = DEVICES.get(name)
    intra = block.get("intra_host", device.link if device else "")
    inter = block.get("inter_host", device.nic if device else "")
    nics = block.get("nics_per_host")
    return Hardware(name, int(block.get("gpus_per_host", 8)), str(intra).strip().lower(), str(inter).strip().lower(),
                    block.get("precision"), int(nics) if nics is not None else None)


def check_hardware(block: dict | None, precision: str, gpus: int):
    """(path, message) for each problem of a `hardware:` block (schema-valid already):
    an unknown preset (did you mean / the list), a precision the device lacks, a link of
    another device, GPUs that do not fill whole hosts."""
    if not block:
        return
    device = DEVICES.get(str(block["device"]).lower())
    if device is None:
        yield ("hardware", "device"), f"{block['device']!r} is not a device preset; {close_names(block['device'], DEVICES)}"
    for key in ("intra_host", "inter_host"):
        if key in block and str(block[key]).lower() not in LINKS:
            yield ("hardware", key), f"{block[key]!r} is not a link preset; {close_names(block[key], LINKS)}"
    if device is None:
        return
    intra = LINKS.get(str(block.get("intra_host", device.link)).lower())
    if intra is not None and intra.device not in (None, device.name):
        yield ("hardware", "intra_host"), (f"{intra.name} links {intra.device} GPUs, not {device.name} "
                                           f"(its own: {device.link})")
    wanted = block.get("precision") or precision
    key = ("hardware", "precision") if block.get("precision") else ("training", "precision")
    if device.peak(wanted) is None:
        yield key, (f"the {device.name} datasheet gives no {wanted} tensor-core peak (it has "
                    f"{', '.join(device.precisions())})")
    per_host = int(block.get("gpus_per_host", 8))
    if gpus > per_host and gpus % per_host:
        yield ("hardware", "gpus_per_host"), (f"{gpus:,} GPUs do not fill whole hosts of {per_host} "
                                              f"(use a multiple of {per_host})")


def hardware_warnings(block: dict | None, tensor: int, gpus: int):
    """(path, message) for what is valid but costly: a tensor group wider than a host
    crosses the NIC for every layer's all-reduce."""
    if not block:
        return
    per_host = int(block.get("gpus_per_host", 8))
    if tensor > per_host:
        yield ("hardware", "gpus_per_host"), (f"the tensor group of {tensor} is wider than a host of {per_host} "
                                              "GPUs: its all-reduces cross the NIC")


# --- `dtgen predict --list-presets` ------------------------------------------------------

def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / GB:g} GB/s ({bytes_per_s * 8 / GB:g} Gbit/s)"


def _peaks(device: DevicePreset) -> str:
    return ", ".join(f"{p} {device.peak(p) / TERA:g}" if device.peak(p) else f"{p} none" for p in PRECISIONS)


def presets_table() -> str:
    """Every preset with its numbers and source."""
    rows = [("link", p.name, _rate(p.bytes_per_s),
             f"{p.latency_s * 1e6:g} us" if p.latency_s is not None else "not sourced",
             f"inside {p.device} hosts" if p.device else "any hosts", p.what, p.source, p.note)
            for p in LINKS.values()]
    rows += [("device", p.name, f"HBM {p.memory_bytes / GB:g} GB", f"{p.hbm_bytes_per_s / GB:g} GB/s",
              f"dense TFLOP/s {_peaks(p)}; link {p.link}, network {p.nic}", p.what, p.source, p.note)
             for p in DEVICES.values()]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    head = ("kind", "name", "bandwidth per direction / memory", "latency / HBM bandwidth")
    widths = [max(w, len(h)) for w, h in zip(widths, head)]
    pad = " " * (sum(widths) + 8)
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  numbers / what / source"]
    for r in rows:
        lines.append("  ".join(v.ljust(w) for v, w in zip(r[:4], widths)) + f"  {r[4]}: {r[5]}")
        lines.append(pad + f"  source: {r[6]}")
        lines.append(pad + f"  ({r[7]})")
    lines.append("Bandwidths are per direction; FLOP/s are dense peaks (a datasheet printed with sparsity is "
                 "halved). A latency no source gives is left out. A calibration's compute carries to a device "
                 "preset only from a calibration made on that device; a spec's `hardware:` block predicts "
                 "from these datasheet numbers.")
    return "\n".join(lines)
