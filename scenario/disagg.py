"""Prefill and decode options of a scenario with ``options.disaggregation`` (MILP constraints 13-14): each pool's
prefill and decode replica capacities under the model's SLO, and the KV routes between sites.
"""

from __future__ import annotations

from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.latency import decode_step_time_s
from fleetplan.costmodels.network import Link, Site, route_class
from fleetplan.costmodels.prices import (
    select_egress_table,
)
from fleetplan.costmodels.slo import SLO
from fleetplan.costmodels.split import (
    decode_replica_capacity,
    flat_table,
    kv_transfer_s,
    prefill_replica_capacity,
)
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.egress import load_egress
from fleetplan.datasets.network import load_network_graph
from fleetplan.placement.problem import (
    DeratingKey,
    KvRoute,
    Pool,
    ReplicaOption,
)


def prefill_decode_options(model: Model, mix: TokenMix, slo: SLO, pools: list[Pool], gpus: dict[str, GPU],
                           tps: list[int],
                opts: dict, *, calib_file: str | None, weight_dtype: str, kv_dtype: str, link: Link,
                why: list[str], prefill_only: set[str],
                derating: dict[DeratingKey, float] | None = None) -> tuple[list[ReplicaOption], list[KvRoute]]:
    """Prefill and decode options of ``model`` on ``pools`` and the KV routes between their sites (issue 17).

    Decode options: every pool and tp (pp 1) with a positive decode capacity
    (:func:`fleetplan.costmodels.split.decode_replica_capacity`: memory bandwidth and KV memory under the TPOT
    target) and a KV cache of at least ``min_batch`` sequences (not at ``prefill_only`` sites). Prefill options:
    every pool, tp and decode site (the prefill pool's own site, or any site with a decode option when
    ``cross_site``), with the prefill capacity
    (:func:`fleetplan.costmodels.split.prefill_replica_capacity`) under the TTFT target minus the p95 prompt's KV
    transfer to that site (:func:`fleetplan.costmodels.split.kv_transfer_s`: the scenario's inter-node link inside
    a site, the shipped WAN link between sites; one stream per tensor-parallel rank), as the ledger's split
    comparison sizes them. Routes carry the mean prompt's KV bytes, its text bytes (bytes_per_token) and the
    egress tables (the sender's cloud and route class; a flat ``kv_egress_usd_per_gb`` when given).
    Options left out are explained in ``why``. ``derating``: capacity factors per (model, pool, role, tp), as
    :func:`build_problem` takes them.
    """
    derating = derating or {}
    dis = opts["disaggregation"]
    mu_mem = opts["memory_utilization"]
    kv_mean = model.kv_tokens_cached(mix.input_tokens_mean) * model.kv_bytes_per_token(kv_dtype)
    kv_p95 = model.kv_tokens_cached(mix.input_tokens_p95) * model.kv_bytes_per_token(kv_dtype)
    weights = model.weight_bytes(weight_dtype)
    graph = load_network_graph()
    egress = load_egress()

    def start_usd(pool: Pool, tp: int) -> float:
        return weights / tp / opts["load_bandwidth_bytes_per_s"] / 3600 * tp * pool.usd_per_busy_gpu_hour + opts[
            "usd_per_migration"]

    decode: list[ReplicaOption] = []
    for pool in pools:
        if pool.site in prefill_only:
            continue
        gpu = gpus[pool.gpu]
        calib = load_calibration(gpu, calib_file)
        for tp in tps:
            if tp > pool.gpus_per_node or pool.gpus_per_node % tp:
                continue
            cap, batch, lim = decode_replica_capacity(model, gpu, mix, slo, tp=tp, calib=calib,
                                                      weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                                                      memory_utilization=mu_mem)
            if cap <= 0 or batch < opts["min_batch"]:
                why.append(f"{pool.id} tp {tp} decode: " + (f"no capacity ({lim})" if cap <= 0 else
                                                            f"KV cache holds {batch:.1f} sequences < min_batch"))
                continue
            tpot = decode_step_time_s(model, gpu, batch, mix.input_tokens_p95 + mix.output_tokens_p95 / 2, tp=tp,
                                      weight_dtype=weight_dtype, kv_dtype=kv_dtype, calib=calib)
            cap *= derating.get((model.name, pool.id, "decode", tp), 1.0) * (1 - pool.interruption_rate)  # spot derated
            decode.append(ReplicaOption(model.name, pool.id, tp, 1, cap, mu_mem * gpu.memory_bytes,
                                        start_cost_usd=start_usd(pool, tp), tpot_p95_s=tpot, max_batch=batch,
                                        kv_budget_bytes=mu_mem * tp * gpu.memory_bytes - weights,
                                        capacity_source=f"decode-only roofline ({calib.gpu} row), limited by {lim}",
                                        role="decode"))
    site_of = {p.id: p.site for p in pools}
    decode_sites = sorted({site_of[o.pool] for o in decode})
    prefill: list[ReplicaOption] = []
    routes: dict[tuple[str, str], KvRoute] = {}
    for pool in pools:
        gpu = gpus[pool.gpu]
        calib = load_calibration(gpu, calib_file)
        for ds in decode_sites:
            if ds != pool.site and not dis["cross_site"]:
                continue
            wan = graph.link(pool.site, ds) if ds != pool.site else link
            for tp in tps:
                if tp > pool.gpus_per_node or pool.gpus_per_node % tp:
                    continue
                added = kv_transfer_s(kv_p95, wan, tp)
                cap, ttft = prefill_replica_capacity(model, gpu, mix, slo.ttft_s - added, tp=tp, calib=calib,
                                                     weight_dtype=weight_dtype)
                if cap <= 0:
                    why.append(f"{pool.id} tp {tp} prefill for decode at {ds}: misses TTFT {slo.ttft_s:g} s "
                               f"(KV transfer {added:.3f} s)")
                    continue
                cap *= derating.get((model.name, pool.id, "prefill", tp), 1.0) * (1 - pool.interruption_rate)
                prefill.append(ReplicaOption(model.name, pool.id, tp, 1, cap, mu_mem * gpu.memory_bytes,
                                             start_cost_usd=start_usd(pool, tp), ttft_p95_s=ttft + added,
                                             capacity_source=f"prefill-only roofline ({calib.gpu} row), KV over "
                                                             f"{wan.name}", role="prefill", decode_site=ds,
                                             kv_transfer_s=added))
                if (pool.site, ds) not in routes:
                    cross = pool.site != ds
                    rc = route_class(pool.site, ds) if cross else ""
                    kv_t = pr_t = None
                    if cross:
                        kv_t = select_egress_table(Site.parse(pool.site).cloud, rc, egress)
                        pr_t = select_egress_table(Site.parse(ds).cloud, route_class(ds, pool.site), egress)
                        if dis["kv_egress_usd_per_gb"] is not None:
                            kv_t = flat_table(kv_t, dis["kv_egress_usd_per_gb"])
                            pr_t = flat_table(pr_t, dis["kv_egress_usd_per_gb"])
                    routes[(pool.site, ds)] = KvRoute(model.name, pool.site, ds, rc, kv_mean,
                                                      mix.input_tokens_mean * opts["bytes_per_token"], kv_t, pr_t,
                                                      link=wan.name)
    return prefill + decode, list(routes.values())
