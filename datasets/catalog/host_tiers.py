"""The host-tier catalog (``datasets/data/hardware/host_tiers.csv``): host DRAM and local NVMe of the node each GPU
type ships in, as :class:`~fleetplan.costmodels.kvtiers.NodeTiers` records per GPU."""

from __future__ import annotations

from functools import lru_cache

from fleetplan.costmodels.hardware import GPU
from fleetplan.costmodels.kvtiers import NodeTiers
from fleetplan.datasets.catalog.rows import GB, cell_number, int_cell, require_columns, shipped_rows
from fleetplan.errors import InputError

GIB = 2**30  #: bytes per GiB, the unit clouds state host memory in
TB = 1e12  #: bytes per (decimal) TB, the unit drives are sold in


@lru_cache(maxsize=1)
def _rows() -> dict[str, tuple[str, int, float, int, float, float, str]]:
    rows = shipped_rows("hardware", "host_tiers.csv")
    require_columns(rows, ("gpu", "instance", "gpus_per_node", "host_memory_gib", "nvme_drives", "nvme_drive_tb",
                           "nvme_drive_read_GBps", "source"), "host tiers")
    out = {}
    for i, r in rows.rows:
        out[r["gpu"]] = (r["instance"], int_cell(r, "gpus_per_node", rows, i, required=True, low=1, high=64,
                                                         fix="give the GPUs of one node"),
                         cell_number(r, "host_memory_gib", rows, i, required=True, low=1, high=1e5, unit="GiB"),
                         int_cell(r, "nvme_drives", rows, i, required=True, low=0, high=64,
                                  fix="give the local NVMe drives of one node"),
                         cell_number(r, "nvme_drive_tb", rows, i, required=True, low=0, high=1e3, unit="TB"),
                         cell_number(r, "nvme_drive_read_GBps", rows, i, required=True, low=0, high=1e3,
                                     unit="GB/s"), r["source"])
    return out


def host_tier_gpus() -> list[str]:
    """GPU catalog names with a host-tier row."""
    return sorted(_rows())


def load_node_tiers(gpu: GPU) -> NodeTiers:
    """The host tiers per GPU of the node ``gpu`` ships in: host memory and NVMe / GPUs per node; DRAM read over the
    GPU's PCIe link, one direction (half the catalog's bidirectional figure); NVMe read = drives × per-drive read /
    GPUs per node, at most that PCIe figure. Raises InputError naming the GPU when it has no host-tier row or no
    PCIe figure."""
    row = _rows().get(gpu.name)
    if row is None:
        raise InputError(f"no host-tier row for {gpu.name}; rows exist for {', '.join(host_tier_gpus())} "
                         "(datasets/data/hardware/host_tiers.csv): drop host_tier or plan on one of them",
                         field="host_tier", value=gpu.name)
    if not gpu.pcie_bytes_per_s:
        raise InputError(f"{gpu.name} has no PCIe bandwidth in the GPU catalog; a host tier reads DRAM over it",
                         field="pcie", value=gpu.name)
    instance, per_node, mem_gib, drives, drive_tb, read_gbps, source = row
    pcie_one_way = gpu.pcie_bytes_per_s / 2
    return NodeTiers(gpu=gpu.name, instance=instance, dram_bytes_per_gpu=mem_gib * GIB / per_node,
                     dram_read_bytes_per_s_per_gpu=pcie_one_way, nvme_bytes_per_gpu=drives * drive_tb * TB / per_node,
                     nvme_read_bytes_per_s_per_gpu=min(pcie_one_way, drives * read_gbps * GB / per_node),
                     source=source)
