"""Benchmark of multi-tenant pool allocation (prints figures; synthetic, seeded instances).

1. Quality at about 90% mean utilization: a synthetic pool (8-GPU H100-SXM-80GB and A100-SXM4-80GB nodes) and
   tenants with phase-shifted daily curves scaled so the mean demand is 90% of the pool. The optimizer (weighted
   mode) against static partitioning and quota-with-borrowing fair share, run in the same process: utilization,
   SLA attainment, tenants meeting their SLA, shared node-windows, isolation, unmet guarantees, and ratios.
2. Scale: 100 tenants × 500 nodes × 24 windows within a time limit, with the gap reported.
3. In-node split of the quality instance's optimizer answer (MIG, as ``--split auto`` picks on these GPU types, and
   MPS): shared node-windows, distinct cases solved, wall time, unmet compute, GPUs shared, solver statuses.

Usage: python benchmarks/bench_tenants.py [--quick] [--backend cpsat|highs] [--scale-time-limit S]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

from fleetplan.costmodels.utilization import SERVED_SHARE, legend
from fleetplan.datasets.sharing import load_interference
from fleetplan.placement.tenants import Node, Tenant, TenantProblem, validate_allocation
from fleetplan.solvers.tenants.allocate import solve_allocation
from fleetplan.solvers.tenants.baselines import fair_share, static_partition
from fleetplan.solvers.tenants.slicing import split_allocation

CLASSES = ["interactive", "prefill", "batch", "training"]


def synthetic(n_tenants: int, n_nodes: int, windows: int = 24, load: float = 0.9, seed: int = 0) -> TenantProblem:
    """SYNTHETIC instance: half H100, half A100 8-GPU nodes; tenant curves 1 + a·cos(2π(h − phase)/24) with random
    amplitude and phase, rescaled so Σ demand = load × pool GPUs on average; quota = 50% of the tenant's mean;
    burst = 1.5 × its peak; a third of the tenants is pinned to one GPU type."""
    rng = random.Random(seed)
    nodes = tuple(Node(f"{'h100' if i % 2 == 0 else 'a100'}-{i}", "H100-SXM-80GB" if i % 2 == 0 else
                       "A100-SXM4-80GB", 8) for i in range(n_nodes))
    pool_gpus = 8 * n_nodes
    shapes = []
    for _ in range(n_tenants):
        amp, phase, size = rng.uniform(0.2, 0.8), rng.uniform(0, 24), rng.lognormvariate(0, 0.6)
        shapes.append([size * (1 + amp * math.cos(2 * math.pi * (h - phase) / 24)) for h in range(windows)])
    total_mean = sum(sum(s) for s in shapes) / windows
    k = load * pool_gpus / total_mean
    tenants = []
    for i, s in enumerate(shapes):
        dem = tuple(round(k * v * 2) / 2 for v in s)
        mean = sum(dem) / windows
        types = ()
        if i % 3 == 0:
            types = ("H100-SXM-80GB",) if i % 2 == 0 else ("A100-SXM4-80GB",)
        tenants.append(Tenant(f"t{i:03d}", max(0, int(0.5 * mean)), max(int(0.5 * mean), math.ceil(1.5 * max(dem))),
                              float(rng.choice([1, 1, 2, 3])), dem, rng.choice([0.9, 0.95, 0.99]),
                              rng.choice(CLASSES), types))
    return TenantProblem(nodes, tuple(tenants), load_interference(), name=f"synthetic-{n_tenants}x{n_nodes}")


def _row(name: str, o) -> str:
    att = list(o.attainment.values())
    return (f"{name:<11} {SERVED_SHARE.name} {100 * o.utilization:5.1f}%  "
            f"SLA attainment mean {100 * statistics.mean(att):5.1f}% "
            f"min {100 * min(att):5.1f}%  SLA met {sum(o.sla_met.values()):3d}/{len(att)}  shared node-windows "
            f"{o.shared_node_windows:5d}  isolation {o.isolation:7.2f}  unmet guarantee "
            f"{o.unmet_guaranteed_gpu_windows:7.1f} GPU-w")


def quality(backend: str, n_tenants: int, n_nodes: int, time_limit_s: float) -> None:
    p = synthetic(n_tenants, n_nodes)
    mean_load = sum(sum(t.demand_gpus) for t in p.tenants) / p.capacity_gpu_windows
    print(f"\n== Quality: {p.name} (SYNTHETIC), 24 windows, mean demand {100 * mean_load:.1f}% of the pool, "
          f"backend {backend}, time limit {time_limit_s:g} s")
    t0 = time.perf_counter()
    r = solve_allocation(p, mode="weighted", backend=backend, time_limit_s=time_limit_s)
    dt = time.perf_counter() - t0
    res = {"optimizer": validate_allocation(p, r.allocation)}
    res["static"] = validate_allocation(p, static_partition(p), check_guarantees=False)
    res["fair-share"] = validate_allocation(p, fair_share(p), check_guarantees=False)
    gap = r.allocation.gap
    print(f"optimizer: {r.allocation.status.value}, gap {100 * gap:.3f}% , {dt:.1f} s" if gap is not None else
          f"optimizer: {r.allocation.status.value}, {dt:.1f} s")
    for k, o in res.items():
        print(_row(k, o))
    print(legend(SERVED_SHARE))
    o = res["optimizer"]
    for k in ("static", "fair-share"):
        b = res[k]
        print(f"optimizer / {k}: utilization ×{o.utilization / b.utilization:.3f}, mean SLA attainment "
              f"×{statistics.mean(o.attainment.values()) / statistics.mean(b.attainment.values()):.3f}, SLA met "
              f"{sum(o.sla_met.values())} vs {sum(b.sla_met.values())}, shared node-windows {o.shared_node_windows} "
              f"vs {b.shared_node_windows}, unmet guarantee {o.unmet_guaranteed_gpu_windows:.1f} vs "
              f"{b.unmet_guaranteed_gpu_windows:.1f} GPU-w")
    for kind in ("mig", "mps"):
        t0 = time.perf_counter()
        sp = split_allocation(p, r.allocation, kind=kind, time_limit_s=60)
        dt = time.perf_counter() - t0
        unit = "slices" if kind == "mig" else "% of a GPU"
        print(f"split {kind}: {len(sp)} shared node-windows, {len({id(v) for v in sp.values()})} distinct cases, "
              f"{dt:.1f} s, unmet {sum(sum(v.unmet.values()) for v in sp.values())} {unit}, GPUs shared "
              f"{sum(v.shared_gpus for v in sp.values())}, statuses "
              f"{sorted({v.status.value for v in sp.values()})}")


def scale(backend: str, time_limit_s: float, n_tenants: int = 100, n_nodes: int = 500) -> None:
    p = synthetic(n_tenants, n_nodes, seed=1)
    print(f"\n== Scale: {n_tenants} tenants × {n_nodes} nodes ({8 * n_nodes} GPUs) × 24 windows (SYNTHETIC), "
          f"backend {backend}, time limit {time_limit_s:g} s (split evenly over the 24 per-window solves)")
    t0 = time.perf_counter()
    r = solve_allocation(p, mode="weighted", backend=backend, time_limit_s=time_limit_s)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    o = validate_allocation(p, r.allocation)
    check_s = time.perf_counter() - t1
    fs = validate_allocation(p, fair_share(p), check_guarantees=False)
    st = validate_allocation(p, static_partition(p), check_guarantees=False)
    gap = "n/a" if r.allocation.gap is None else f"{100 * r.allocation.gap:.3f}%"
    print(f"status {r.allocation.status.value}, gap {gap} (Σ window bounds vs Σ window objectives), solver time "
          f"{r.allocation.solve_s:.1f} s, wall {wall:.1f} s incl. model building, checker {check_s:.1f} s")
    for k, oo in (("optimizer", o), ("static", st), ("fair-share", fs)):
        print(_row(k, oo))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["cpsat", "highs"], default="cpsat")
    ap.add_argument("--quick", action="store_true", help="small sizes only (no 100 × 500 run)")
    ap.add_argument("--quality-time-limit", type=float, default=60.0)
    ap.add_argument("--scale-time-limit", type=float, default=240.0)
    a = ap.parse_args()
    quality(a.backend, 20, 40, a.quality_time_limit)
    if not a.quick:
        scale(a.backend, a.scale_time_limit)


if __name__ == "__main__":
    main()
