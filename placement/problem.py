"""The time-windowed placement problem, as plain numbers.

A :class:`Problem` holds everything a solver needs and nothing it must compute: the GPU pools per site, the
models with their demand per window, and, for every (model, pool, tp, pp) the capacity one replica sustains under
the model's SLO (computed beforehand by ``fleetplan.costmodels.capacity``; see ``fleetplan.scenario``).
Keeping the Problem numeric makes the solvers, the baselines and :func:`fleetplan.placement.validate.validate`
independent of the cost models, and lets tests build golden instances by hand.

Units: seconds, req/s, bytes, USD. The planning horizon is ``n_windows × window_length_s`` (a day for 24 × 1 h),
and plans repeat daily: the window before the first is the last (cyclic), which matters for start-up costs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from fleetplan.costmodels.engine import EngineConfig
from fleetplan.costmodels.latency import TP_DEGREES
from fleetplan.costmodels.prices import (
    COMMITTED_PRICING_MODELS,
    SPOT_PRICING_MODEL,
    EgressTable,
    break_even_utilization,
)
from fleetplan.errors import InputError, check_range

#: Roles of a replica: serves whole requests, only prefills (ships the KV cache on), or only decodes.
ROLES = ("colocated", "prefill", "decode")

#: Key of a dedicated option and of a plan's replica counts: (model, pool id, tp, pp).
OptionKey = tuple[str, str, int, int]
#: Key of a prefill or decode option: (model, role, pool id, tp, decode site of a prefill option or '').
PdKey = tuple[str, str, str, int, str]
#: Key of a derated option (``build_problem(derating=...)``, ``plan --verify``): (model, pool id, tp, pp) for a
#: dedicated replica, (model, pool id, 'shared', 1) for a shared-GPU residence, (model, pool id, 'prefill' |
#: 'decode', tp) for a prefill or decode option.
DeratingKey = tuple[str, str, int | str, int]


#: Why a spot pool may not fall back to a committed pool (one text for the scenario and the problem checks): the
#: headroom would be the pool's uncommitted GPUs, which run nothing (use never exceeds the commitment).
COMMITTED_FALLBACK_WHY = ("its GPUs beyond the commitment run nothing (use never exceeds the commitment), so they "
                          "are no headroom for interrupted spot replicas; fall back to an on-demand or owned pool of "
                          "the same site and GPU type")


@dataclass(frozen=True)
class Pool:
    """GPUs of one type at one site.

    Attributes:
        site: site name 'cloud:region' or 'cloud:region:zone', e.g. 'aws:us-east-1'.
        gpu: catalog GPU name, e.g. 'H100-SXM-80GB'.
        nodes: number of nodes available (inventory).
        gpus_per_node: GPUs in one node (tensor-parallel groups stay inside a node).
        usd_per_gpu_hour: price of one GPU for one used hour (node price / gpus_per_node), USD: the on-demand or
            spot rate, an owned GPU's marginal (power) cost, 0 for a committed pool (paid through its commitment).
        memory_bytes_per_gpu: GPU memory, bytes.
        pricing_model: how the GPUs are bought (:data:`fleetplan.costmodels.prices.PRICING_MODELS`). It enters
            the math: a committed model (:data:`~fleetplan.costmodels.prices.COMMITTED_PRICING_MODELS`) makes the
            pool's commitment a decision (GPUs paid at ``committed_usd_per_gpu_hour`` for every hour of the
            horizon; use in any window at most the commitment); 'spot' has ``interruption_rate`` and
            ``fallback_pool``; every other model is paid per used GPU-hour.
        price_source: where the price comes from.
        reserved_gpus: single GPUs already taken (by shared GPUs fixed elsewhere); not available to this problem.
        name: the pool's id when several pools share a site and GPU type (owned + committed + on-demand + spot);
            '' gives the id 'site/gpu'.
        committed_usd_per_gpu_hour: committed pools only: price per committed GPU per hour of the horizon, USD.
        on_demand_usd_per_gpu_hour: committed pools: the on-demand rate of the same GPU at the same site (for the
            break-even utilization), or None when unknown; ``on_demand_price_source`` says where it comes from.
        interruption_rate: spot pools: expected share of a spot GPU's hours lost to preemption, in [0, 1). The
            capacities of the pool's options are already derated by (1 - interruption_rate) (the scenario builder
            does it), so a spot replica counts for its expected surviving capacity.
        fallback_pool: spot pools: id of a pool of the same GPU type at the same site (not spot, not committed:
            :data:`COMMITTED_FALLBACK_WHY`) whose free GPUs
            cover the expected interrupted share: in every window, interruption_rate × spot GPUs in use <= GPUs
            of the fallback pool left unused (the fallback rule; None: no headroom is kept).
        price_as_of: the date of the catalog price snapshot the price comes from (YYYY-MM-DD), 'undated' for a
            catalog snapshot without a date, '' when the price is not a catalog's (given in the scenario, your own
            price rows, an owned GPU's power cost).
        price_warning: why the price looks like a mistake (a price given in the scenario more than 10 × above or
            below the catalog's for the same GPU, site and pricing model), '' when it does not; the price is used
            as given.
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
    name: str = ""
    committed_usd_per_gpu_hour: float = 0.0
    on_demand_usd_per_gpu_hour: float | None = None
    on_demand_price_source: str = ""
    interruption_rate: float = 0.0
    fallback_pool: str | None = None
    price_as_of: str = ""
    price_warning: str = ""

    def __post_init__(self) -> None:
        owner = f"pool {self.id}"
        check_range(self.committed_usd_per_gpu_hour, field="committed_usd_per_gpu_hour", source=owner, low=0)
        if self.committed_usd_per_gpu_hour and not self.committed:
            raise InputError(f"{owner}: a committed rate needs a committed pricing model "
                             f"({', '.join(COMMITTED_PRICING_MODELS)}), not {self.pricing_model!r}",
                             field="committed_usd_per_gpu_hour", value=self.committed_usd_per_gpu_hour)
        if self.on_demand_usd_per_gpu_hour is not None:
            check_range(self.on_demand_usd_per_gpu_hour, field="on_demand_usd_per_gpu_hour", source=owner, low=0)
        check_range(self.interruption_rate, field="interruption_rate", source=owner, low=0, high=0.999,
                    fix="give the expected share of spot GPU-hours lost to preemption, e.g. 0.05")
        if (self.interruption_rate or self.fallback_pool) and self.pricing_model != SPOT_PRICING_MODEL:
            raise InputError(f"{owner}: interruption_rate and fallback are for spot pools, not "
                             f"{self.pricing_model!r}", field="interruption_rate", value=self.interruption_rate)
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
        """The pool's ``name``, or 'site/gpu' without one: the key used everywhere else."""
        return self.name or f"{self.site}/{self.gpu}"

    @property
    def label(self) -> str:
        """'gpu@site' for reports, with the pool's name when it has one ('H100-SXM-80GB@gcp:us-central1 [spot]')."""
        return f"{self.gpu}@{self.site}" + (f" [{self.name}]" if self.name else "")

    @property
    def usd_per_busy_gpu_hour(self) -> float:
        """What one busy GPU-hour of the pool is worth, USD: its per-use price, or for a committed pool its committed
        rate (for reports that attribute cost to use, and a replica's start cost; the plan's cost charges a
        commitment for every hour instead, :func:`fleetplan.placement.plan.evaluate`)."""
        return max(self.usd_per_gpu_hour, self.committed_usd_per_gpu_hour)

    @property
    def committed(self) -> bool:
        """True when the pool's GPUs are bought by a commitment chosen by the planner (see ``pricing_model``)."""
        return self.pricing_model in COMMITTED_PRICING_MODELS

    @property
    def break_even_utilization(self) -> float | None:
        """Committed pools: committed rate / on-demand rate (:func:`~fleetplan.costmodels.prices.
        break_even_utilization`), or None when the on-demand rate is unknown or not positive."""
        if not self.committed or not self.on_demand_usd_per_gpu_hour:
            return None
        return break_even_utilization(self.committed_usd_per_gpu_hour, self.on_demand_usd_per_gpu_hour)

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
        role: 'colocated' (default: prefill and decode on the replica), 'prefill' (prefills, then ships the KV
            cache to a decode replica at ``decode_site``) or 'decode' (decodes requests prefilled elsewhere).
            Prefill and decode options live in :attr:`Problem.pd_options`, keyed by :attr:`pd_key`; for them
            ``capacity_req_per_s`` is the prefill capacity (req/s whose TTFT p95, KV transfer included, meets the
            target; from compute) or the decode capacity (req/s whose TPOT p95 meets the target; from memory
            bandwidth and KV memory), and pp is 1.
        decode_site: for a prefill option, the site of the decode replicas it sends the KV cache to ('' otherwise).
        kv_transfer_s: for a prefill option, seconds the p95 prompt's KV cache takes to reach ``decode_site``
            (included in ``ttft_p95_s``).
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
    role: str = "colocated"
    decode_site: str = ""
    kv_transfer_s: float = 0.0
    engine: EngineConfig | None = None

    def __post_init__(self) -> None:
        owner = f"option {self.key}"
        if self.role not in ROLES:
            raise InputError(f"{owner}: role must be one of {', '.join(ROLES)}", field="role", value=self.role)
        if self.role != "colocated" and (self.pp != 1 or self.class_capacity_req_per_s):
            raise InputError(f"{owner}: a {self.role} option has pp 1 and no request classes", field="pp",
                             value=self.pp)
        if (self.role == "prefill") != bool(self.decode_site):
            raise InputError(f"{owner}: a prefill option (and only one) names its decode_site", field="decode_site",
                             value=self.decode_site)
        check_range(self.kv_transfer_s, field="kv_transfer_s", source=owner, low=0)
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
    def key(self) -> OptionKey:
        """(model, pool, tp, pp): the key of a plan's replica counts."""
        return (self.model, self.pool, self.tp, self.pp)

    @property
    def pd_key(self) -> PdKey:
        """(model, role, pool, tp, decode site): the key of a plan's prefill/decode replica counts."""
        return (self.model, self.role, self.pool, self.tp, self.decode_site)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


@dataclass(frozen=True)
class KvRoute:
    """Where a model's prefilled requests may go: from prefill replicas at ``prefill_site`` to decode replicas at
    ``decode_site`` (the same site: the inter-node link, no egress; another site: the WAN, billed).

    Attributes:
        model: model name.
        prefill_site, decode_site: site names.
        route_class: egress route class of prefill -> decode ('' within a site).
        kv_bytes_per_request: KV-cache bytes of a mean prompt (KV-cached tokens × KV bytes per token), bytes.
        prompt_bytes_per_request: request text sent decode site -> prefill site (mean prompt × bytes per token).
        kv_table: egress table billed for the KV bytes (the prefill site's cloud and route class), None within a
            site; prompt_table: the table of the prompt text (the decode site's cloud), None within a site.
        link: name of the link the KV cache crosses (for reports).
    """

    model: str
    prefill_site: str
    decode_site: str
    route_class: str
    kv_bytes_per_request: float
    prompt_bytes_per_request: float
    kv_table: EgressTable | None = None
    prompt_table: EgressTable | None = None
    link: str = ""

    def __post_init__(self) -> None:
        owner = f"KV route {self.model} {self.prefill_site}->{self.decode_site}"
        check_range(self.kv_bytes_per_request, field="kv_bytes_per_request", source=owner, low=0)
        check_range(self.prompt_bytes_per_request, field="prompt_bytes_per_request", source=owner, low=0)
        if (self.prefill_site == self.decode_site) != (self.kv_table is None and self.prompt_table is None):
            raise InputError(f"{owner}: a route between two sites has egress tables, one inside a site none",
                             field="kv_table")

    @property
    def key(self) -> tuple[str, str, str]:
        """(model, prefill site, decode site): the key of a plan's KV flows."""
        return (self.model, self.prefill_site, self.decode_site)

    @property
    def cross_site(self) -> bool:
        return self.prefill_site != self.decode_site


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
    engine: EngineConfig | None = None

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
        peak_factor: arrival burstiness inside a window (>= 1): the capacities of this model's options in the
            Problem are already divided by it (capacity sized for peak_factor × demand_req_per_s, while the
            demand billed and routed for egress stays demand_req_per_s); 1 without the scenario key ``arrivals``.
        peak_factor_source: where ``peak_factor`` comes from (the scenario key, or the trace statistic).
        max_share_per_site, max_share_per_pool: the spread (constraint (18); None: no bound): in every window, the
            model's capacity at one site (in one pool) is at most this share, in (0, 1], of its capacity at all
            sites. Capacity = Σ (1 - margin) × capacity_req_per_s × replicas of its dedicated options there + for
            each shared GPU there it resides on, (1 - margin) × its share option's capacity (what that GPU serves it
            alone; co-residents share it, so this counts a shared GPU as it would serve after a failure elsewhere
            left it to the model); so losing one site leaves at least
            (1 - share) of the model's capacity. Refused with prefill/decode options (:meth:`Problem._check_spread`).
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
    peak_factor: float = 1.0
    peak_factor_source: str = ""
    max_share_per_site: float | None = None
    max_share_per_pool: float | None = None

    def __post_init__(self) -> None:
        owner = f"model {self.name}"
        for key in ("max_share_per_site", "max_share_per_pool"):
            v = getattr(self, key)
            if v is not None and not (isinstance(v, int | float) and 0 < v <= 1):
                raise InputError(f"{owner}: spread {key} {v!r} must be a share in (0, 1] (e.g. 0.6: at most 60% of "
                                 "the model's capacity in one place; 1 or absent: no bound)", field=f"spread.{key}",
                                 value=v)
        check_range(self.peak_factor, field="peak_factor", source=owner, low=1.0, high=10.0)
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
                raise InputError(f"{owner}: class shares sum to {total:.9g}, not 1 (within 1e-6); make them add up "
                                 "to exactly 1", field="classes",
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
            raise InputError(f"{owner}: max_replicas {self.max_replicas!r} is below min_replicas "
                             f"{self.min_replicas} (or below 1); give a whole number max_replicas >= "
                             f"{max(1, self.min_replicas)}, or lower min_replicas", field="max_replicas",
                             value=self.max_replicas)
        check_range(self.request_bytes, field="request_bytes", source=owner, low=0)

    @property
    def spread_bounds(self) -> dict[str, float]:
        """{'site' | 'pool': the bound below 1} of the model's spread (empty: none binds)."""
        out = {}
        if self.max_share_per_site is not None and self.max_share_per_site < 1:
            out["site"] = float(self.max_share_per_site)
        if self.max_share_per_pool is not None and self.max_share_per_pool < 1:
            out["pool"] = float(self.max_share_per_pool)
        return out

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


def _spread_places(model: str, level: str, pools: dict[str, Pool], options: tuple[ReplicaOption, ...] | list,
                   share_options: tuple[ShareOption, ...] | list) -> list[str]:
    """:meth:`Problem.spread_places` on the parts of a problem (``options``: at least the model's)."""
    places = {pools[o.pool] for o in options if o.model == model and o.pool in pools}
    places |= {pools[s.pool] for s in share_options if s.model == model and s.pool in pools}
    return sorted({(p.site if level == "site" else p.id) for p in places if p.gpus > 0})


def spread_where_possible(models: tuple[ModelSpec, ...], pools: tuple[Pool, ...],
                          options: tuple[ReplicaOption, ...], share_options: tuple[ShareOption, ...] = ()
                          ) -> tuple[ModelSpec, ...]:
    """``models`` with each spread bound raised to 1/k where the k sites (pools) with GPUs in ``pools`` where the
    model has an option (of ``options`` / ``share_options``) are too few to meet it (bound × k < 1), and dropped
    (None) when k <= 1: for problems derived from a valid one with fewer places (nodes down online, a window's
    repair with its shared GPUs fixed), which keep the spread as far as their places allow. Unchanged models are
    the same objects."""
    by_id = {p.id: p for p in pools}
    out = []
    for m in models:
        kept: dict[str, float | None] = {"site": m.max_share_per_site, "pool": m.max_share_per_pool}
        for level, share in m.spread_bounds.items():
            k = len(_spread_places(m.name, level, by_id, options, share_options))
            if share * k < 1 - 1e-9:
                kept[level] = 1.0 / k if k > 1 else None
        same = kept == {"site": m.max_share_per_site, "pool": m.max_share_per_pool}
        out.append(m if same else replace(m, max_share_per_site=kept["site"], max_share_per_pool=kept["pool"]))
    return tuple(out)


def time_of_day_s(hhmm: str, *, field: str) -> int:
    """Seconds since 00:00 of the time of day ``hhmm``, written 'HH:MM' (00:00 to 23:59, two digits each: what every
    option that takes one says; '1:30' and '12:3' are refused, not guessed). Raises InputError naming ``field``."""
    m = re.fullmatch(r"([01]\d|2[0-3]):([0-5]\d)", str(hhmm).strip())
    if m is None:
        raise InputError(f"{field} {hhmm!r} is not a time of day HH:MM (00:00 to 23:59, two digits each); give "
                         "e.g. 14:00 or 01:30", field=field, value=hhmm)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60


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
        pd_options: prefill and decode options (role 'prefill' / 'decode', see :class:`ReplicaOption`) of the
            models that may be served disaggregated; empty: every model colocated only.
        kv_routes: the (model, prefill site, decode site) routes the prefilled requests may take, with the KV and
            prompt bytes per request and the egress tables billed (monthly volume bands, summed per table over the
            plan as the clouds bill).
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
    pd_options: tuple[ReplicaOption, ...] = ()
    kv_routes: tuple[KvRoute, ...] = ()

    def __post_init__(self) -> None:
        self._check_scalars()
        self._check_pools()
        names = self._check_models()
        pools = self.pool_by_id
        self._check_options(pools, set(names))
        self._check_shares(pools, set(names))
        for (a, b), rate in self.egress_usd_per_gb.items():
            check_range(rate, field=f"egress_usd_per_gb[{a}->{b}]", source="problem", low=0)
        self._check_pd(pools, names)
        self._check_spread(pools)

    def _check_scalars(self) -> None:
        """max_models_per_shared_gpu a whole number >= 1 or None, margin in [0, 1), window_length_s > 0 and
        n_windows a whole number >= 1; else InputError naming the field."""
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

    def _check_pools(self) -> None:
        """Pool ids are unique and a fallback pool is another pool of the same site and GPU type, neither spot nor
        committed; else InputError naming the pool."""
        pool_ids = [p.id for p in self.pools]
        if len(set(pool_ids)) != len(pool_ids):
            twice = sorted({i for i in pool_ids if pool_ids.count(i) > 1})
            raise InputError(f"two pools have the id {twice[0]!r}; give each pool of one site and GPU type its own "
                             "name (e.g. owned, committed, on-demand, spot)", field="pools", value=twice[0])
        by_id = {p.id: p for p in self.pools}
        for p in self.pools:
            if p.fallback_pool is None:
                continue
            f = by_id.get(p.fallback_pool)
            if f is None or f.site != p.site or f.gpu != p.gpu or f.pricing_model == SPOT_PRICING_MODEL:
                raise InputError(f"pool {p.id}: fallback {p.fallback_pool!r} must be a pool that is not spot, with "
                                 f"the same site ({p.site}) and GPU type ({p.gpu})", field="fallback",
                                 value=p.fallback_pool)
            if f.committed:
                raise InputError(f"pool {p.id}: fallback {f.id!r} is a committed pool: {COMMITTED_FALLBACK_WHY}",
                                 field="fallback", value=f.id)

    def _check_models(self) -> list[str]:
        """Model names are unique and every model has one demand value per window; returns the names in order.
        Raises InputError naming the model."""
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise InputError(f"two models have the same name ({', '.join(dup)}); give each model once",
                             field="models", value=dup)
        for m in self.models:
            if len(m.demand_req_per_s) != self.n_windows:
                raise InputError(f"model {m.name}: {len(m.demand_req_per_s)} demand values for "
                                 f"{self.n_windows} windows", field="demand_req_per_s")
        return names

    def _check_options(self, pools: dict[str, Pool], name_set: set[str]) -> None:
        """Every dedicated option names a known pool and model, its tp divides the pool's node (pipeline stages:
        tp = the node), it is given once, and it has class capacities exactly when its model has classes (and
        only of those classes); else InputError naming the option."""
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

    def _check_shares(self, pools: dict[str, Pool], name_set: set[str]) -> None:
        """Every share option names a known pool and model, one without request classes; else InputError."""
        for s in self.share_options:
            if s.pool not in pools or s.model not in name_set:
                raise InputError(f"share option {s.model}@{s.pool}: unknown model or pool", field="share_options")
            if self.model_by_name[s.model].classes:
                raise InputError(f"share option {s.model}@{s.pool}: a model with request classes cannot use shared "
                                 "GPUs yet", field="share_options")

    def _check_pd(self, pools: dict[str, Pool], names: list[str]) -> None:
        routes = {r.key for r in self.kv_routes}
        if len(routes) != len(self.kv_routes):
            raise InputError("a KV route is given twice", field="kv_routes")
        seen = set()
        for o in self.pd_options:
            if o.role == "colocated" or o.pool not in pools or o.model not in names:
                raise InputError(f"prefill/decode option {o.pd_key}: role prefill or decode, a known pool and model",
                                 field="pd_options", value=o.pd_key)
            if pools[o.pool].gpus_per_node % o.tp:
                raise InputError(f"option {o.pd_key}: tp {o.tp} does not divide the node", field="tp", value=o.tp)
            if o.pd_key in seen:
                raise InputError(f"option {o.pd_key} given twice", field="pd_options")
            seen.add(o.pd_key)
            if self.model_by_name[o.model].class_shares:
                raise InputError(f"model {o.model}: request classes and disaggregated serving together are not "
                                 "supported yet; drop one", field="pd_options", value=o.model)
            if o.role == "prefill" and (o.model, pools[o.pool].site, o.decode_site) not in routes:
                raise InputError(f"prefill option {o.pd_key}: no KV route to {o.decode_site}", field="kv_routes")
        for r in self.kv_routes:
            if r.model not in names:
                raise InputError(f"KV route {r.key}: unknown model", field="kv_routes", value=r.model)

    def spread_places(self, model: str, level: str) -> list[str]:
        """The sites (``level`` 'site') or pool ids ('pool') where ``model`` has a dedicated or shared-GPU option
        with GPUs left to use (sorted): the places its spread divides capacity between."""
        return _spread_places(model, level, self.pool_by_id, self.options_by_model.get(model, ()),
                              self.share_options)

    def _check_spread(self, pools: dict[str, Pool]) -> None:
        """A model's spread bound can be met: it has no prefill/decode options (the spread counts colocated and
        shared capacity only), and when it needs capacity (demand or a replica floor), share × the places it has
        options in >= 1 (k places each holding at most share of the capacity hold at most k × share of it).
        Else InputError naming the model, the places and the fix."""
        for m in self.models:
            bounds = m.spread_bounds
            if not bounds:
                continue
            if any(o.model == m.name for o in self.pd_options):
                raise InputError(f"model {m.name}: a spread (max_share_per_site/pool) is not supported with "
                                 "prefill/decode pools yet; leave the model out of options.disaggregation.models or "
                                 "give it spread: {max_share_per_site: 1, max_share_per_pool: 1}",
                                 field="spread", value=m.name)
            if m.min_replicas == 0 and not any(d > 0 for d in m.demand_req_per_s):
                continue
            for level, share in bounds.items():
                places = self.spread_places(m.name, level)
                if places and share * len(places) < 1 - 1e-9:
                    where = ", ".join(places)
                    raise InputError(
                        f"model {m.name}: spread max_share_per_{level} {share:g} cannot be met: the model has capacity "
                        f"in {len(places)} {level}{'s' if len(places) > 1 else ''} only ({where}), which can hold at "
                        f"most {min(1.0, share * len(places)):.0%} of it; give it options in more {level}s (GPUs it "
                        f"fits at another {level}), or raise its bound to at least {1 / len(places):.3g} "
                        f"(models[].spread: {{max_share_per_{level}: {1 / len(places):.3g}}} for it)",
                        field=f"spread.max_share_per_{level}", value=share)

    @property
    def pd_option_by_key(self) -> dict[PdKey, ReplicaOption]:
        return {o.pd_key: o for o in self.pd_options}

    @property
    def kv_route_by_key(self) -> dict[tuple[str, str, str], KvRoute]:
        return {r.key: r for r in self.kv_routes}

    @property
    def has_disaggregation(self) -> bool:
        """True when some model may be served by prefill and decode pools (only the MILP backends plan them)."""
        return bool(self.pd_options)

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
