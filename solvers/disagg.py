"""Break-even KV egress price of a disaggregated plan (issue 17 item 4): the flat USD per GB of cross-site KV and
prompt traffic at which the plan's choice between a cross-site prefill/decode split and keeping prefill and decode
in the decode site's own pools flips.

Method: one re-solve and the ledger's arithmetic (as :func:`fleetplan.costmodels.split.compare` does for one
design). A plan with cross-site KV traffic (G GB over the horizon, its cost C without that egress) is compared with
the best plan without cross-site routes (cost A, re-solved): the split pays while C + p·G < A, so the break-even
is p* = (A - C) / G. A plan without cross-site traffic (cost A) is compared with the best plan at free cross-site
egress (re-solved: cost C0 with G0 GB cross-site): below p* = (A - C0) / G0 that split would win. Either way p* is
where *this pair* of plans costs the same; at prices between, the optimum may move to a third plan moving less KV
(re-plan with ``disaggregation.kv_egress_usd_per_gb`` to see it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fleetplan.costmodels.split import flat_table
from fleetplan.placement.plan import Plan, evaluate, kv_traffic
from fleetplan.placement.problem import Problem
from fleetplan.placement.status import Status
from fleetplan.solvers.milp import solve_milp


@dataclass(frozen=True)
class BreakEven:
    """The break-even cross-site KV egress price.

    Attributes:
        usd_per_gb: flat USD per GB at which the plan and the alternative cost the same, or None (no alternative:
            no cross-site route exists, or none pays even with free egress).
        plan_cross_site_gb_per_day, alternative_cross_site_gb_per_day: cross-site KV + prompt GB per day.
        alternative_usd_per_day: the re-solved alternative's cost (at the egress price it was solved with).
        note: one line saying what was compared.
    """

    usd_per_gb: float | None
    plan_cross_site_gb_per_day: float
    alternative_cross_site_gb_per_day: float
    alternative_usd_per_day: float | None
    note: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _cross_gb(problem: Problem, plan: Plan) -> float:
    t = kv_traffic(problem, plan)
    routes = problem.kv_route_by_key
    return sum(gb for (key, _kind), gb in t.gb.items() if routes[key].cross_site)


def without_cross_site(problem: Problem) -> Problem:
    """``problem`` without cross-site KV routes (and the prefill options sending over them)."""
    site = {p.id: p.site for p in problem.pools}
    return dataclasses.replace(
        problem, kv_routes=tuple(r for r in problem.kv_routes if not r.cross_site),
        pd_options=tuple(o for o in problem.pd_options if o.role == "decode" or o.decode_site == site[o.pool]))


def with_flat_kv_egress(problem: Problem, usd_per_gb: float) -> Problem:
    """``problem`` with every cross-site KV route's egress tables at one flat price, USD per GB."""
    return dataclasses.replace(problem, kv_routes=tuple(
        dataclasses.replace(r, kv_table=flat_table(r.kv_table, usd_per_gb), prompt_table=flat_table(
            r.prompt_table, usd_per_gb)) if r.kv_table is not None and r.prompt_table is not None else r
        for r in problem.kv_routes))


def kv_break_even(problem: Problem, plan: Plan, *, backend: str = "highs", time_limit_s: float = 30,
                  threads: int | None = None) -> BreakEven:
    """The break-even cross-site KV egress price of ``plan`` (module docstring), by one re-solve with
    :func:`fleetplan.solvers.milp.solve_milp`. Figures per day scale the horizon to 24 h."""
    day = 24.0 / problem.horizon_hours
    if not any(r.cross_site for r in problem.kv_routes):
        return BreakEven(None, 0.0, 0.0, None, "no cross-site KV route in the problem (disaggregation.cross_site "
                         "off, or no prefill option meets the TTFT target over the WAN)")
    ev = evaluate(problem, plan)
    g = _cross_gb(problem, plan)
    if g > 0:
        alt_problem = without_cross_site(problem)
        alt = solve_milp(alt_problem, backend=backend, time_limit_s=time_limit_s, threads=threads)
        if not alt.has_solution:
            return BreakEven(None, g * day, 0.0, None, "no plan without cross-site KV traffic "
                             f"({alt.status.value}): the split is needed at any price")
        a = evaluate(alt_problem, alt).total_usd
        fixed = ev.total_usd - ev.kv_egress_usd  # same-site routes bill no egress: all KV egress is cross-site
        p = (a - fixed) / g
        return BreakEven(p, g * day, 0.0, a * day, f"this plan's cross-site split vs the best plan without one "
                         f"(${a * day:,.2f}/day{'' if alt.status is Status.OPTIMAL else ', ' + alt.status.value}): "
                         f"the split pays below ${p:.3g}/GB")
    free = with_flat_kv_egress(problem, 0.0)
    alt = solve_milp(free, backend=backend, time_limit_s=time_limit_s, threads=threads)
    if not alt.has_solution:
        return BreakEven(None, 0.0, 0.0, None, f"no plan at free cross-site egress ({alt.status.value})")
    g0 = _cross_gb(free, alt)
    c0 = evaluate(free, alt).total_usd
    if g0 <= 0:
        return BreakEven(None, 0.0, 0.0, c0 * day, "no cross-site split pays even with free egress")
    p = (ev.total_usd - c0) / g0
    return BreakEven(p, 0.0, g0 * day, c0 * day, f"the best cross-site split at free egress (${c0 * day:,.2f}/day "
                     f"before egress, {g0 * day:,.0f} GB/day) vs this plan: it would pay below ${p:.3g}/GB")


__all__ = ["BreakEven", "kv_break_even", "with_flat_kv_egress", "without_cross_site"]
