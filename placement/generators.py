"""Synthetic placement problems for tests and benchmarks (labeled synthetic in their names and notes).

``planted_instance`` cuts full GPUs into items, so the optimal cost is known at any size; ``random_instance``
makes seeded problems of a given size (models × windows × GPUs) with mixed model sizes and daily curves whose
peaks fall at different hours; ``fleet_instance`` is the fleet-scale one (2,000 models × 24 windows × 20,000 GPUs by
default) of the decomposition benchmark.
"""

from __future__ import annotations

import math

import numpy as np

from fleetplan.placement.problem import ModelSpec, Pool, Problem, ReplicaOption, ShareOption


def planted_instance(n_gpus: int, models_per_gpu: int = 3, n_windows: int = 4, *, seed: int = 0,
                     margin: float = 0.1, usd_per_gpu_hour: float = 2.0) -> tuple[Problem, float]:
    """A problem whose optimum is known: ``n_gpus`` shared GPUs, each cut into ``models_per_gpu`` models.

    In every window each GPU's usable compute (1 - margin) is split at random (Dirichlet) among its models, so
    the normalized demand Σ_m d[m,w]/cap_m equals n_gpus·(1 - margin) in every window. Every GPU (shared or
    dedicated; dedicated capacity equals the shared one) supplies at most (1 - margin) of normalized compute, so
    every window needs >= n_gpus GPUs, and the planted packing achieves it all day with no starts:
    optimum = n_gpus × n_windows × 1 h × price. Returns (problem, optimum_usd).
    """
    rng = np.random.default_rng(seed)
    mu = 1 - margin
    pool = Pool("synthetic:r1", "G80", nodes=math.ceil(n_gpus / 8) + 1, gpus_per_node=8,
                usd_per_gpu_hour=usd_per_gpu_hour, memory_bytes_per_gpu=80e9)
    models, options, shares = [], [], []
    for g in range(n_gpus):
        split = rng.dirichlet(np.ones(models_per_gpu), size=n_windows)  # rows: windows
        for j in range(models_per_gpu):
            name = f"planted-{g}-{j}"
            cap = float(rng.uniform(5, 50))
            demand = tuple(float(split[w, j] * mu * cap) for w in range(n_windows))
            models.append(ModelSpec(name, demand, ttft_p95_s=1.0, tpot_p95_s=0.05))
            options.append(ReplicaOption(name, pool.id, 1, 1, cap, 20e9))
            shares.append(ShareOption(name, pool.id, cap, 60e9 / models_per_gpu))
    problem = Problem(3600.0, n_windows, (pool,), tuple(models), tuple(options), tuple(shares), margin=margin,
                      max_shared_gpus_per_pool=n_gpus, max_models_per_shared_gpu=models_per_gpu,
                      name=f"synthetic planted {n_gpus} GPUs",
                      notes=("synthetic: planted-optimum generator",))
    return problem, n_gpus * n_windows * usd_per_gpu_hour


def random_instance(n_models: int, n_windows: int = 24, *, seed: int = 0, max_gpus: int = 1000,
                    margin: float = 0.1) -> Problem:
    """A seeded synthetic problem: ``n_models`` models (70% small, 30% large needing tp 2..8), two sites with
    three GPU types, sinusoidal daily curves with random peak hours, at most ``max_gpus`` GPUs in inventory."""
    rng = np.random.default_rng(seed)
    gpu_types = [("G80-fast", 80e9, 6.0, 2.0), ("G80", 80e9, 3.5, 1.0), ("G24", 24e9, 0.9, 0.22)]
    sites = ["synthetic:r1", "synthetic:r2"]
    per_pool_nodes = max(1, max_gpus // (8 * len(sites) * len(gpu_types)))
    pools = []
    for s_i, site in enumerate(sites):
        for name, mem, price, _ in gpu_types:
            pools.append(Pool(site, name, nodes=per_pool_nodes, gpus_per_node=8,
                              usd_per_gpu_hour=price * (1 + 0.1 * s_i), memory_bytes_per_gpu=mem))
    models, options, shares = [], [], []
    egress = {}
    for a in sites:
        for b in sites:
            if a != b:
                egress[(a, b)] = 0.02
    hours = np.arange(n_windows) * 24 / n_windows
    for i in range(n_models):
        name = f"synthetic-{i}"
        large = rng.random() < 0.3
        peak_hour = rng.uniform(0, 24)
        base = rng.uniform(0.5, 3.0) if not large else rng.uniform(5, 40)
        curve = base * (1 + 0.6 * np.cos(2 * np.pi * (hours - peak_hour) / 24))
        origin = sites[i % 2]
        models.append(ModelSpec(name, tuple(float(x) for x in curve), 1.0, 0.05, min_replicas=1,
                                origin_site=origin, request_bytes=8e3))
        weight_gb = rng.uniform(10, 16) if not large else rng.uniform(100, 150)
        for pool, (_gname, mem, _, speed) in zip(pools, gpu_types * len(sites), strict=True):
            fitting = [tp for tp in (1, 2, 4, 8) if weight_gb * 1e9 / tp <= 0.8 * mem][:2]  # smallest two tp
            for tp in fitting:
                per_gpu = weight_gb * 1e9 / tp
                cap = float(speed * (8 if not large else 2) * tp ** 0.9)
                options.append(ReplicaOption(name, pool.id, tp, 1, cap, per_gpu + 0.5 * (0.9 * mem - per_gpu),
                                             start_cost_usd=pool.usd_per_gpu_hour * tp * 0.05))
                if tp == 1 and not large and weight_gb * 1e9 < 0.4 * mem:
                    shares.append(ShareOption(name, pool.id, cap * 0.9, weight_gb * 1e9 + 4e9))
    return Problem(3600.0 * 24 / n_windows, n_windows, tuple(pools), tuple(models), tuple(options), tuple(shares),
                   margin=margin, max_shared_gpus_per_pool=max(2, min(32, n_models // 4)), egress_usd_per_gb=egress,
                   name=f"synthetic {n_models} models x {n_windows} windows",
                   notes=("synthetic: seeded random generator",))


def fleet_instance(n_models: int = 2000, n_windows: int = 24, *, n_gpus: int = 20_000, seed: int = 0) -> Problem:
    """A seeded fleet-scale synthetic problem: :func:`random_instance` with ``n_gpus`` GPUs in inventory (rounded
    down to whole 8-GPU nodes over its six pools: 19,968 for 20,000) and the same mix of models and curves."""
    return random_instance(n_models, n_windows, seed=seed, max_gpus=n_gpus)
