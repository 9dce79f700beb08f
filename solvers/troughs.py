"""Inference in training troughs: how many of a training job's GPUs inference borrows per window, by a small MILP
(PuLP + HiGHS), and what it saves against renting the overflow on demand.

Variables per window w (h = window hours, need_w = GPUs inference needs beyond its own, G = training GPUs):

- b_w ∈ {0..min(G, need_w)}: training GPUs lent to inference; o_w = need_w − b_w: overflow rented on demand;
- u_w ≥ b_w − b_{w−1}, u_w ≥ 0: GPUs newly preempted in w (the day is cyclic: b_{−1} = b_{W−1}).

Constraint (the job still finishes): Σ_w (G − b_w) h − L Σ_w u_w ≥ H, with H the job's GPU-hours and L the work one
preemption loses (half a checkpoint interval plus the restart, GPU-hours per GPU).

Objective (minimize, USD): Σ_w o_w h p_od + priority × p_train × L Σ_w u_w (on-demand rent plus the lost training
work at the training GPU-hour price, weighted by the job's priority). The borrowed GPUs themselves are owned: they
cost nothing extra. The baseline rents every need_w on demand; the saving is baseline − objective.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulp

from fleetplan.errors import SolverError
from fleetplan.placement.status import Status
from fleetplan.scenario.troughs import TroughProblem
from fleetplan.solvers.highs import HiGHS


@dataclass(frozen=True)
class TroughPlan:
    """The borrowing and its ledger.

    Attributes:
        status: solver status; borrowed_gpus, rented_gpus, preempted_gpus: per window (b, o, u).
        training_gpu_hours: work the job does net of preemption losses (≥ its gpu_hours).
        rent_usd, lost_work_usd: the objective's two terms; baseline_usd: renting every need on demand;
        saving_usd = baseline_usd − rent_usd − lost_work_usd.
        lost_gpu_hours: L × Σ u.
    """

    status: Status
    borrowed_gpus: tuple[int, ...]
    rented_gpus: tuple[int, ...]
    preempted_gpus: tuple[int, ...]
    training_gpu_hours: float
    lost_gpu_hours: float
    rent_usd: float
    lost_work_usd: float
    baseline_usd: float

    @property
    def saving_usd(self) -> float:
        return self.baseline_usd - self.rent_usd - self.lost_work_usd


def plan_troughs(p: TroughProblem, *, time_limit_s: float = 30.0) -> TroughPlan:
    """Solve the borrowing MILP of ``p`` (module docstring). Raises SolverError when HiGHS finds no solution in
    ``time_limit_s`` (b = 0 is always feasible, since the scenario checks that the job fits its GPUs)."""
    W, h, L = p.n_windows, p.window_h, p.lost_gpu_hours_per_preemption
    need = p.need_gpus
    lp = pulp.LpProblem("troughs", pulp.LpMinimize)
    b = [lp.add_variable(f"b_{w}", 0, min(p.training_gpus, need[w]), "Integer") for w in range(W)]
    u = [lp.add_variable(f"u_{w}", 0) for w in range(W)]
    for w in range(W):
        lp += u[w] >= b[w] - b[w - 1]  # w = 0 wraps to the last window (cyclic day)
    lp += pulp.lpSum((p.training_gpus - b[w]) * h for w in range(W)) - L * pulp.lpSum(u) >= p.training_gpu_hours
    rent = pulp.lpSum((need[w] - b[w]) * h * p.on_demand_usd_per_gpu_hour for w in range(W))
    lost = p.priority * p.training_usd_per_gpu_hour * L * pulp.lpSum(u)
    lp += rent + lost
    lp.solve(HiGHS(msg=False, timeLimit=time_limit_s))
    st = pulp.LpStatus[lp.status]
    if st != "Optimal" or any(v.value() is None for v in b):
        raise SolverError(f"troughs: HiGHS ended {st} without a solution within {time_limit_s:g} s; raise the limit")
    bb = tuple(int(round(v.value())) for v in b)
    uu = tuple(max(0, bb[w] - bb[w - 1]) for w in range(W))
    lost_h = L * sum(uu)
    rent_usd = sum((need[w] - bb[w]) * h * p.on_demand_usd_per_gpu_hour for w in range(W))
    return TroughPlan(Status.OPTIMAL, bb, tuple(n - x for n, x in zip(need, bb, strict=True)), uu,
                      sum((p.training_gpus - x) * h for x in bb) - lost_h, lost_h, rent_usd,
                      p.priority * p.training_usd_per_gpu_hour * lost_h,
                      sum(need) * h * p.on_demand_usd_per_gpu_hour)
