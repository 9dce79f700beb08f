"""Prefill and decode options of a scenario with ``options.disaggregation`` (MILP constraints 13-14): each pool's
prefill and decode replica capacities under the model's SLO, and the KV routes between sites.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetplan.costmodels.hardware import GPU
from fleetplan.costmodels.latency import decode_step_time_s
from fleetplan.costmodels.network import Link, NetworkGraph, Site, route_class
from fleetplan.costmodels.prices import EgressTable, select_egress_table
from fleetplan.costmodels.split import (
    decode_replica_capacity,
    flat_table,
    kv_transfer_s,
    prefill_replica_capacity,
)
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.egress import load_egress
from fleetplan.datasets.network import load_network_graph
from fleetplan.placement.problem import KvRoute, Pool, ReplicaOption
from fleetplan.scenario.options import ModelInputs, SizingContext


@dataclass(frozen=True)
class Disaggregation:
    """``options.disaggregation`` as checked against the scenario: whether it is on, the scenario names of the
    models it applies to (None: all) and the prefill-only sites (canonical site names; empty when off)."""

    enabled: bool
    models: set[str] | None
    prefill_only: set[str]

    def serves(self, name: str) -> bool:
        """Whether the scenario model ``name`` gets prefill and decode options."""
        return self.enabled and (self.models is None or name in self.models)


def _fits(pool: Pool, tp: int) -> bool:
    """Whether a tp group fits inside one of the pool's nodes (tp divides the node size)."""
    return not (tp > pool.gpus_per_node or pool.gpus_per_node % tp)


def _start_usd(sizing: SizingContext, mi: ModelInputs, pool: Pool, tp: int) -> float:
    """Start cost of a prefill or decode replica: loading the weights at load_bandwidth_bytes_per_s on its tp GPUs
    at the pool's busy price, plus usd_per_migration."""
    opts = sizing.opts
    return mi.weight_bytes / tp / opts["load_bandwidth_bytes_per_s"] / 3600 * tp * pool.usd_per_busy_gpu_hour + opts[
        "usd_per_migration"]


def decode_options(sizing: SizingContext, mi: ModelInputs, pools: list[Pool], gpus: dict[str, GPU],
                   prefill_only: set[str], why: list[str]) -> list[ReplicaOption]:
    """Decode options of ``mi``: every pool (not at a ``prefill_only`` site) and tp (pp 1) with a positive decode
    capacity (:func:`fleetplan.costmodels.split.decode_replica_capacity`: memory bandwidth and KV memory under the
    TPOT target) and a KV cache of at least ``min_batch`` sequences; the others are explained in ``why``."""
    opts, model, mix = sizing.opts, mi.model, mi.mix
    mu_mem = sizing.memory_utilization
    decode: list[ReplicaOption] = []
    for pool in pools:
        if pool.site in prefill_only:
            continue
        gpu = gpus[pool.gpu]
        calib = load_calibration(gpu, sizing.calib_file)
        for tp in mi.tps:
            if not _fits(pool, tp):
                continue
            cap, batch, lim = decode_replica_capacity(model, gpu, mix, mi.slo, tp=tp, calib=calib,
                                                      weight_dtype=mi.weight_dtype, kv_dtype=mi.kv_dtype,
                                                      memory_utilization=mu_mem)
            if cap <= 0 or batch < opts["min_batch"]:
                why.append(f"{pool.id} tp {tp} decode: " + (f"no capacity ({lim})" if cap <= 0 else
                                                            f"KV cache holds {batch:.1f} sequences < min_batch"))
                continue
            tpot = decode_step_time_s(model, gpu, batch, mix.input_tokens_p95 + mix.output_tokens_p95 / 2, tp=tp,
                                      weight_dtype=mi.weight_dtype, kv_dtype=mi.kv_dtype, calib=calib)
            cap *= sizing.derating.get((model.name, pool.id, "decode", tp), 1.0) * (1 - pool.interruption_rate)
            decode.append(ReplicaOption(model.name, pool.id, tp, 1, cap, mu_mem * gpu.memory_bytes,
                                        start_cost_usd=_start_usd(sizing, mi, pool, tp), tpot_p95_s=tpot,
                                        max_batch=batch, kv_budget_bytes=mu_mem * tp * gpu.memory_bytes
                                        - mi.weight_bytes,
                                        capacity_source=f"decode-only roofline ({calib.gpu} row), limited by {lim}",
                                        role="decode"))
    return decode


