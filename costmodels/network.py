"""Sites, network links and transfer times.

A :class:`Site` is a place GPUs run: ``cloud:region`` or ``cloud:region:zone`` (e.g. ``aws:us-east-1`` or
``aws:us-east-1:use1-az1``). A :class:`NetworkGraph` (a ``networkx.Graph`` whose nodes are site names) holds a
bandwidth (bytes/s) and a round-trip time (s) per link, built from rows of ``datasets/data/network/links.csv``
(read by :mod:`fleetplan.datasets.network`; sources and estimate flags in its PROVENANCE.md). Pairs without their
own row use the default row of their route class.

Transfer-time convention (one choice, used everywhere): moving N bytes from ``src`` to ``dst`` over an already
open connection takes ``N / bandwidth + RTT / 2``, i.e. serialisation plus one-way propagation. Connection set-up
(TCP handshake, slow start) is not counted: pipeline stages and KV transfers keep their connections open. A
request/response exchange costs a full RTT; add the other half yourself when you model one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import networkx as nx

from fleetplan.errors import InputError, UnknownNameError

#: Route classes, cheapest first, as the egress price tables name them.
ROUTE_CLASSES: tuple[str, ...] = ("same_zone", "cross_zone", "inter_region", "internet")

_NAME_PART = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True)
class Site:
    """A location: cloud, region and optionally zone (lower-case names, e.g. 'aws', 'us-east-1', 'use1-az1').

    ``str(site)`` / :attr:`name` gives 'aws:us-east-1' or 'aws:us-east-1:use1-az1'; :meth:`parse` reads it back.
    Raises InputError for empty or malformed parts.
    """

    cloud: str
    region: str
    zone: str = ""

    def __post_init__(self) -> None:
        for f in ("cloud", "region"):
            v = getattr(self, f)
            if not isinstance(v, str) or not _NAME_PART.match(v):
                raise InputError(f"site {f} {v!r} must be a lower-case name such as 'aws' or 'us-east-1'",
                                 field=f, value=v)
        if self.zone and (not isinstance(self.zone, str) or not _NAME_PART.match(self.zone)):
            raise InputError(f"site zone {self.zone!r} must be a lower-case name such as 'use1-az1' or empty",
                             field="zone", value=self.zone)

    @property
    def name(self) -> str:
        """'cloud:region' or 'cloud:region:zone'."""
        return f"{self.cloud}:{self.region}" + (f":{self.zone}" if self.zone else "")

    @property
    def region_site(self) -> Site:
        """The same site without its zone."""
        return Site(self.cloud, self.region)

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, text: str | Site) -> Site:
        """Read 'cloud:region' or 'cloud:region:zone' (a Site passes through). Raises InputError otherwise."""
        if isinstance(text, Site):
            return text
        parts = str(text).strip().lower().split(":") if isinstance(text, str) else []
        if len(parts) not in (2, 3) or not all(parts):
            raise InputError(f"site {text!r} is not 'cloud:region' or 'cloud:region:zone' "
                             "(e.g. 'aws:us-east-1' or 'aws:us-east-1:use1-az1')", field="site", value=text)
        return cls(*parts)


@dataclass(frozen=True)
class Link:
    """One network link (or path) between two places.

    Attributes:
        bandwidth_bytes_per_s: usable bandwidth per direction, bytes/s (per GPU for inter-node links).
        rtt_s: round-trip time, seconds.
        link_class: 'inter_node', 'same_zone', 'cross_zone', 'inter_region' or 'internet'.
        name: row name in links.csv.
        estimate: True when the figures are estimates (see links.csv).
        source: provenance.
    """

    bandwidth_bytes_per_s: float
    rtt_s: float
    link_class: str = ""
    name: str = ""
    estimate: bool = True
    source: str = ""

    def __post_init__(self) -> None:
        b = self.bandwidth_bytes_per_s
        if not isinstance(b, int | float) or math.isnan(b) or not 1e3 <= b <= 1e13:
            raise InputError(f"link bandwidth {b!r} bytes/s is outside 1e3..1e13; give bytes/s (Gbit/s × 1.25e8)",
                             field="bandwidth_bytes_per_s", value=b)
        r = self.rtt_s
        if not isinstance(r, int | float) or math.isnan(r) or not 0 <= r <= 10:
            raise InputError(f"link RTT {r!r} s is outside 0..10 s; give seconds, not milliseconds",
                             field="rtt_s", value=r)

    @property
    def one_way_latency_s(self) -> float:
        """Half the round-trip time, seconds."""
        return self.rtt_s / 2

    def transfer_time_s(self, nbytes: float) -> float:
        """Seconds to deliver ``nbytes`` over an open connection: nbytes / bandwidth + RTT / 2."""
        if nbytes < 0 or math.isnan(nbytes):
            raise InputError(f"cannot transfer {nbytes!r} bytes; give a non-negative byte count",
                             field="nbytes", value=nbytes)
        return nbytes / self.bandwidth_bytes_per_s + self.one_way_latency_s


def route_class(src: Site | str, dst: Site | str) -> str:
    """Egress route class of traffic from ``src`` to ``dst``.

    Returns 'internet' when the clouds differ, 'inter_region' when the regions differ, 'same_zone' when the two
    sites are identical (same zone, or both without a zone), and 'cross_zone' otherwise (two different zones, or
    one site with a zone and one without: the conservative reading, since zone-less traffic may cross zones).
    """
    a, b = Site.parse(src), Site.parse(dst)
    if a.cloud != b.cloud:
        return "internet"
    if a.region != b.region:
        return "inter_region"
    if a.zone == b.zone:
        return "same_zone"
    return "cross_zone"


class NetworkGraph:
    """Sites and the links between them (a ``networkx.Graph``; node = site name, edge attrs ``link``,
    ``bandwidth_bytes_per_s``, ``rtt_s``).

    Pairs with their own row in links.csv (or added with :meth:`add_link`) use it; a zone pair without a row uses
    the row of its two regions if any; everything else uses the default row of its :func:`route_class`.
    """

    def __init__(self, rows: list[dict] | None = None) -> None:
        """``rows``: dicts with keys ``link`` (:class:`Link`), ``src``, ``dst`` (site names, '' for default rows)
        and ``is_default`` (bool), as :func:`fleetplan.datasets.network.read_links` returns. Raises InputError
        when rows are given but a route class (or inter_node) has no default row."""
        self.graph: nx.Graph[str] = nx.Graph()
        self.defaults: dict[str, Link] = {}
        self.inter_node_links: dict[str, Link] = {}
        for r in rows or []:
            link: Link = r["link"]
            if link.link_class == "inter_node":
                self.inter_node_links[link.name] = link
                if r["is_default"]:
                    self.defaults["inter_node"] = link
            elif r["src"] and r["dst"]:
                self.add_link(r["src"], r["dst"], link)
            elif r["is_default"]:
                self.defaults[link.link_class] = link
        missing = [c for c in ROUTE_CLASSES + ("inter_node",) if c not in self.defaults]
        if rows is not None and missing:
            raise InputError(f"links data has no default row for {', '.join(missing)}; add one with is_default=1",
                             field="is_default")

    def add_link(self, src: Site | str, dst: Site | str, link: Link) -> None:
        """Add (or replace) the symmetric link between two sites."""
        a, b = Site.parse(src).name, Site.parse(dst).name
        self.graph.add_edge(a, b, link=link, bandwidth_bytes_per_s=link.bandwidth_bytes_per_s, rtt_s=link.rtt_s)

    def link(self, src: Site | str, dst: Site | str) -> Link:
        """The link from ``src`` to ``dst`` (see the class docstring for the fallback order)."""
        a, b = Site.parse(src), Site.parse(dst)
        for x, y in ((a.name, b.name), (a.region_site.name, b.region_site.name)):
            if x != y and self.graph.has_edge(x, y):
                return self.graph.edges[x, y]["link"]
        return self.defaults[route_class(a, b)]

    def transfer_time_s(self, nbytes: float, src: Site | str, dst: Site | str) -> float:
        """Seconds to move ``nbytes`` from ``src`` to ``dst``: nbytes / bandwidth + RTT / 2 (module docstring)."""
        return self.link(src, dst).transfer_time_s(nbytes)

    def inter_node_link(self, name: str | None = None) -> Link:
        """Per-GPU link between nodes of one site ('infiniband-ndr', 'aws-p5-efa', ...; the default when None)."""
        if name is None:
            return self.defaults["inter_node"]
        if name not in self.inter_node_links:
            raise UnknownNameError("inter-node link", name, self.inter_node_links)
        return self.inter_node_links[name]

    def lowest_rtt_path(self, src: Site | str, dst: Site | str) -> tuple[list[str], float]:
        """Path of explicit links with the lowest total RTT (networkx Dijkstra) and that RTT in seconds.

        Raises InputError when the graph holds no path between the two sites.
        """
        a, b = Site.parse(src).name, Site.parse(dst).name
        try:
            path = nx.shortest_path(self.graph, a, b, weight="rtt_s")
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            raise InputError(f"no explicit link path from {a} to {b}; add links or use link()",
                             field="site", value=f"{a}->{b}") from None
        return path, sum(self.graph.edges[u, v]["rtt_s"] for u, v in zip(path, path[1:], strict=False))


def transfer_time_s(nbytes: float, src: Site | str, dst: Site | str, graph: NetworkGraph) -> float:
    """Seconds to move ``nbytes`` from ``src`` to ``dst`` on ``graph`` (e.g.
    :func:`fleetplan.datasets.network.load_network_graph`): nbytes / bandwidth + RTT / 2. Raises InputError for bad
    sites or a negative byte count."""
    return graph.transfer_time_s(nbytes, src, dst)


__all__ = ["ROUTE_CLASSES", "Link", "NetworkGraph", "Site", "route_class", "transfer_time_s"]
