"""Reader of datasets/data/network/links.csv: network links between sites and inside a site (inter-node).

Builds :class:`fleetplan.costmodels.network.Link` records and the :class:`~fleetplan.costmodels.network.NetworkGraph`
(sources and estimate flags of the figures: PROVENANCE.md beside the file). Units: the file gives Gbit/s (shared by
``gpus_sharing`` GPUs) and milliseconds; the records hold bytes/s per GPU and seconds.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
from pathlib import Path

from fleetplan.costmodels.network import ROUTE_CLASSES, Link, NetworkGraph
from fleetplan.errors import InputError

_SHIPPED = "datasets/data/network/links.csv"


def _data_path():
    return importlib.resources.files("fleetplan.datasets") / "data" / "network" / "links.csv"


def read_links(path: str | Path | None = None) -> list[dict]:
    """Rows of links.csv (the shipped file when ``path`` is None) as dicts with ``link`` (a Link), ``src``,
    ``dst`` (site names, '' for default rows) and ``is_default`` (bool), the input of NetworkGraph.

    Raises InputError for missing columns, an unknown link class, a non-number or gpus_sharing below 1.
    """
    source = str(path) if path else _SHIPPED
    f = open(path, newline="") if path else _data_path().open(newline="")  # noqa: SIM115
    with f:
        rows = list(csv.DictReader(f))
    need = {"link_class", "name", "src", "dst", "bandwidth_gbps", "gpus_sharing", "rtt_ms", "is_default", "estimate",
            "source"}
    if rows and not need <= set(rows[0]):
        raise InputError(f"missing columns {sorted(need - set(rows[0]))}", source=source)
    out = []
    for i, r in enumerate(rows, start=1):
        cls = r["link_class"].strip()
        if cls not in ROUTE_CLASSES + ("inter_node",):
            raise InputError(f"unknown link class {cls!r}; use one of inter_node, {', '.join(ROUTE_CLASSES)}",
                             source=source, row=i, field="link_class", value=cls)
        try:
            gbps = float(r["bandwidth_gbps"])
            sharing = float(r["gpus_sharing"] or 1)
            rtt_ms = float(r["rtt_ms"])
        except ValueError as e:
            raise InputError(f"not a number: {e}", source=source, row=i) from None
        if not sharing >= 1:
            raise InputError("gpus_sharing must be >= 1", source=source, row=i, field="gpus_sharing", value=sharing)
        link = Link(gbps * 1e9 / 8 / sharing, rtt_ms / 1e3, cls, r["name"].strip(),
                    r["estimate"].strip().lower() in ("yes", "true", "1"), r["source"].strip())
        out.append({"link": link, "src": r["src"].strip(), "dst": r["dst"].strip(),
                    "is_default": r["is_default"].strip() in ("1", "yes", "true")})
    return out


def load_network_graph(path: str | Path | None = None) -> NetworkGraph:
    """The network graph of links.csv (the shipped file, cached, when ``path`` is None; a fresh graph from
    ``path`` otherwise). Raises InputError on a malformed file. Do not add links to the shipped (shared) graph:
    build your own with ``NetworkGraph(read_links())``."""
    return _shipped_graph() if path is None else NetworkGraph(read_links(path))


@functools.lru_cache(maxsize=1)
def _shipped_graph() -> NetworkGraph:
    return NetworkGraph(read_links())


def inter_node_link(name: str | None = None) -> Link:
    """The per-GPU link between nodes of one site from links.csv: the inter_node default row when ``name`` is None,
    else the named row ('infiniband-ndr', 'aws-p5-efa', ...). Raises UnknownNameError for an unknown name."""
    return _shipped_graph().inter_node_link(name)


__all__ = ["inter_node_link", "load_network_graph", "read_links"]
