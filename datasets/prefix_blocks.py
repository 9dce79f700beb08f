"""Prefix-cache block ids of a trace: the Mooncake FAST'25 traces' ``hash_ids`` (one list per request; equal ids
are the same 512-token KV block; provenance and license in ``data/traces/mooncake/PROVENANCE.md``). The request
fields themselves are read by :func:`fleetplan.datasets.traces.read_mooncake_jsonl`, which drops the block ids.
:func:`prefix_cache_costs` gathers the prices, links and egress tables a shared prefix cache's ledger needs."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.latency import prefill_time_s
from fleetplan.costmodels.network import Site, route_class
from fleetplan.costmodels.prefixcache import CacheCosts
from fleetplan.costmodels.prices import select_egress_table
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.egress import load_egress
from fleetplan.datasets.catalog.prices import find_price
from fleetplan.datasets.network import load_network_graph
from fleetplan.errors import InputError
from fleetplan.fileio import parse_json

#: Tokens per block of the Mooncake traces (their README).
MOONCAKE_BLOCK_TOKENS = 512
_SHIPPED = {"mooncake-conversation": "conversation_trace.jsonl", "mooncake-synthetic": "synthetic_trace.jsonl"}


def read_block_ids(path_or_name: str | Path, *, limit: int | None = None) -> list[list[int]]:
    """Per request (file order), its prefix-block ids. ``path_or_name``: a JSON Lines path, or a shipped name
    ('mooncake-conversation', 'mooncake-synthetic'); ``limit``: read at most that many requests. Raises InputError
    naming the file and line for a missing file, bad JSON or a missing/ill-typed ``hash_ids``."""
    name = str(path_or_name)
    if name in _SHIPPED:
        text = resources.files("fleetplan.datasets").joinpath("data", "traces", "mooncake",
                                                             _SHIPPED[name]).read_text(encoding="utf-8")
    else:
        p = Path(path_or_name)
        if not p.is_file():
            raise InputError(f"trace {p} does not exist; give a JSON Lines file or one of {', '.join(_SHIPPED)}",
                             source=str(p))
        text = p.read_text(encoding="utf-8")
    out: list[list[int]] = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if limit is not None and len(out) >= limit:
            break
        obj = parse_json(line, source=name, row=i, what="JSON object with hash_ids on each line")
        try:
            ids = obj["hash_ids"]
        except (KeyError, TypeError):
            raise InputError("each line must be a JSON object with hash_ids (a list of block ids)", source=name,
                             row=i, field="hash_ids") from None
        if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
            raise InputError("hash_ids must be a list of whole numbers", source=name, row=i, field="hash_ids")
        out.append(ids)
    return out


def prefix_cache_costs(model: Model, gpu: GPU, *, site: str, peer_site: str | None, requests_per_day: float,
                       blocks_per_request: float, cache_bytes_per_replica: float, replicas: int,
                       pricing_model: str = "on-demand") -> CacheCosts:
    """The :class:`~fleetplan.costmodels.prefixcache.CacheCosts` of a shared prefix cache over ``replicas``
    one-GPU replicas of ``model`` on ``gpu`` at ``site`` whose remote blocks come from ``peer_site`` (None: the
    same site), from the shipped data: the GPU's catalog price there (``pricing_model``); a block's prefill on the
    calibrated roofline (one 512-token block); the link between the replicas (the inter-node default within a
    site, else the links data's route) for the fetch's GPU wait; the egress table of the route from the peer (the
    sender pays; none within a zone); and the caches' HBM, pro rata of the GPU's memory. Raises InputError /
    UnknownNameError for an unknown site, GPU price or route."""
    here = Site.parse(site)
    peer = here if peer_site is None else Site.parse(peer_site)
    price = find_price(gpu.name, here.cloud, here.region, pricing_model, zone=here.zone or None)
    blk = MOONCAKE_BLOCK_TOKENS * model.kv_bytes_per_token("bf16")
    graph = load_network_graph()
    link = graph.inter_node_link() if peer == here else graph.link(peer, here)
    rc = route_class(peer, here)
    table = None if rc == "same_zone" else select_egress_table(peer.cloud, rc, load_egress())
    return CacheCosts(requests_per_day=requests_per_day, blocks_per_request=blocks_per_request, block_bytes=blk,
                      prefill_gpu_s_per_block=prefill_time_s(model, gpu, MOONCAKE_BLOCK_TOKENS,
                                                             calib=load_calibration(gpu)),
                      fetch_gpu_s_per_block=link.transfer_time_s(blk), price=price,
                      cache_gpu_hours_per_day=replicas * cache_bytes_per_replica / gpu.memory_bytes * 24.0,
                      egress_table=table, route=f"{peer.name} to {here.name}")
