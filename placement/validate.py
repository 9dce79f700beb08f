"""Independent feasibility check of a plan, in plain Python, with no solver.

``validate(problem, plan)`` re-derives every constraint from the plan's decisions: per-window capacity against
demand (after the safety margin), the SLO of every option used, memory and compute share of every shared GPU,
inventory per pool and window with tensor-parallel groups placed inside nodes (first-fit decreasing onto the
pool's nodes), replica floor and ceiling, and the reported objective against the recomputed cost.
It is used by every solver test, by the CLI before it prints a plan, and by the service before it adopts one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from fleetplan.placement.plan import Plan
from fleetplan.placement.problem import Pool, Problem

#: Relative tolerance for floating-point comparisons (solvers work to ~1e-7 feasibility tolerance).
REL_TOL = 1e-6
ABS_TOL = 1e-6


@dataclass(frozen=True)
class ValidationReport:
    """Result of :func:`validate`: ``ok`` and the list of violations (empty when ok)."""

    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


def _ffd_fits(groups: list[int], nodes: int, gpus_per_node: int) -> bool:
    """First-fit decreasing of GPU groups (each must stay inside one node) onto ``nodes`` nodes."""
    free = [gpus_per_node] * nodes
    for g in sorted(groups, reverse=True):
        for i, f in enumerate(free):
            if f >= g:
                free[i] -= g
                break
        else:
            return False
    return True


def _classes_routable(demand_req_per_s: dict[str, float], replicas: list[tuple[int, dict[str, float]]],
                      usable: float) -> bool:
    """Whether one window's class demand can be routed onto the replicas with additive load.

    ``demand_req_per_s``: {class: req/s}; ``replicas``: [(replica count, {class: req/s one replica sustains of that
    class alone})]; ``usable``: 1 - margin. Feasibility LP (scipy's linprog, independent of the solvers' models):
    x[r,c] >= 0 req/s of class c on option r with Σ_r x[r,c] >= demand_c (less REL_TOL) and Σ_c x[r,c] / cap[r,c]
    <= usable × count_r.
    """
    cells = [(r, c) for r, (count, caps) in enumerate(replicas) if count for c in caps if c in demand_req_per_s]
    classes = [c for c, d in demand_req_per_s.items() if d > ABS_TOL]
    if not classes:
        return True
    if not cells:
        return False
    a = np.zeros((len(classes) + len(replicas), len(cells)))
    b = np.zeros(len(classes) + len(replicas))
    for i, c in enumerate(classes):
        b[i] = -(demand_req_per_s[c] * (1 - REL_TOL) - ABS_TOL)
        for j, (_r, cc) in enumerate(cells):
            if cc == c:
                a[i, j] = -1.0
    for r, (count, caps) in enumerate(replicas):
        b[len(classes) + r] = usable * count
        for j, (rr, c) in enumerate(cells):
            if rr == r:
                a[len(classes) + r, j] = 1.0 / caps[c]
    res = linprog(np.zeros(len(cells)), A_ub=a, b_ub=b, bounds=(0, None), method="highs")
    return bool(res.status == 0)


def _least_class_unserved(demand_req_per_s: dict[str, float], replicas: list[tuple[int, dict[str, float]]],
                          usable: float) -> float:
    """Least total req/s of one window's class demand the replicas leave unserved (same data as
    :func:`_classes_routable`): Σ demand - max Σ x[r,c] with Σ_r x[r,c] <= demand_c and the additive load
    Σ_c x[r,c] / cap[r,c] <= usable × count_r (scipy's linprog)."""
    cells = [(r, c) for r, (count, caps) in enumerate(replicas) if count for c in caps if c in demand_req_per_s]
    total = sum(demand_req_per_s.values())
    if not cells:
        return total
    classes = list(demand_req_per_s)
    a = np.zeros((len(classes) + len(replicas), len(cells)))
    b = np.zeros(len(classes) + len(replicas))
    for i, c in enumerate(classes):
        b[i] = demand_req_per_s[c]
        for j, (_r, cc) in enumerate(cells):
            a[i, j] = 1.0 if cc == c else 0.0
    for r, (count, caps) in enumerate(replicas):
        b[len(classes) + r] = usable * count
        for j, (rr, c) in enumerate(cells):
            if rr == r:
                a[len(classes) + r, j] = 1.0 / caps[c]
    res = linprog(-np.ones(len(cells)), A_ub=a, b_ub=b, bounds=(0, None), method="highs")
    return total + float(res.fun or 0.0) if res.status == 0 else total


def _beyond_pool(key: tuple, counts: list[int] | tuple[int, ...], gpus_per_replica: int, pool: Pool) -> list[str]:
    """The violation (at most one: the first window) of an option whose replicas need more GPUs than its pool has
    in all, or []. Checked before any per-GPU list is built, so a count such as 10**300 is refused without
    allocating; the message names the option, the window and both figures, not the count's digits."""
    total = pool.nodes * pool.gpus_per_node
    for w, n in enumerate(counts):
        if n * gpus_per_replica > total:
            shown = f"{n}" if n < 10**9 else f"about 10^{len(str(n)) - 1}"
            return [f"{key} window {w}: {shown} replicas of {gpus_per_replica} GPUs each do not fit the {total} GPUs "
                    f"of pool {pool.id}; give at most {total // gpus_per_replica} replicas"]
    return []


def _banded_usd(monthly_gb: float, bands: list[tuple[float, float | None, float]]) -> float:
    """USD of ``monthly_gb`` GB in a month through ``bands`` [(from GB, to GB or None, USD/GB)], each band's rate on
    the GB inside it (written here again, apart from the objective's pricing)."""
    usd = 0.0
    for lo, hi, rate in bands:
        top = monthly_gb if hi is None else min(monthly_gb, hi)
        usd += max(0.0, top - lo) * rate
    return usd


def kv_egress_usd(problem: Problem, plan: Plan) -> float:
    """Egress over the horizon of the plan's KV flows, USD, recomputed independently: per route and window, req/s ×
    window seconds × (KV bytes, prompt bytes) per request; the GB of each egress table (cloud, route class, scope)
    summed and scaled to a 730-hour month (365/12 days), priced band by band, scaled back to the horizon."""
    horizon_h = problem.n_windows * problem.window_length_s / 3600.0
    to_month = (365.0 / 12.0 * 24.0) / horizon_h
    volume: dict[tuple[str, str, str], float] = {}
    bands: dict[tuple[str, str, str], list[tuple[float, float | None, float]]] = {}
    for r in problem.kv_routes:
        flows = plan.kv_flows_req_per_s.get((r.model, r.prefill_site, r.decode_site))
        if not flows:
            continue
        for nbytes, table in ((r.kv_bytes_per_request, r.kv_table), (r.prompt_bytes_per_request, r.prompt_table)):
            if table is None:
                continue
            k = (table.cloud, table.route_class, table.scope)
            volume[k] = volume.get(k, 0.0) + sum(flows) * problem.window_length_s * nbytes / 1e9 * to_month
            bands[k] = [(t.from_gb, t.to_gb, t.usd_per_gb) for t in table.tiers]
    return sum(_banded_usd(v, bands[k]) for k, v in volume.items()) / to_month


def _gpus_by_pool(problem: Problem, plan: Plan) -> dict[str, list[int]]:
    """{pool id: GPUs in use in each window}: replicas' tp × pp, prefill/decode replicas' tp and the shared GPUs,
    counted here (not by plan.py)."""
    out = {p.id: [0] * problem.n_windows for p in problem.pools}
    for key, counts in plan.replicas.items():
        for w, n in enumerate(counts):
            out[key[1]][w] += n * key[2] * key[3]
    for pkey, counts in plan.pd_replicas.items():  # (model, role, pool, tp, decode site)
        for w, n in enumerate(counts):
            out[pkey[2]][w] += n * pkey[3]
    for g in plan.shared:
        for w in range(problem.n_windows):
            out[g.pool][w] += 1
    return out


def plan_cost_usd(problem: Problem, plan: Plan) -> float:
    """Cost of ``plan`` over the horizon, USD, computed independently of ``evaluate``: GPU-hours × $/GPU-hour
    (shared GPUs all day), replica starts on the cyclic horizon (a rise from the previous window, the last window
    preceding the first) × start cost, and egress with each window's demand served at the origin first, then at
    the cheapest other sites (rate × request bytes × window seconds × $/GB), and each committed pool's commitment
    (the plan's, else its peak GPUs in a window) × its committed rate × every hour of the horizon."""
    hours = problem.window_length_s / 3600.0
    W = problem.n_windows
    usd = 0.0
    for pid, gpus in _gpus_by_pool(problem, plan).items():
        pool = next(p for p in problem.pools if p.id == pid)
        if pool.committed:
            usd += plan.commitments.get(pid, max(gpus)) * pool.committed_usd_per_gpu_hour * hours * W
    site_cap: dict[str, list[dict[str, float]]] = {m.name: [{} for _ in range(W)] for m in problem.models}
    for key, counts in plan.replicas.items():
        o = next(x for x in problem.options if x.key == key)
        pool = next(p for p in problem.pools if p.id == o.pool)
        usd += sum(counts) * o.tp * o.pp * pool.usd_per_gpu_hour * hours
        if W > 1:
            rises = sum(counts[w] - counts[w - 1] for w in range(W) if counts[w] > counts[w - 1])
            usd += rises * o.start_cost_usd
        for w, n in enumerate(counts):
            cell = site_cap[o.model][w]
            cell[pool.site] = cell.get(pool.site, 0.0) + n * o.capacity_req_per_s * (1 - problem.margin)
    for g in plan.shared:
        pool = next(p for p in problem.pools if p.id == g.pool)
        usd += pool.usd_per_gpu_hour * hours * W
        for mname, served in g.served_req_per_s.items():
            for w, f in enumerate(served):
                cell = site_cap[mname][w]
                cell[pool.site] = cell.get(pool.site, 0.0) + f
    for pkey, counts in plan.pd_replicas.items():  # prefill and decode replicas: GPU-hours and starts as above
        o = next(x for x in problem.pd_options if x.pd_key == pkey)
        pool = next(p for p in problem.pools if p.id == o.pool)
        usd += sum(counts) * o.tp * pool.usd_per_gpu_hour * hours
        if W > 1:
            usd += sum(counts[w] - counts[w - 1] for w in range(W) if counts[w] > counts[w - 1]) * o.start_cost_usd
    for (mname, _ps, ds), flows in plan.kv_flows_req_per_s.items():  # disaggregated demand is served at the decode site
        for w, f in enumerate(flows):
            site_cap[mname][w][ds] = site_cap[mname][w].get(ds, 0.0) + f
    usd += kv_egress_usd(problem, plan)
    for m in problem.models:
        u = plan.unserved_req_per_s.get(m.name)
        for w, d in enumerate(m.demand_req_per_s):
            d = d - u[w] if u else d  # egress is paid on the served demand only
            def rate(site: str, m=m) -> float:
                if m.origin_site is None or site == m.origin_site:
                    return 0.0
                return problem.egress_usd_per_gb[(m.origin_site, site)]
            left = d
            for site, c in sorted(site_cap[m.name][w].items(), key=lambda kv: (rate(kv[0]), kv[0] != m.origin_site)):
                if left <= 0:
                    break
                take = min(left, c)
                usd += take * problem.window_length_s * m.request_bytes / 1e9 * rate(site)
                left -= take
    return usd


def validate(problem: Problem, plan: Plan, *, check_objective: bool = True) -> ValidationReport:
    """Check ``plan`` against every constraint of ``problem``; returns a :class:`ValidationReport`.

    Checks: (1) keys and shapes; (2) SLO of every option used (its latency at capacity within the model's
    targets); (3) capacity: usable capacity covers demand in every window (for a model with request classes: a
    routing of every class onto its replicas with additive per-class load exists, checked by an LP); (4) shared
    GPUs: residency allowed, memory fits, compute share <= 1 - margin in every window, served rates >= 0;
    (5) inventory: in every window and pool the replicas' tp groups and the shared GPUs fit onto the pool's nodes;
    (6) replica floor and ceiling (decode replicas count); (7) the reported objective equals the recomputed cost,
    KV egress bands and commitments included (when the plan reports one); (8) a best-effort plan's unserved demand:
    known models, one value per window, 0 <= unserved <= demand, and (in (3)) served + unserved = demand: the
    capacity covers demand - unserved, and unserved is no more than the demand capacity leaves over; for a model
    with request classes, per class (``class_unserved_req_per_s``, summing to the model's): each class's demand less
    its unserved is routable, and the total unserved is no more than the least the replicas must leave (an LP);
    (9) disaggregated plans: prefill/decode keys and KV flows known and well shaped, the SLO of every prefill (TTFT
    with the KV transfer) and decode (TPOT) option used, each flow within its route's prefill capacity and each
    decode site's flows within its decode capacity (after the margin), the flows counted as served demand in (3)
    and their replicas in (5); (10) commitments: only for committed pools, whole GPUs within the pool, never below
    the pool's use in a window; (11) the spot fallback rule: in every window a spot pool's interruption rate × its
    GPUs in use fits in the GPUs its fallback pool leaves unused.
    """
    v: list[str] = []
    W = problem.n_windows
    opts = problem.option_by_key
    pools = problem.pool_by_id
    shares = problem.share_by_key
    models = problem.model_by_name
    tol_margin = 1 - problem.margin

    # (1) keys and shapes
    for key, counts in plan.replicas.items():
        if key not in opts:
            v.append(f"replica key {key} is not an option of the problem")
            continue
        if len(counts) != W:
            v.append(f"{key}: {len(counts)} windows, expected {W}")
        if any((not isinstance(n, int)) or n < 0 for n in counts):
            v.append(f"{key}: replica counts must be whole numbers >= 0, got {counts}")
        else:
            v += _beyond_pool(key, counts, opts[key].tp * opts[key].pp, pools[opts[key].pool])
    for i, g in enumerate(plan.shared):
        if g.pool not in pools:
            v.append(f"shared GPU {i}: unknown pool {g.pool}")
        for mname in g.models:
            if (mname, g.pool) not in shares:
                v.append(f"shared GPU {i} ({g.pool}): {mname} may not share a GPU there")
        for mname, served in g.served_req_per_s.items():
            if mname not in g.models:
                v.append(f"shared GPU {i}: serves {mname}, which is not resident")
            if len(served) != W:
                v.append(f"shared GPU {i}: {mname} has {len(served)} windows, expected {W}")
            if any(f < -ABS_TOL for f in served):
                v.append(f"shared GPU {i}: negative served rate for {mname}")
    # (9) prefill/decode replicas and KV flows: keys and shapes
    pd_opts = {o.pd_key: o for o in problem.pd_options}
    routes = {r.key: r for r in problem.kv_routes}
    for pkey, counts in plan.pd_replicas.items():
        if pkey not in pd_opts:
            v.append(f"prefill/decode key {pkey} is not an option of the problem")
        elif len(counts) != W or any((not isinstance(n, int)) or n < 0 for n in counts):
            v.append(f"{pkey}: {W} whole replica counts >= 0 expected, got {counts}")
        else:
            v += _beyond_pool(pkey, counts, pd_opts[pkey].tp, pools[pd_opts[pkey].pool])
    for rkey, flows in plan.kv_flows_req_per_s.items():
        if rkey not in routes:
            v.append(f"KV flow {rkey} is not a route of the problem")
        elif len(flows) != W or any(not (f >= -ABS_TOL) for f in flows):
            v.append(f"KV flow {rkey}: {W} rates >= 0 expected, got {flows}")
    # (8) unserved demand of a best-effort plan: shapes and range
    for name, row in plan.unserved_req_per_s.items():
        if name not in models:
            v.append(f"unserved demand of {name}, which is not a model of the problem")
        elif len(row) != W:
            v.append(f"unserved demand of {name}: {len(row)} windows, expected {W}")
        elif any(not (-ABS_TOL <= x <= d * (1 + REL_TOL) + ABS_TOL) for x, d in zip(row, models[name].demand_req_per_s,
                                                                                 strict=True)):
            v.append(f"unserved demand of {name} must be within [0, demand] in every window, got {row}")
    for (name, cls), row in plan.class_unserved_req_per_s.items():
        m = models.get(name)
        if m is None or cls not in m.classes:
            v.append(f"unserved demand of class {cls} of {name}, which is not a request class of the problem")
        elif len(row) != W or any(not (-ABS_TOL <= x <= m.classes[cls] * d * (1 + REL_TOL) + ABS_TOL)
                                  for x, d in zip(row, m.demand_req_per_s, strict=False)):
            v.append(f"unserved demand of class {cls} of {name}: {W} values within [0, the class's demand] "
                     f"expected, got {row}")
    for m in problem.models:
        by_class = [row for (name, _c), row in plan.class_unserved_req_per_s.items() if name == m.name]
        u = plan.unserved_req_per_s.get(m.name)
        if m.class_shares and (u is not None or by_class):
            summed = [sum(r[w] for r in by_class if len(r) == W) for w in range(W)]
            if u is None or len(u) != W or any(abs(a - b) > REL_TOL * max(1.0, b) + ABS_TOL
                                               for a, b in zip(summed, u, strict=False)):
                v.append(f"unserved demand of {m.name} (request classes) must be the sum of its classes' unserved "
                         f"demand (class_unserved_req_per_s) in every window")
    if v:
        return ValidationReport(tuple(v))

    # (2) SLO of every option used
    for key, counts in plan.replicas.items():
        o = opts[key]
        m = models[o.model]
        if any(counts) and (o.ttft_p95_s > m.ttft_p95_s * (1 + REL_TOL) or o.tpot_p95_s > m.tpot_p95_s * (1 + REL_TOL)):
            v.append(f"{key}: latency at capacity (TTFT {o.ttft_p95_s:.3f} s, TPOT {o.tpot_p95_s * 1e3:.1f} ms) "
                     f"misses the SLO (TTFT {m.ttft_p95_s:.3f} s, TPOT {m.tpot_p95_s * 1e3:.1f} ms)")
    for pkey, counts in plan.pd_replicas.items():
        o = pd_opts[pkey]
        m = models[o.model]
        late = o.ttft_p95_s > m.ttft_p95_s * (1 + REL_TOL) if o.role == "prefill" else (
            o.tpot_p95_s > m.tpot_p95_s * (1 + REL_TOL))
        if any(counts) and late:
            v.append(f"{pkey}: {o.role} latency at capacity (TTFT {o.ttft_p95_s:.3f} s incl. KV transfer "
                     f"{o.kv_transfer_s:.3f} s, TPOT {o.tpot_p95_s * 1e3:.1f} ms) misses the SLO")
    for g in plan.shared:
        for name in g.models:
            s = shares[(name, g.pool)]
            m = models[name]
            if s.ttft_p95_s > m.ttft_p95_s * (1 + REL_TOL) or s.tpot_p95_s > m.tpot_p95_s * (1 + REL_TOL):
                v.append(f"shared {name}@{g.pool}: latency at capacity misses the SLO")

    # (3) capacity covers demand
    cap = {m.name: [0.0] * W for m in problem.models}
    for key, counts in plan.replicas.items():
        o = opts[key]
        for w, n in enumerate(counts):
            cap[o.model][w] += n * o.capacity_req_per_s * tol_margin
    for g in plan.shared:
        for name, served in g.served_req_per_s.items():
            for w, f in enumerate(served):
                cap[name][w] += f
    # (3'') disaggregated: every KV flow has prefill capacity on its route, every decode site decode capacity for
    # all the flows into it; then the flows count as served demand
    site = {p.id: p.site for p in problem.pools}
    for w in range(W):
        pre: dict[tuple[str, str, str], float] = {}
        dec: dict[tuple[str, str], float] = {}
        for pkey, counts in plan.pd_replicas.items():
            o = pd_opts[pkey]
            if o.role == "prefill":
                k3 = (o.model, site[o.pool], o.decode_site)
                pre[k3] = pre.get(k3, 0.0) + counts[w] * o.capacity_req_per_s * tol_margin
            else:
                k2 = (o.model, site[o.pool])
                dec[k2] = dec.get(k2, 0.0) + counts[w] * o.capacity_req_per_s * tol_margin
        into: dict[tuple[str, str], float] = {}
        for (mname, ps, ds), flows in plan.kv_flows_req_per_s.items():
            if flows[w] > pre.get((mname, ps, ds), 0.0) * (1 + REL_TOL) + ABS_TOL:
                v.append(f"{mname} window {w}: KV flow {ps} -> {ds} {flows[w]:.3f} req/s > prefill capacity "
                         f"{pre.get((mname, ps, ds), 0.0):.3f} req/s")
            into[(mname, ds)] = into.get((mname, ds), 0.0) + flows[w]
            cap[mname][w] += flows[w]
        for (mname, ds), f in into.items():
            if f > dec.get((mname, ds), 0.0) * (1 + REL_TOL) + ABS_TOL:
                v.append(f"{mname} window {w}: {f:.3f} req/s decoded at {ds} > decode capacity "
                         f"{dec.get((mname, ds), 0.0):.3f} req/s")
    for m in problem.models:
        u = plan.unserved_req_per_s.get(m.name, (0.0,) * W)
        if m.class_shares:  # (3') request classes: each class routable with additive load on its model's replicas
            mine = [(counts, opts[key].class_capacity) for key, counts in plan.replicas.items() if key[0] == m.name]
            zero = (0.0,) * W
            for w, d in enumerate(m.demand_req_per_s):
                uc = {c: plan.class_unserved_req_per_s.get((m.name, c), zero)[w] for c, _ in m.class_shares}
                want = {c: share * d - uc[c] for c, share in m.class_shares}
                reps = [(counts[w], caps) for counts, caps in mine]
                if not _classes_routable(want, reps, tol_margin):
                    v.append(f"{m.name} window {w}: the replicas cannot serve every request class "
                             f"({', '.join(f'{c} {r:.3f} req/s' for c, r in want.items())}) within "
                             f"{tol_margin:.3f} of their per-class capacities")
                elif any(uc.values()):  # (8) no more unserved than the replicas must leave (an LP of its own)
                    least = _least_class_unserved({c: share * d for c, share in m.class_shares}, reps, tol_margin)
                    if sum(uc.values()) > least * (1 + REL_TOL) + ABS_TOL * len(uc):
                        v.append(f"{m.name} window {w}: {sum(uc.values()):.3f} req/s of its classes reported "
                                 f"unserved but the replicas can serve all but {least:.3f} req/s")
            continue
        for w, d in enumerate(m.demand_req_per_s):
            if cap[m.name][w] + u[w] < d * (1 - REL_TOL) - ABS_TOL:
                left = f" - unserved {u[w]:.3f}" if u[w] else ""
                v.append(f"{m.name} window {w}: usable capacity {cap[m.name][w]:.3f} req/s < demand {d:.3f}{left} "
                         "req/s")
            elif u[w] > max(0.0, d - cap[m.name][w]) * (1 + REL_TOL) + ABS_TOL:
                v.append(f"{m.name} window {w}: {u[w]:.3f} req/s reported unserved but the capacity "
                         f"{cap[m.name][w]:.3f} req/s leaves only {max(0.0, d - cap[m.name][w]):.3f} of the demand "
                         f"{d:.3f} req/s")

    # (4) shared GPUs: memory and compute share
    for i, g in enumerate(plan.shared):
        pool = pools[g.pool]
        mem = sum(shares[(name, g.pool)].memory_bytes for name in g.models)
        limit = pool.memory_bytes_per_gpu * problem.shared_memory_utilization
        k = problem.max_models_per_shared_gpu
        if k is not None and len(g.models) > k:
            v.append(f"shared GPU {i} ({g.pool}): {len(g.models)} resident models > {k} allowed")
        if mem > limit * (1 + REL_TOL):
            v.append(f"shared GPU {i} ({g.pool}): resident memory {mem / 1e9:.1f} GB > {limit / 1e9:.1f} GB")
        for w in range(W):
            share = sum(served[w] / shares[(name, g.pool)].capacity_req_per_s
                        for name, served in g.served_req_per_s.items())
            if share > tol_margin * (1 + REL_TOL) + ABS_TOL:
                v.append(f"shared GPU {i} ({g.pool}) window {w}: compute share {share:.3f} > {tol_margin:.3f}")

    # (5) inventory with tp groups inside nodes
    for pid, pool in pools.items():
        n_shared = sum(1 for g in plan.shared if g.pool == pid)
        for w in range(W):
            groups = [1] * (n_shared + pool.reserved_gpus)
            for key, counts in plan.replicas.items():
                o = opts[key]
                if o.pool == pid and counts[w]:
                    groups += [o.tp] * (o.pp * counts[w])
            for pkey, counts in plan.pd_replicas.items():
                if pd_opts[pkey].pool == pid and counts[w]:
                    groups += [pd_opts[pkey].tp] * counts[w]
            if sum(groups) > pool.nodes * pool.gpus_per_node or not _ffd_fits(groups, pool.nodes, pool.gpus_per_node):
                v.append(f"{pid} window {w}: {sum(groups)} GPUs in groups {sorted(set(groups))} do not fit "
                         f"{pool.nodes} nodes × {pool.gpus_per_node} GPUs")

    # (10) commitments: only committed pools, whole GPUs within the pool, at least the use in every window
    # (11) spot fallback: interruption_rate × spot GPUs in use <= GPUs the fallback pool leaves unused
    use = _gpus_by_pool(problem, plan)
    for pid, c in plan.commitments.items():
        if pid not in pools or not pools[pid].committed:
            v.append(f"commitment of {c} GPUs for {pid}, which is not a committed pool of the problem")
        elif not isinstance(c, int) or not 0 <= c <= pools[pid].gpus:
            v.append(f"{pid}: commitment {c!r} must be a whole number of GPUs within the pool's {pools[pid].gpus}")
        elif max(use[pid]) > c:
            w = use[pid].index(max(use[pid]))
            v.append(f"{pid} window {w}: {use[pid][w]} GPUs in use > the {c} GPUs committed")
    for pid, pool in pools.items():
        if pool.fallback_pool is None or not pool.interruption_rate:
            continue
        fb = pools[pool.fallback_pool]
        for w in range(W):
            need = pool.interruption_rate * use[pid][w]
            free = fb.gpus - use[fb.id][w]
            if need > free + ABS_TOL:
                v.append(f"{pid} window {w}: fallback headroom {free} GPUs of {fb.id} < interruption rate "
                         f"{pool.interruption_rate:g} × {use[pid][w]} spot GPUs = {need:.2f}")

    # (6) replica floor and ceiling
    resident = {m.name: sum(1 for g in plan.shared if m.name in g.models) for m in problem.models}
    for m in problem.models:
        for w in range(W):
            n = resident[m.name] + sum(c[w] for k, c in plan.replicas.items() if k[0] == m.name) + sum(
                c[w] for k, c in plan.pd_replicas.items() if k[0] == m.name and k[1] == "decode")
            if n < m.min_replicas:
                v.append(f"{m.name} window {w}: {n} replicas < floor {m.min_replicas}")
            if m.max_replicas is not None and n > m.max_replicas:
                v.append(f"{m.name} window {w}: {n} replicas > ceiling {m.max_replicas}")

    # (7) objective, recomputed here from the decisions, the prices and the start rule (no code shared with
    # evaluate(), whose value the solvers report)
    if check_objective and plan.objective_usd is not None and not v:
        total = plan_cost_usd(problem, plan)
        if abs(total - plan.objective_usd) > 1e-4 * max(1.0, abs(total)) + 0.01:
            v.append(f"reported objective ${plan.objective_usd:,.2f} differs from the recomputed cost ${total:,.2f}")
    return ValidationReport(tuple(v))
