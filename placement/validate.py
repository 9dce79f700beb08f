"""Independent feasibility check of a plan, in plain Python, with no solver.

``validate(problem, plan)`` re-derives every constraint from the plan's decisions, one check per constraint of
the formulation, numbered as in :mod:`fleetplan.solvers.milp` and run in that order: once the decisions are well
formed (keys of the problem, one value per window, in their domains), the SLO of every option used, (1)-(2)
capacity against demand (after the safety margin), (3) the compute share and (5) the memory of every shared GPU,
(6) inventory per pool and window with tensor-parallel groups placed inside nodes (first-fit decreasing onto the
pool's nodes), (7) replica floor and ceiling, (10) residents per shared GPU, (12) request classes, (13) prefill and
decode capacity, (15) commitments, (16) the spot fallback rule, (17) shared GPUs per pool, (18) the spread of a
model's capacity over sites and pools, and last the reported objective against the cost recomputed here. It
shares no code with the solvers' models or objective.
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


def _site_capacity(problem: Problem, plan: Plan) -> dict[str, list[dict[str, float]]]:
    """{model: per window {site: usable req/s}}: dedicated replicas' capacity after the margin, the shared GPUs'
    served rates and the KV flows decoded at a site (counted here, not by plan.py)."""
    pools = {p.id: p for p in problem.pools}
    site_cap: dict[str, list[dict[str, float]]] = {m.name: [{} for _ in range(problem.n_windows)]
                                                   for m in problem.models}
    options = {x.key: x for x in problem.options}  # one dict, not a scan per row (quadratic at 2,000 models)
    for key, counts in plan.replicas.items():
        o = options[key]
        site = pools[o.pool].site
        for w, n in enumerate(counts):
            cell = site_cap[o.model][w]
            cell[site] = cell.get(site, 0.0) + n * o.capacity_req_per_s * (1 - problem.margin)
    for g in plan.shared:
        site = pools[g.pool].site
        for mname, served in g.served_req_per_s.items():
            for w, f in enumerate(served):
                cell = site_cap[mname][w]
                cell[site] = cell.get(site, 0.0) + f
    for (mname, _ps, ds), flows in plan.kv_flows_req_per_s.items():  # disaggregated demand is served at the decode site
        for w, f in enumerate(flows):
            site_cap[mname][w][ds] = site_cap[mname][w].get(ds, 0.0) + f
    return site_cap


def _rises(counts: tuple[int, ...] | list[int]) -> int:
    """Replicas started over the cyclic horizon: each rise from the previous window (the last precedes the first)."""
    W = len(counts)
    return sum(counts[w] - counts[w - 1] for w in range(W) if counts[w] > counts[w - 1])


def _gpu_and_start_terms(problem: Problem, plan: Plan) -> list[float]:
    """USD terms of :func:`plan_cost_usd` for the GPUs and starts: each committed pool's commitment (the plan's,
    else its peak GPUs) × committed rate × every hour; per replica option GPU-hours × price, then its starts ×
    start cost; each shared GPU all day; per prefill/decode option GPU-hours, then its starts."""
    hours = problem.window_length_s / 3600.0
    W = problem.n_windows
    pools = {p.id: p for p in problem.pools}
    terms = [plan.commitments.get(pid, max(gpus)) * pools[pid].committed_usd_per_gpu_hour * hours * W
             for pid, gpus in _gpus_by_pool(problem, plan).items() if pools[pid].committed]
    options = {x.key: x for x in problem.options}
    pd_options = {x.pd_key: x for x in problem.pd_options}
    for key, counts in plan.replicas.items():
        o = options[key]
        terms.append(sum(counts) * o.tp * o.pp * pools[o.pool].usd_per_gpu_hour * hours)
        if W > 1:
            terms.append(_rises(counts) * o.start_cost_usd)
    terms += [pools[g.pool].usd_per_gpu_hour * hours * W for g in plan.shared]
    for pkey, counts in plan.pd_replicas.items():
        po = pd_options[pkey]
        terms.append(sum(counts) * po.tp * pools[po.pool].usd_per_gpu_hour * hours)
        if W > 1:
            terms.append(_rises(counts) * po.start_cost_usd)
    return terms


def _request_egress_terms(problem: Problem, plan: Plan) -> list[float]:
    """USD terms of :func:`plan_cost_usd` for the requests' egress: each window's served demand (demand less the
    plan's unserved) at the origin first, then at the cheapest other sites, × request bytes × window seconds ×
    $/GB."""
    site_cap = _site_capacity(problem, plan)
    terms = []
    for m in problem.models:
        u = plan.unserved_req_per_s.get(m.name)

        def rate(site: str, m=m) -> float:
            if m.origin_site is None or site == m.origin_site:
                return 0.0
            return problem.egress_usd_per_gb[(m.origin_site, site)]

        for w, d in enumerate(m.demand_req_per_s):
            left = d - u[w] if u else d  # egress is paid on the served demand only
            for site, c in sorted(site_cap[m.name][w].items(), key=lambda kv: (rate(kv[0]), kv[0] != m.origin_site)):
                if left <= 0:
                    break
                take = min(left, c)
                terms.append(take * problem.window_length_s * m.request_bytes / 1e9 * rate(site))
                left -= take
    return terms


def plan_cost_usd(problem: Problem, plan: Plan) -> float:
    """Cost of ``plan`` over the horizon, USD, computed independently of ``evaluate``: GPU-hours × $/GPU-hour
    (shared GPUs all day), replica starts on the cyclic horizon (a rise from the previous window, the last window
    preceding the first) × start cost, and egress with each window's demand served at the origin first, then at
    the cheapest other sites (rate × request bytes × window seconds × $/GB), and each committed pool's commitment
    (the plan's, else its peak GPUs in a window) × its committed rate × every hour of the horizon."""
    return sum([*_gpu_and_start_terms(problem, plan), kv_egress_usd(problem, plan),
                *_request_egress_terms(problem, plan)])


# The plan's decisions are well formed: keys of the problem, one value per window, in their domains. Checked first:
# the checks by constraint below read the problem's records by these keys.

def _replica_shapes(problem: Problem, plan: Plan) -> list[str]:
    """Dedicated replicas: options of the problem, one whole count >= 0 per window, within the pool's GPUs."""
    v: list[str] = []
    W, opts, pools = problem.n_windows, problem.option_by_key, problem.pool_by_id
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
    return v


def _shared_shapes(problem: Problem, plan: Plan) -> list[str]:
    """Shared GPUs: in a pool of the problem, residents allowed to share a GPU there, one served rate >= 0 per
    window."""
    v: list[str] = []
    W, pools, shares = problem.n_windows, problem.pool_by_id, problem.share_by_key
    for i, g in enumerate(plan.shared):
        if g.pool not in pools:
            v.append(f"shared GPU {i}: unknown pool {g.pool}")
        for mname in g.models:
            if (mname, g.pool) not in shares:
                v.append(f"shared GPU {i} ({g.pool}): {mname} may not share a GPU there")
        for mname, served in g.served_req_per_s.items():
            if len(served) != W:
                v.append(f"shared GPU {i}: {mname} has {len(served)} windows, expected {W}")
            if any(f < -ABS_TOL for f in served):
                v.append(f"shared GPU {i}: negative served rate for {mname}")
    return v


def _c4_only_residents_serve(problem: Problem, plan: Plan) -> list[str]:
    """(4) A shared GPU serves only its residents (a served rate keyed by another model is a key error)."""
    return [f"shared GPU {i}: serves {mname}, which is not resident"
            for i, g in enumerate(plan.shared) for mname in g.served_req_per_s if mname not in g.models]


def _pd_shapes(problem: Problem, plan: Plan) -> list[str]:
    """Prefill/decode replicas: options of the problem, one whole count >= 0 per window, within the pool's GPUs;
    KV flows: routes of the problem, one rate >= 0 per window."""
    v: list[str] = []
    W, pools = problem.n_windows, problem.pool_by_id
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
    return v


def _unserved_shapes(problem: Problem, plan: Plan) -> list[str]:
    """A best-effort plan's unserved demand: known models, one value per window within [0, the demand]."""
    v: list[str] = []
    W, models = problem.n_windows, problem.model_by_name
    for name, row in plan.unserved_req_per_s.items():
        if name not in models:
            v.append(f"unserved demand of {name}, which is not a model of the problem")
        elif len(row) != W:
            v.append(f"unserved demand of {name}: {len(row)} windows, expected {W}")
        elif any(not (-ABS_TOL <= x <= d * (1 + REL_TOL) + ABS_TOL) for x, d in zip(row, models[name].demand_req_per_s,
                                                                                 strict=True)):
            v.append(f"unserved demand of {name} must be within [0, demand] in every window, got {row}")
    return v


def _class_unserved_shapes(problem: Problem, plan: Plan) -> list[str]:
    """A best-effort plan's unserved demand by request class: known classes, one value per window within [0, the
    class's demand], and a class model's unserved demand the sum of its classes'."""
    v: list[str] = []
    W, models = problem.n_windows, problem.model_by_name
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
    return v


# The checks by constraint, on a well-formed plan.

def _slo(problem: Problem, plan: Plan) -> list[str]:
    """The SLO of every option used: its latency at capacity within the model's targets (prefill: TTFT with the KV
    transfer; decode: TPOT). The MILP only has options within the SLO."""
    v: list[str] = []
    opts, shares, models = problem.option_by_key, problem.share_by_key, problem.model_by_name
    pd_opts = {o.pd_key: o for o in problem.pd_options}
    for key, counts in plan.replicas.items():
        o = opts[key]
        m = models[o.model]
        if any(counts) and (o.ttft_p95_s > m.ttft_p95_s * (1 + REL_TOL) or o.tpot_p95_s > m.tpot_p95_s * (1 + REL_TOL)):
            v.append(f"{key}: latency at capacity (TTFT {o.ttft_p95_s:.3f} s, TPOT {o.tpot_p95_s * 1e3:.1f} ms) "
                     f"misses the SLO (TTFT {m.ttft_p95_s:.3f} s, TPOT {m.tpot_p95_s * 1e3:.1f} ms)")
    for pkey, counts in plan.pd_replicas.items():
        po = pd_opts[pkey]
        m = models[po.model]
        late = po.ttft_p95_s > m.ttft_p95_s * (1 + REL_TOL) if po.role == "prefill" else (
            po.tpot_p95_s > m.tpot_p95_s * (1 + REL_TOL))
        if any(counts) and late:
            v.append(f"{pkey}: {po.role} latency at capacity (TTFT {po.ttft_p95_s:.3f} s incl. KV transfer "
                     f"{po.kv_transfer_s:.3f} s, TPOT {po.tpot_p95_s * 1e3:.1f} ms) misses the SLO")
    for g in plan.shared:
        for name in g.models:
            s = shares[(name, g.pool)]
            m = models[name]
            if s.ttft_p95_s > m.ttft_p95_s * (1 + REL_TOL) or s.tpot_p95_s > m.tpot_p95_s * (1 + REL_TOL):
                v.append(f"shared {name}@{g.pool}: latency at capacity misses the SLO")
    return v


def _usable_capacity(problem: Problem, plan: Plan) -> dict[str, list[float]]:
    """{model: usable req/s per window}: replicas' capacity after the margin, the shared GPUs' served rates and
    the KV flows (disaggregated demand served)."""
    W, opts = problem.n_windows, problem.option_by_key
    cap = {m.name: [0.0] * W for m in problem.models}
    for key, counts in plan.replicas.items():
        o = opts[key]
        for w, n in enumerate(counts):
            cap[o.model][w] += n * o.capacity_req_per_s * (1 - problem.margin)
    for g in plan.shared:
        for name, served in g.served_req_per_s.items():
            for w, f in enumerate(served):
                cap[name][w] += f
    for (mname, _ps, _ds), flows in plan.kv_flows_req_per_s.items():
        for w, f in enumerate(flows):
            cap[mname][w] += f
    return cap


def _c1_c2_coverage(problem: Problem, plan: Plan) -> list[str]:
    """(1)-(2) In every window the usable capacity of a model without request classes (:func:`_usable_capacity`,
    summed over its sites: the site split only prices egress, which the cost check reprices) covers its demand
    less its unserved demand, and the unserved demand is no more than the demand the capacity leaves over."""
    v: list[str] = []
    cap = _usable_capacity(problem, plan)
    for m in problem.models:
        if m.class_shares:
            continue  # (12)
        u = plan.unserved_req_per_s.get(m.name, (0.0,) * problem.n_windows)
        for w, d in enumerate(m.demand_req_per_s):
            if cap[m.name][w] + u[w] < d * (1 - REL_TOL) - ABS_TOL:
                left = f" - unserved {u[w]:.3f}" if u[w] else ""
                v.append(f"{m.name} window {w}: usable capacity {cap[m.name][w]:.3f} req/s < demand {d:.3f}{left} "
                         "req/s")
            elif u[w] > max(0.0, d - cap[m.name][w]) * (1 + REL_TOL) + ABS_TOL:
                v.append(f"{m.name} window {w}: {u[w]:.3f} req/s reported unserved but the capacity "
                         f"{cap[m.name][w]:.3f} req/s leaves only {max(0.0, d - cap[m.name][w]):.3f} of the demand "
                         f"{d:.3f} req/s")
    return v


def _c3_shared_compute(problem: Problem, plan: Plan) -> list[str]:
    """(3) The compute share of every shared GPU within 1 - margin in every window."""
    v: list[str] = []
    shares, usable = problem.share_by_key, 1 - problem.margin
    for i, g in enumerate(plan.shared):
        for w in range(problem.n_windows):
            share = sum(served[w] / shares[(name, g.pool)].capacity_req_per_s
                        for name, served in g.served_req_per_s.items())
            if share > usable * (1 + REL_TOL) + ABS_TOL:
                v.append(f"shared GPU {i} ({g.pool}) window {w}: compute share {share:.3f} > {usable:.3f}")
    return v


def _c5_shared_memory(problem: Problem, plan: Plan) -> list[str]:
    """(5) The residents' memory of every shared GPU within its memory × the shared-memory utilization (bytes)."""
    v: list[str] = []
    pools, shares = problem.pool_by_id, problem.share_by_key
    for i, g in enumerate(plan.shared):
        mem = sum(shares[(name, g.pool)].memory_bytes for name in g.models)
        limit = pools[g.pool].memory_bytes_per_gpu * problem.shared_memory_utilization
        if mem > limit * (1 + REL_TOL):
            v.append(f"shared GPU {i} ({g.pool}): resident memory {mem / 1e9:.1f} GB > {limit / 1e9:.1f} GB")
    return v


def _c6_inventory_on_nodes(problem: Problem, plan: Plan) -> list[str]:
    """(6) In every window and pool the replicas' tensor-parallel groups (pp of them per replica), the
    prefill/decode replicas' groups, the shared GPUs and the pool's reserved GPUs fit onto the pool's nodes, each
    group inside one node (first-fit decreasing): stronger than the MILP's GPU count, which implies it for
    power-of-two groups (module docstring of the MILP)."""
    v: list[str] = []
    opts = problem.option_by_key
    pd_opts = {o.pd_key: o for o in problem.pd_options}
    for pid, pool in problem.pool_by_id.items():
        n_shared = sum(1 for g in plan.shared if g.pool == pid)
        for w in range(problem.n_windows):
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
    return v


def _c7_replica_floor_ceiling(problem: Problem, plan: Plan) -> list[str]:
    """(7) In every window a model's replicas, shared residencies and decode replicas within its floor and
    ceiling."""
    v: list[str] = []
    W = problem.n_windows
    count = {m.name: [0] * W for m in problem.models}  # per model and window, summed in one pass over the plan
    for g in plan.shared:
        for name in g.models:
            if name in count:
                count[name] = [n + 1 for n in count[name]]
    rows = [(k[0], c) for k, c in plan.replicas.items()]
    rows += [(k[0], c) for k, c in plan.pd_replicas.items() if k[1] == "decode"]
    for name, c in rows:
        if name in count:
            count[name] = [n + x for n, x in zip(count[name], c, strict=False)]
    for m in problem.models:
        for w in range(W):
            n = count[m.name][w]
            if n < m.min_replicas:
                v.append(f"{m.name} window {w}: {n} replicas < floor {m.min_replicas}")
            if m.max_replicas is not None and n > m.max_replicas:
                v.append(f"{m.name} window {w}: {n} replicas > ceiling {m.max_replicas}")
    return v


def _c10_residents_per_gpu(problem: Problem, plan: Plan) -> list[str]:
    """(10) At most max_models_per_shared_gpu residents on every shared GPU, when set."""
    k = problem.max_models_per_shared_gpu
    return [f"shared GPU {i} ({g.pool}): {len(g.models)} resident models > {k} allowed"
            for i, g in enumerate(plan.shared) if k is not None and len(g.models) > k]


def _c17_shared_gpus_per_pool(problem: Problem, plan: Plan) -> list[str]:
    """(17) At most max_shared_gpus_per_pool shared GPUs in every pool (0: none)."""
    k = problem.max_shared_gpus_per_pool
    per_pool: dict[str, int] = {}
    for g in plan.shared:
        per_pool[g.pool] = per_pool.get(g.pool, 0) + 1
    return [f"pool {pid}: {n} shared GPUs > max_shared_gpus_per_pool {k}" for pid, n in sorted(per_pool.items())
            if n > k]


def _c12_request_classes(problem: Problem, plan: Plan) -> list[str]:
    """(12) In every window a model with request classes can route each class's demand less its unserved demand
    onto its replicas with additive per-class load (an LP, :func:`_classes_routable`), and the unserved demand of
    its classes is no more than the least its replicas must leave (an LP of its own,
    :func:`_least_class_unserved`)."""
    v: list[str] = []
    opts, usable = problem.option_by_key, 1 - problem.margin
    zero = (0.0,) * problem.n_windows
    for m in problem.models:
        if not m.class_shares:
            continue
        mine = [(counts, opts[key].class_capacity) for key, counts in plan.replicas.items() if key[0] == m.name]
        for w, d in enumerate(m.demand_req_per_s):
            uc = {c: plan.class_unserved_req_per_s.get((m.name, c), zero)[w] for c, _ in m.class_shares}
            want = {c: share * d - uc[c] for c, share in m.class_shares}
            reps = [(counts[w], caps) for counts, caps in mine]
            if not _classes_routable(want, reps, usable):
                v.append(f"{m.name} window {w}: the replicas cannot serve every request class "
                         f"({', '.join(f'{c} {r:.3f} req/s' for c, r in want.items())}) within "
                         f"{usable:.3f} of their per-class capacities")
            elif any(uc.values()):
                least = _least_class_unserved({c: share * d for c, share in m.class_shares}, reps, usable)
                if sum(uc.values()) > least * (1 + REL_TOL) + ABS_TOL * len(uc):
                    v.append(f"{m.name} window {w}: {sum(uc.values()):.3f} req/s of its classes reported "
                             f"unserved but the replicas can serve all but {least:.3f} req/s")
    return v


def _c13_disaggregated(problem: Problem, plan: Plan) -> list[str]:
    """(13) In every window each KV flow within its route's prefill capacity (13a), and the flows decoded at a site
    within the decode capacity there (13b), after the margin. The flows count as served demand in (1)-(2)."""
    v: list[str] = []
    usable = 1 - problem.margin
    pd_opts = {o.pd_key: o for o in problem.pd_options}
    site = {p.id: p.site for p in problem.pools}
    for w in range(problem.n_windows):
        pre: dict[tuple[str, str, str], float] = {}
        dec: dict[tuple[str, str], float] = {}
        for pkey, counts in plan.pd_replicas.items():
            o = pd_opts[pkey]
            if o.role == "prefill":
                k3 = (o.model, site[o.pool], o.decode_site)
                pre[k3] = pre.get(k3, 0.0) + counts[w] * o.capacity_req_per_s * usable
            else:
                k2 = (o.model, site[o.pool])
                dec[k2] = dec.get(k2, 0.0) + counts[w] * o.capacity_req_per_s * usable
        into: dict[tuple[str, str], float] = {}
        for (mname, ps, ds), flows in plan.kv_flows_req_per_s.items():
            if flows[w] > pre.get((mname, ps, ds), 0.0) * (1 + REL_TOL) + ABS_TOL:
                v.append(f"{mname} window {w}: KV flow {ps} -> {ds} {flows[w]:.3f} req/s > prefill capacity "
                         f"{pre.get((mname, ps, ds), 0.0):.3f} req/s")
            into[(mname, ds)] = into.get((mname, ds), 0.0) + flows[w]
        for (mname, ds), f in into.items():
            if f > dec.get((mname, ds), 0.0) * (1 + REL_TOL) + ABS_TOL:
                v.append(f"{mname} window {w}: {f:.3f} req/s decoded at {ds} > decode capacity "
                         f"{dec.get((mname, ds), 0.0):.3f} req/s")
    return v


def _c15_commitments(problem: Problem, plan: Plan) -> list[str]:
    """(15) Commitments only for committed pools, whole GPUs within the pool, never below the pool's use in a
    window."""
    v: list[str] = []
    pools = problem.pool_by_id
    use = _gpus_by_pool(problem, plan)
    for pid, c in plan.commitments.items():
        if pid not in pools or not pools[pid].committed:
            v.append(f"commitment of {c} GPUs for {pid}, which is not a committed pool of the problem")
        elif not isinstance(c, int) or not 0 <= c <= pools[pid].gpus:
            v.append(f"{pid}: commitment {c!r} must be a whole number of GPUs within the pool's {pools[pid].gpus}")
        elif max(use[pid]) > c:
            w = use[pid].index(max(use[pid]))
            v.append(f"{pid} window {w}: {use[pid][w]} GPUs in use > the {c} GPUs committed")
    return v


def _c16_spot_fallback(problem: Problem, plan: Plan) -> list[str]:
    """(16) In every window a spot pool's interruption rate × its GPUs in use fits in the GPUs its fallback pool
    leaves unused."""
    v: list[str] = []
    pools = problem.pool_by_id
    use = _gpus_by_pool(problem, plan)
    for pid, pool in pools.items():
        if pool.fallback_pool is None or not pool.interruption_rate:
            continue
        fb = pools[pool.fallback_pool]
        for w in range(problem.n_windows):
            need = pool.interruption_rate * use[pid][w]
            free = fb.gpus - use[fb.id][w]
            if need > free + ABS_TOL:
                v.append(f"{pid} window {w}: fallback headroom {free} GPUs of {fb.id} < interruption rate "
                         f"{pool.interruption_rate:g} × {use[pid][w]} spot GPUs = {need:.2f}")
    return v


def _c18_spread(problem: Problem, plan: Plan) -> list[str]:
    """(18) In every window a model with a spread bound (``ModelSpec.max_share_per_site`` / ``_per_pool``) holds
    at most that share of its capacity at one site (in one pool). Capacity, from its definition: (1 - margin) ×
    capacity_req_per_s × replicas of each dedicated option, plus (1 - margin) × the model's share-option capacity
    for each shared GPU it resides on (what that GPU serves it alone); summed per site (per pool) and over all."""
    v: list[str] = []
    usable = 1 - problem.margin
    pools = problem.pool_by_id
    bound = {m.name: m.spread_bounds for m in problem.models}
    for w in range(problem.n_windows):
        per: dict[tuple[str, str, str], float] = {}  # (model, 'site' | 'pool', place) -> req/s
        for key, counts in plan.replicas.items():
            if not bound.get(key[0]) or not counts[w]:
                continue
            o = problem.option_by_key[key]
            c = counts[w] * o.capacity_req_per_s * usable
            per[(key[0], "site", pools[o.pool].site)] = per.get((key[0], "site", pools[o.pool].site), 0.0) + c
            per[(key[0], "pool", o.pool)] = per.get((key[0], "pool", o.pool), 0.0) + c
        for g in plan.shared:
            for mname in g.models:
                if bound.get(mname):
                    c = problem.share_by_key[(mname, g.pool)].capacity_req_per_s * usable
                    site = pools[g.pool].site
                    per[(mname, "site", site)] = per.get((mname, "site", site), 0.0) + c
                    per[(mname, "pool", g.pool)] = per.get((mname, "pool", g.pool), 0.0) + c
        for mname, bounds in bound.items():
            for level, share in bounds.items():
                mine = {place: c for (mm, lv, place), c in per.items() if mm == mname and lv == level}
                total = sum(mine.values())
                for place, c in sorted(mine.items()):
                    if c > share * total * (1 + REL_TOL) + ABS_TOL:
                        v.append(f"{mname} window {w}: {c:.3f} of its {total:.3f} req/s of capacity ({c / total:.1%}) "
                                 f"is in {level} {place}, above its spread max_share_per_{level} {share:g}")
    return v


def _cost(problem: Problem, plan: Plan) -> list[str]:
    """The reported objective equals the cost recomputed here (:func:`plan_cost_usd`, no code shared with
    ``evaluate``, whose value the solvers report), KV egress bands and commitments included."""
    total = plan_cost_usd(problem, plan)
    if plan.objective_usd is not None and abs(total - plan.objective_usd) > 1e-4 * max(1.0, abs(total)) + 0.01:
        per_day = 24.0 / problem.horizon_hours  # the unit a plan file and the table show
        return [f"reported objective ${plan.objective_usd * per_day:,.2f}/day differs from the recomputed cost "
                f"${total * per_day:,.2f}/day"]
    return []


#: The well-formedness checks of :func:`validate`, in order.
SHAPE_CHECKS = (_replica_shapes, _shared_shapes, _c4_only_residents_serve, _pd_shapes, _unserved_shapes,
                _class_unserved_shapes)
#: The checks by constraint of :func:`validate`, in the order of the MILP's numbering
#: (:mod:`fleetplan.solvers.milp`), after the SLO.
CONSTRAINT_CHECKS = (_slo, _c1_c2_coverage, _c3_shared_compute, _c5_shared_memory, _c6_inventory_on_nodes,
                     _c7_replica_floor_ceiling, _c10_residents_per_gpu, _c12_request_classes, _c13_disaggregated,
                     _c15_commitments, _c16_spot_fallback, _c17_shared_gpus_per_pool, _c18_spread)


def validate(problem: Problem, plan: Plan, *, check_objective: bool = True) -> ValidationReport:
    """Check ``plan`` against every constraint of ``problem``; returns a :class:`ValidationReport` whose
    violations (messages naming the key, window and figures) come in the order of the checks.

    First the decisions must be well formed (SHAPE_CHECKS; with any violation here the report stops): replicas
    and prefill/decode replicas are options of the problem with one whole count >= 0 per window within the pool's
    GPUs; shared GPUs are in known pools with residents allowed there, one served rate >= 0 per window, served
    only for residents ((4)); KV flows are routes of the problem with one rate >= 0 per window; a best-effort
    plan's unserved demand is known, one value per window within [0, demand], a class model's the sum of its
    classes'. Then one check per constraint of the MILP's numbering (CONSTRAINT_CHECKS): the SLO of every option
    used; (1)-(2) coverage with served + unserved = demand; (3) compute share; (5) memory of the shared GPUs;
    (6) inventory with tensor-parallel groups placed on the pools' nodes; (7) replica floor and ceiling (decode
    replicas count); (10) residents per shared GPU; (12) request classes routable with additive load (an LP);
    (13) prefill and decode capacity behind the KV flows; (15) commitments; (16) the spot fallback rule; (17) at
    most max_shared_gpus_per_pool shared GPUs per pool; (18) the spread: at most a model's bound of its capacity at
    one site or in one pool. Last,
    with ``check_objective`` and when nothing else is violated, the reported objective (when the plan reports one)
    against the recomputed cost. (8) starts and (14) KV egress bands are costs, repriced by the cost check; (9)
    and (11) only cut the solvers' search.
    """
    v = [msg for check in SHAPE_CHECKS for msg in check(problem, plan)]
    if v:
        return ValidationReport(tuple(v))
    v = [msg for check in CONSTRAINT_CHECKS for msg in check(problem, plan)]
    if check_objective and plan.objective_usd is not None and not v:
        v = _cost(problem, plan)
    return ValidationReport(tuple(v))
