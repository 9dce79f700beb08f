"""The time-windowed placement problem, as plain numbers.

A :class:`Problem` holds everything a solver needs and nothing it must compute: the GPU pools per site, the
models with their demand per window, and, for every (model, pool, tp, pp) the capacity one replica sustains under
the model's SLO (computed beforehand by ``fleetplan.costmodels.capacity``; see ``fleetplan.placement.scenario``).
Keeping the Problem numeric makes the solvers, the baselines and :func:`fleetplan.placement.validate.validate`
independent of the cost models, and lets tests build golden instances by hand.

Units: seconds, req/s, bytes, USD. The planning horizon is ``n_windows × window_length_s`` (a day for 24 × 1 h),
and plans repeat daily: the window before the first is the last (cyclic), which matters for start-up costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from fleetplan.costmodels.latency import TP_DEGREES
from fleetplan.errors import InputError, check_range


@dataclass(frozen=True)
class Pool:
    """GPUs of one type at one site.

    Attributes:
        site: site name 'cloud:region' or 'cloud:region:zone', e.g. 'aws:us-east-1'.
        gpu: catalog GPU name, e.g. 'H100-SXM-80GB'.
        nodes: number of nodes available (inventory).
        gpus_per_node: GPUs in one node (tensor-parallel groups stay inside a node).
        usd_per_gpu_hour: price of one GPU for one hour (node price / gpus_per_node), USD.
        memory_bytes_per_gpu: GPU memory, bytes.
        pricing_model: 'on-demand', 'spot', ... (reported, not used by the math).
        price_source: where the price comes from.
        reserved_gpus: single GPUs already taken (by shared GPUs fixed elsewhere); not available to this problem.
    """

    site: str
    gpu: str
    nodes: int
    gpus_per_node: int
    usd_per_gpu_hour: float
    memory_bytes_per_gpu: float
    pricing_model: str = "on-demand"
    price_source: str = ""
    reserved_gpus: int = 0

    def __post_init__(self) -> None:
        owner = f"pool {self.id}"
        if not isinstance(self.reserved_gpus, int) or not 0 <= self.reserved_gpus <= self.nodes * self.gpus_per_node:
            raise InputError(f"{owner}: reserved_gpus must be a whole number within the pool", field="reserved_gpus",
                             value=self.reserved_gpus)
        if not isinstance(self.nodes, int) or self.nodes < 0:
            raise InputError(f"{owner}: nodes must be a whole number >= 0", field="nodes", value=self.nodes)
        if self.gpus_per_node not in TP_DEGREES:  # a pipeline stage is tp = one node's GPUs
            raise InputError(f"{owner}: gpus_per_node must be one of {', '.join(map(str, TP_DEGREES))}",
                             field="gpus_per_node",
                             value=self.gpus_per_node)
        check_range(self.usd_per_gpu_hour, field="usd_per_gpu_hour", source=owner, low=0)
        check_range(self.memory_bytes_per_gpu, field="memory_bytes_per_gpu", source=owner, low=1e9)

    @property
    def id(self) -> str:
        """'site/gpu', the key used everywhere else."""
        return f"{self.site}/{self.gpu}"

    @property
    def gpus(self) -> int:
        """GPUs available: nodes × GPUs per node, less the reserved ones."""
        return self.nodes * self.gpus_per_node - self.reserved_gpus


@dataclass(frozen=True)
class ReplicaOption:
    """One way to run a dedicated replica of a model: pool, tensor-parallel degree tp, pipeline stages pp.

    Attributes:
        model: model name.
        pool: pool id ('site/gpu').
        tp: GPUs per pipeline stage (inside one node); a power of two dividing gpus_per_node.
        pp: pipeline stages, one node each (pp > 1 only with tp = gpus_per_node).
        capacity_req_per_s: request rate one replica sustains while TTFT p95 and TPOT p95 meet the SLO.
        memory_bytes_per_gpu: memory the replica occupies on each of its GPUs, bytes.
        start_cost_usd: cost of starting one replica (loading its weights), USD.
        ttft_p95_s, tpot_p95_s: the capacity model's latency at capacity (checked against the SLO).
        capacity_source: where the capacity comes from ('roofline (... calibration)' or 'measured <format> <file>
            (...)'), shown in plans.
        max_batch: concurrent sequences the replica's KV budget holds (the capacity model's ``max_batch``; a
            serving engine's ``--max-num-seqs``), or inf when unknown (hand-built problems).
        kv_budget_bytes: KV-cache bytes of the whole replica (the capacity model's ``kv_bytes_available``), or 0
            when unknown.
        class_capacity_req_per_s: for a model with request classes (:attr:`ModelSpec.class_shares`), ((class,
            req/s), ...): the rate of that class alone one replica sustains under the SLO; a class not listed
            misses the SLO on this option (no capacity). A replica serving a mix of its model's classes carries
            additive load: Σ_c rate_c / cap_c <= 1 - margin per replica. Then ``capacity_req_per_s`` is only
            reported (the capacity at the model's class mix restricted to the classes served). Empty for a model
            without classes.
    """

    model: str
    pool: str
    tp: int
    pp: int
    capacity_req_per_s: float
    memory_bytes_per_gpu: float
    start_cost_usd: float = 0.0
    ttft_p95_s: float = 0.0
    tpot_p95_s: float = 0.0
    capacity_source: str = ""
    max_batch: float = math.inf
    kv_budget_bytes: float = 0.0
    class_capacity_req_per_s: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        owner = f"option {self.key}"
        if self.tp not in TP_DEGREES:
            raise InputError(f"{owner}: tp must be one of {', '.join(map(str, TP_DEGREES))}", field="tp",
                             value=self.tp)
        if not isinstance(self.pp, int) or self.pp < 1:
            raise InputError(f"{owner}: pp must be a whole number >= 1", field="pp", value=self.pp)
        check_range(self.capacity_req_per_s, field="capacity_req_per_s", source=owner, low=0)
        if self.capacity_req_per_s <= 0:
            raise InputError(f"{owner}: capacity must be positive (leave out options that cannot meet the SLO)",
                             field="capacity_req_per_s", value=self.capacity_req_per_s)
        check_range(self.memory_bytes_per_gpu, field="memory_bytes_per_gpu", source=owner, low=0)
        check_range(self.start_cost_usd, field="start_cost_usd", source=owner, low=0)
        for cname, cap in self.class_capacity_req_per_s:
            check_range(cap, field=f"class_capacity_req_per_s[{cname}]", source=owner, low=0)
            if cap <= 0:
                raise InputError(f"{owner}: class {cname} capacity must be positive (leave out classes that cannot "
                                 "meet the SLO)", field="class_capacity_req_per_s", value=cap)

    @property
    def class_capacity(self) -> dict[str, float]:
        """{class: req/s of that class alone one replica sustains} (empty for a model without classes)."""
        return dict(self.class_capacity_req_per_s)

    @property
    def key(self) -> tuple[str, str, int, int]:
        """(model, pool, tp, pp): the key of a plan's replica counts."""
        return (self.model, self.pool, self.tp, self.pp)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


@dataclass(frozen=True)
class ShareOption:
    """A model may reside on a GPU of ``pool`` that it shares with other models (tp = 1).

    Attributes:
        model, pool: as in :class:`ReplicaOption`.
        capacity_req_per_s: rate the model sustains under its SLO when it has the whole GPU's compute but only
            its own memory footprint; on a shared GPU, in every window, the sum over resident models of
            served / capacity stays <= 1 - margin (time-sharing of the compute).
        memory_bytes: the footprint (weights + its KV-cache reservation), bytes.
        capacity_source: where the capacity comes from (as in :class:`ReplicaOption`).
        max_batch, kv_budget_bytes: as in :class:`ReplicaOption` (inf and 0 when unknown).
    """

    model: str
    pool: str
    capacity_req_per_s: float
    memory_bytes: float
    ttft_p95_s: float = 0.0
    tpot_p95_s: float = 0.0
    capacity_source: str = ""
    max_batch: float = math.inf
    kv_budget_bytes: float = 0.0

    def __post_init__(self) -> None:
        owner = f"share option {self.model}@{self.pool}"
        check_range(self.capacity_req_per_s, field="capacity_req_per_s", source=owner, low=0)
        if self.capacity_req_per_s <= 0:
            raise InputError(f"{owner}: capacity must be positive", field="capacity_req_per_s",
                             value=self.capacity_req_per_s)
        check_range(self.memory_bytes, field="memory_bytes", source=owner, low=1.0)


@dataclass(frozen=True)
class ModelSpec:
    """A model to serve.

    Attributes:
        name: model name.
        demand_req_per_s: request rate to serve in each window, req/s (length = the problem's n_windows).
        ttft_p95_s, tpot_p95_s: the SLO targets (seconds).
        min_replicas: replicas kept in every window (1 keeps the model warm, 2 gives redundancy).
        max_replicas: most replicas in any window, or None for no limit.
        origin_site: site where the model's traffic originates (users, gateway), or None when it does not matter.
        request_bytes: bytes that cross the network per request when it is served at another site
            (prompt + response, both directions), bytes.
        demand_source: provenance of the demand, shown in reports.
        priority: whole number, higher first: when demand exceeds the inventory, a best-effort plan serves the
            most demand of the highest priority class, then of the next, then at the lowest cost (default 0).
        class_shares: request-size classes ((class, share of the demand), ...), shares in (0, 1] summing to 1;
            class c's demand in window w is share_c × demand_req_per_s[w]. Empty: one class (the whole mix).
        class_max_tokens: ((input_tokens_max, output_tokens_max), ...) per class (same order; inf: no bound), or
            empty: a request belongs to the first class whose bounds hold its lengths (the simulator routes by it).
    """

    name: str
    demand_req_per_s: tuple[float, ...]
    ttft_p95_s: float
    tpot_p95_s: float
    min_replicas: int = 0
    max_replicas: int | None = None
    origin_site: str | None = None
    request_bytes: float = 0.0
    demand_source: str = ""
    priority: int = 0
    class_shares: tuple[tuple[str, float], ...] = ()
    class_max_tokens: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        owner = f"model {self.name}"
        if not isinstance(self.priority, int) or isinstance(self.priority, bool) or abs(self.priority) > 1_000_000:
            raise InputError(f"{owner}: priority must be a whole number between -1000000 and 1000000 (higher is "
                             "served first)", field="priority", value=self.priority)
        if self.class_shares:
            names = [c for c, _ in self.class_shares]
            if len(set(names)) != len(names):
                raise InputError(f"{owner}: two request classes have the same name", field="classes", value=names)
            for c, share in self.class_shares:
                check_range(share, field=f"classes[{c}].share", source=owner, low=0, high=1)
            total = sum(share for _, share in self.class_shares)
            if abs(total - 1.0) > 1e-6:
                raise InputError(f"{owner}: class shares sum to {total:g}; they must sum to 1", field="classes",
                                 value=total)
            if self.class_max_tokens and len(self.class_max_tokens) != len(self.class_shares):
                raise InputError(f"{owner}: {len(self.class_max_tokens)} class bounds for {len(self.class_shares)} "
                                 "classes", field="class_max_tokens", value=len(self.class_max_tokens))
            if self.origin_site is not None:
                raise InputError(f"{owner}: request classes with an origin_site (egress) are not supported yet; "
                                 "drop origin_site or the classes", field="origin_site", value=self.origin_site)
        for i, d in enumerate(self.demand_req_per_s):
            check_range(d, field=f"demand_req_per_s[{i}]", source=owner, low=0)
        if not isinstance(self.min_replicas, int) or self.min_replicas < 0:
            raise InputError(f"{owner}: min_replicas must be a whole number >= 0", field="min_replicas",
                             value=self.min_replicas)
        if self.max_replicas is not None and (not isinstance(self.max_replicas, int)
                                              or self.max_replicas < max(1, self.min_replicas)):
            raise InputError(f"{owner}: max_replicas must be a whole number >= max(1, min_replicas)",
                             field="max_replicas", value=self.max_replicas)
        check_range(self.request_bytes, field="request_bytes", source=owner, low=0)

    @property
    def classes(self) -> dict[str, float]:
        """{class: share of the demand}; empty for a model without classes."""
        return dict(self.class_shares)

    def request_classes(self, input_tokens: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
        """Class name of each request (object array, shape of the inputs): the first class whose
        ``class_max_tokens`` hold its lengths; None for a model without classes or class bounds, or when no class
        holds it."""
        out = np.full(np.shape(input_tokens), None, dtype=object)
        if not self.class_max_tokens:
            return out
        free = np.ones(np.shape(input_tokens), dtype=bool)
        for (cls, _share), (in_max, out_max) in zip(self.class_shares, self.class_max_tokens, strict=True):
            hit = free & (np.asarray(input_tokens) <= in_max) & (np.asarray(output_tokens) <= out_max)
            out[hit] = cls
            free &= ~hit
        return out

    def class_demand_req_per_s(self, cls: str, w: int) -> float:
        """Demand of class ``cls`` in window ``w``, req/s (share × the model's demand)."""
        return self.classes[cls] * self.demand_req_per_s[w]


@dataclass(frozen=True)
class Problem:
    """A time-windowed placement problem.

    Attributes:
        window_length_s: seconds per window.
        n_windows: number of windows in the (cyclic) horizon.
        pools: GPU pools.
        models: models with demand per window.
        options: dedicated replica options (only those that meet the SLO).
        share_options: shared-GPU options (tp = 1).
        margin: safety margin; capacity is used up to (1 - margin) in every window, dedicated or shared.
        shared_memory_utilization: share of a shared GPU's memory the resident footprints may fill.
        max_shared_gpus_per_pool: candidate shared GPUs per pool the exact models may open.
        max_models_per_shared_gpu: most models resident on one shared GPU (None: memory alone limits it). Their
            decode steps interleave, so the scenario builder sizes a shared model's capacity for a TPOT target
            divided by this number.
        egress_usd_per_gb: {(from_site, to_site): $/GB} for traffic served away from its origin.
        option_notes: {model: why options were left out (weights do not fit, SLO missed ...)}, for explanations.
        name, notes: labels and provenance for reports.
    """

    window_length_s: float
    n_windows: int
    pools: tuple[Pool, ...]
    models: tuple[ModelSpec, ...]
    options: tuple[ReplicaOption, ...]
    share_options: tuple[ShareOption, ...] = ()
    margin: float = 0.1
    shared_memory_utilization: float = 0.9
    max_shared_gpus_per_pool: int = 8
    max_models_per_shared_gpu: int | None = None
    egress_usd_per_gb: dict[tuple[str, str], float] = field(default_factory=dict)
    option_notes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    name: str = "problem"
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_models_per_shared_gpu is not None and (not isinstance(self.max_models_per_shared_gpu, int)
                                                           or self.max_models_per_shared_gpu < 1):
            raise InputError("max_models_per_shared_gpu must be a whole number >= 1 (or None)",
                             field="max_models_per_shared_gpu", value=self.max_models_per_shared_gpu)
        if not (0 <= self.margin < 1):
            raise InputError(f"margin {self.margin!r} must be in [0, 1); e.g. 0.1 keeps 10% headroom",
                             field="margin", value=self.margin)
        if not (self.window_length_s > 0) or not isinstance(self.n_windows, int) or self.n_windows < 1:
            raise InputError("window_length_s must be > 0 and n_windows a whole number >= 1", field="n_windows",
                             value=self.n_windows)
        pool_ids = [p.id for p in self.pools]
        if len(set(pool_ids)) != len(pool_ids):
            raise InputError("two pools have the same site and GPU type; merge them", field="pools")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise InputError("two models have the same name", field="models")
        for m in self.models:
            if len(m.demand_req_per_s) != self.n_windows:
                raise InputError(f"model {m.name}: {len(m.demand_req_per_s)} demand values for "
                                 f"{self.n_windows} windows", field="demand_req_per_s")
        pools = self.pool_by_id
        name_set = set(names)
        seen = set()
        for o in self.options:
            if o.pool not in pools:
                raise InputError(f"option {o.key}: unknown pool", field="pool", value=o.pool)
            if o.model not in name_set:
                raise InputError(f"option {o.key}: unknown model", field="model", value=o.model)
            p = pools[o.pool]
            if p.gpus_per_node % o.tp:
                raise InputError(f"option {o.key}: tp {o.tp} does not divide the {p.gpus_per_node} GPUs of a node",
                                 field="tp", value=o.tp)
            if o.pp > 1 and o.tp != p.gpus_per_node:
                raise InputError(f"option {o.key}: pipeline stages span whole nodes; use tp = {p.gpus_per_node}",
                                 field="tp", value=o.tp)
            if o.key in seen:
                raise InputError(f"option {o.key} given twice", field="options")
            m_classes = self.model_by_name[o.model].classes
            if bool(m_classes) != bool(o.class_capacity_req_per_s) or not set(o.class_capacity) <= set(m_classes):
                raise InputError(f"option {o.key}: class capacities {sorted(o.class_capacity)} must name some of "
                                 f"the model's classes {sorted(m_classes)} (and only when it has classes)",
                                 field="class_capacity_req_per_s", value=sorted(o.class_capacity))
            seen.add(o.key)
        for s in self.share_options:
            if s.pool not in pools or s.model not in name_set:
                raise InputError(f"share option {s.model}@{s.pool}: unknown model or pool", field="share_options")
            if self.model_by_name[s.model].classes:
                raise InputError(f"share option {s.model}@{s.pool}: a model with request classes cannot use shared "
                                 "GPUs yet", field="share_options")
        for (a, b), rate in self.egress_usd_per_gb.items():
            check_range(rate, field=f"egress_usd_per_gb[{a}->{b}]", source="problem", low=0)

    # ---- lookups -------------------------------------------------------------------------------------------
    # Cached (the fields are immutable): built once per Problem, not once per call (at 2,000 models rebuilding
    # them in every lookup made building a Problem and the greedy plan quadratic: 21 s and 390 s). Callers must
    # not mutate the returned dicts.
    @cached_property
    def pool_by_id(self) -> dict[str, Pool]:
        return {p.id: p for p in self.pools}

    @cached_property
    def model_by_name(self) -> dict[str, ModelSpec]:
        return {m.name: m for m in self.models}

    @cached_property
    def option_by_key(self) -> dict[tuple[str, str, int, int], ReplicaOption]:
        return {o.key: o for o in self.options}

    @cached_property
    def options_by_model(self) -> dict[str, tuple[ReplicaOption, ...]]:
        """{model name: its dedicated options, in the order of ``options``} (every model listed)."""
        out: dict[str, list[ReplicaOption]] = {m.name: [] for m in self.models}
        for o in self.options:
            out[o.model].append(o)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def share_by_key(self) -> dict[tuple[str, str], ShareOption]:
        return {(s.model, s.pool): s for s in self.share_options}

    def serves_whole_mix(self, option: ReplicaOption) -> bool:
        """True when ``option`` serves every class of its model (always, for a model without classes): then its
        ``capacity_req_per_s`` (the class mix's capacity) is exact for demand routed to it in the mix's
        proportions, and one-capacity algorithms (the baselines) may use it."""
        return set(option.class_capacity) >= set(self.model_by_name[option.model].classes)

    @property
    def has_classes(self) -> bool:
        """True when some model has request classes (only the MILP and validate support them so far)."""
        return any(m.class_shares for m in self.models)

    @property
    def window_hours(self) -> float:
        return self.window_length_s / 3600.0

    @property
    def horizon_hours(self) -> float:
        return self.n_windows * self.window_hours

    @property
    def sites(self) -> list[str]:
        return sorted({p.site for p in self.pools})

    def egress_rate(self, origin: str | None, site: str) -> float:
        """$/GB for traffic that originates at ``origin`` and is served at ``site`` (0 when the same or no origin).

        Raises InputError when the pair has no rate: the scenario must give one for every site pair it uses.
        """
        if origin is None or origin == site:
            return 0.0
        try:
            return self.egress_usd_per_gb[(origin, site)]
        except KeyError:
            raise InputError(f"no egress rate from {origin} to {site}; add it to the scenario's egress table",
                             field="egress_usd_per_gb", value=(origin, site)) from None

    def egress_usd_per_req_per_s_window(self, model: ModelSpec, site: str) -> float:
        """Egress USD for 1 req/s of ``model`` served at ``site`` for one window."""
        return self.egress_rate(model.origin_site, site) * model.request_bytes / 1e9 * self.window_length_s