def kv_route(sizing: SizingContext, mi: ModelInputs, site: str, decode_site: str, wan: Link,
             egress: list[EgressTable]) -> KvRoute:
    """The route of ``mi``'s KV caches from prefill at ``site`` to decode at ``decode_site`` over ``wan``: the mean
    prompt's KV bytes and text bytes (bytes_per_token), and across sites the egress tables of both directions (the
    sender's cloud and route class; a flat ``kv_egress_usd_per_gb`` when given)."""
    opts, model, mix = sizing.opts, mi.model, mi.mix
    flat = opts["disaggregation"]["kv_egress_usd_per_gb"]
    kv_mean = model.kv_tokens_cached(mix.input_tokens_mean) * model.kv_bytes_per_token(mi.kv_dtype)
    cross = site != decode_site
    rc = route_class(site, decode_site) if cross else ""
    kv_t = pr_t = None
    if cross:
        kv_t = select_egress_table(Site.parse(site).cloud, rc, egress)
        pr_t = select_egress_table(Site.parse(decode_site).cloud, route_class(decode_site, site), egress)
        if flat is not None:
            kv_t = flat_table(kv_t, flat)
            pr_t = flat_table(pr_t, flat)
    return KvRoute(model.name, site, decode_site, rc, kv_mean, mix.input_tokens_mean * opts["bytes_per_token"], kv_t,
                   pr_t, link=wan.name)


def prefill_options(sizing: SizingContext, mi: ModelInputs, pools: list[Pool], gpus: dict[str, GPU],
                    decode_sites: list[str], graph: NetworkGraph, egress: list[EgressTable],
                    why: list[str]) -> tuple[list[ReplicaOption], list[KvRoute]]:
    """Prefill options of ``mi`` and the KV routes they use: every pool, tp and decode site (the pool's own site,
    or any of ``decode_sites`` when ``cross_site``), with the prefill capacity
    (:func:`fleetplan.costmodels.split.prefill_replica_capacity`) under the TTFT target minus the p95 prompt's KV
    transfer to that site (:func:`fleetplan.costmodels.split.kv_transfer_s`: the scenario's inter-node link inside
    a site, ``graph``'s WAN link between sites; one stream per tensor-parallel rank); the others are explained in
    ``why``. Routes: :func:`kv_route`, one per (prefill site, decode site) in the order first used."""
    model, mix, slo = mi.model, mi.mix, mi.slo
    mu_mem = sizing.memory_utilization
    kv_p95 = model.kv_tokens_cached(mix.input_tokens_p95) * model.kv_bytes_per_token(mi.kv_dtype)
    prefill: list[ReplicaOption] = []
    routes: dict[tuple[str, str], KvRoute] = {}
    for pool in pools:
        gpu = gpus[pool.gpu]
        calib = load_calibration(gpu, sizing.calib_file)
        for ds in decode_sites:
            if ds != pool.site and not sizing.opts["disaggregation"]["cross_site"]:
                continue
            wan = graph.link(pool.site, ds) if ds != pool.site else sizing.link
            for tp in mi.tps:
                if not _fits(pool, tp):
                    continue
                added = kv_transfer_s(kv_p95, wan, tp)
                cap, ttft = prefill_replica_capacity(model, gpu, mix, slo.ttft_s - added, tp=tp, calib=calib,
                                                     weight_dtype=mi.weight_dtype)
                if cap <= 0:
                    why.append(f"{pool.id} tp {tp} prefill for decode at {ds}: misses TTFT {slo.ttft_s:g} s "
                               f"(KV transfer {added:.3f} s)")
                    continue
                cap *= sizing.derating.get((model.name, pool.id, "prefill", tp), 1.0) * (1 - pool.interruption_rate)
                prefill.append(ReplicaOption(model.name, pool.id, tp, 1, cap, mu_mem * gpu.memory_bytes,
                                             start_cost_usd=_start_usd(sizing, mi, pool, tp), ttft_p95_s=ttft + added,
                                             capacity_source=f"prefill-only roofline ({calib.gpu} row), KV over "
                                                             f"{wan.name}", role="prefill", decode_site=ds,
                                             kv_transfer_s=added))
                if (pool.site, ds) not in routes:
                    routes[(pool.site, ds)] = kv_route(sizing, mi, pool.site, ds, wan, egress)
    return prefill, list(routes.values())


def prefill_decode_options(sizing: SizingContext, mi: ModelInputs, pools: list[Pool], gpus: dict[str, GPU],
                           dis: Disaggregation, *, why: list[str]) -> tuple[list[ReplicaOption], list[KvRoute]]:
    """Prefill and decode options of ``mi`` on ``pools`` and the KV routes between their sites (issue 17), as the
    ledger's split comparison sizes them: :func:`decode_options` (not at ``dis.prefill_only`` sites), then
    :func:`prefill_options` for the sites with a decode option. Returns (prefill + decode options, routes);
    options left out are explained in ``why``. Capacities are derated by ``sizing.derating`` per (model, pool,
    role, tp) and by the pool's interruption rate."""
    graph = load_network_graph()
    egress = load_egress()
    decode = decode_options(sizing, mi, pools, gpus, dis.prefill_only, why)
    site_of = {p.id: p.site for p in pools}
    decode_sites = sorted({site_of[o.pool] for o in decode})
    prefill, routes = prefill_options(sizing, mi, pools, gpus, decode_sites, graph, egress, why)
    return prefill + decode, routes
