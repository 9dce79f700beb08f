"""The input files as pydantic models: a planner scenario (:class:`ScenarioFile`) and a tenants file
(:class:`TenantsFile`).

A model checks the raw YAML mapping (keys, types, ranges, which keys go together); ``scenario.read`` and
``scenario.build`` (``scenario.tenants`` for tenants) then build the domain records from the checked model and do
the checks that need the catalogs (GPU, model and trace names with "did you mean", prices). Unknown keys are
errors that suggest the closest known key, and ``fleetplan schema scenario|tenants`` prints each model's JSON
Schema, so an editor can check a file as it is typed. Field descriptions are the schema's descriptions; ranges are
the schema's minimum and maximum. Sources of the ranges: SLO and token-length ranges from ``costmodels.slo`` /
``costmodels.demand``, tensor-parallel degrees from ``costmodels.latency.TP_DEGREES``; the option ranges are sanity
bounds (they catch wrong units such as milliseconds for seconds), not physical limits.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from fleetplan.costmodels.demand import TOKENS_PER_REQUEST_RANGE
from fleetplan.costmodels.engine import ENGINE_MODES, EngineConfig, engine_from_mapping
from fleetplan.costmodels.hardware import DType
from fleetplan.costmodels.latency import TP_DEGREES, TpDegree
from fleetplan.costmodels.prices import PRICING_MODELS
from fleetplan.costmodels.profile_capacity import ProfileFormat
from fleetplan.costmodels.slo import (
    ATTAINMENT_RANGE,
    E2E_RANGE_S,
    SLO,
    SLO_PERCENTILES,
    TPOT_P95_RANGE_S,
    TTFT_P95_RANGE_S,
)
from fleetplan.datasets.calibration import load_framework_table
from fleetplan.datasets.deploy import unknown_vllm_version
from fleetplan.datasets.servegen import GapMode
from fleetplan.fileio import InputModel, input_field

#: Tensor-parallel degrees tried when a model gives no ``tp`` list (scenario models and tenant models alike).
DEFAULT_TP_DEGREES: tuple[int, ...] = (1, 2, 4, 8)


#: Words naming a list's entries in error messages ("tenant chat, model Llama-3.1-8B: ...").
ENTRY_LABELS: dict[str, str] = {"sites": "site", "models": "model", "tenants": "tenant", "pool": "pool entry"}


Notes = str | list[str] | None


_TP_DESCRIPTION = (f"tensor-parallel degrees to consider: a list of {', '.join(map(str, TP_DEGREES))} (or one of "
                   f"them); default {list(DEFAULT_TP_DEGREES)}")


_MIX_ONE_FORM = [{"required": ["trace"]},
                 {"required": ["input_tokens_mean", "input_tokens_p95", "output_tokens_mean", "output_tokens_p95"]}]


def _slo_key(metric: str, pct: int, rng: tuple[float, float], what: str, fix: str):
    return input_field(None, ge=rng[0], le=rng[1], description=f"{what} at the {pct}th percentile of the model's "
                       "requests, seconds", fix=fix)


_TTFT_FIX, _TPOT_FIX, _E2E_FIX = ("give seconds (e.g. 0.5 for 500 ms)", "give seconds (e.g. 0.05 for 50 ms)",
                                  "give seconds (e.g. 30 for 30 s)")


class SLOSpec(InputModel):
    """Latency targets of a model's traffic, seconds: one TTFT and one TPOT target, each at a percentile (p50, p90,
    p95 or p99: ``ttft_p99_s``, ``tpot_p95_s``, ...), an optional end-to-end target, and an optional attainment
    (share of requests meeting all targets at once)."""

    ttft_p50_s: float | None = _slo_key("ttft", 50, TTFT_P95_RANGE_S, "time to first token", _TTFT_FIX)
    ttft_p90_s: float | None = _slo_key("ttft", 90, TTFT_P95_RANGE_S, "time to first token", _TTFT_FIX)
    ttft_p95_s: float | None = _slo_key("ttft", 95, TTFT_P95_RANGE_S, "time to first token", _TTFT_FIX)
    ttft_p99_s: float | None = _slo_key("ttft", 99, TTFT_P95_RANGE_S, "time to first token", _TTFT_FIX)
    tpot_p50_s: float | None = _slo_key("tpot", 50, TPOT_P95_RANGE_S, "time per output token", _TPOT_FIX)
    tpot_p90_s: float | None = _slo_key("tpot", 90, TPOT_P95_RANGE_S, "time per output token", _TPOT_FIX)
    tpot_p95_s: float | None = _slo_key("tpot", 95, TPOT_P95_RANGE_S, "time per output token", _TPOT_FIX)
    tpot_p99_s: float | None = _slo_key("tpot", 99, TPOT_P95_RANGE_S, "time per output token", _TPOT_FIX)
    e2e_p50_s: float | None = _slo_key("e2e", 50, E2E_RANGE_S, "end-to-end latency (arrival to last token)",
                                       _E2E_FIX)
    e2e_p90_s: float | None = _slo_key("e2e", 90, E2E_RANGE_S, "end-to-end latency (arrival to last token)",
                                       _E2E_FIX)
    e2e_p95_s: float | None = _slo_key("e2e", 95, E2E_RANGE_S, "end-to-end latency (arrival to last token)",
                                       _E2E_FIX)
    e2e_p99_s: float | None = _slo_key("e2e", 99, E2E_RANGE_S, "end-to-end latency (arrival to last token)",
                                       _E2E_FIX)
    attainment: float | None = input_field(
        None, ge=ATTAINMENT_RANGE[0], le=ATTAINMENT_RANGE[1], description="share of the model's requests that must "
        "meet all of its targets at once, e.g. 0.99", fix="give a share of requests, e.g. 0.99")

    def _given(self, metric: str) -> list[tuple[int, float]]:
        return [(p, getattr(self, f"{metric}_p{p}_s")) for p in SLO_PERCENTILES
                if getattr(self, f"{metric}_p{p}_s") is not None]

    @model_validator(mode="after")
    def _one_per_metric(self) -> SLOSpec:
        for metric, required in (("ttft", True), ("tpot", True), ("e2e", False)):
            given = self._given(metric)
            keys = [f"{metric}_p{p}_s" for p in SLO_PERCENTILES]
            if len(given) > 1:
                raise ValueError(f"slo gives {len(given)} {metric.upper()} targets "
                                 f"({', '.join(f'{metric}_p{p}_s' for p, _ in given)}); give one of {', '.join(keys)}")
            if required and not given:
                raise ValueError(f"slo needs a {metric.upper()} target: one of {', '.join(keys)} (seconds)")
        return self

    def to_slo(self) -> SLO:
        """The :class:`~fleetplan.costmodels.slo.SLO` record these keys describe."""
        (tp, tv), = self._given("ttft")
        (pp, pv), = self._given("tpot")
        e2e = self._given("e2e")
        return SLO(tv, pv, ttft_percentile=float(tp), tpot_percentile=float(pp),
                   e2e_s=e2e[0][1] if e2e else None, e2e_percentile=float(e2e[0][0]) if e2e else 95.0,
                   attainment=self.attainment)


_TOKENS_LOW, _TOKENS_HIGH = TOKENS_PER_REQUEST_RANGE


class TokenMixSpec(InputModel, json_schema_extra={"oneOf": _MIX_ONE_FORM}):
    """Token lengths of a model's requests: those of a shipped trace ({trace: azure-conv}) or the four statistics."""

    trace: str | None = input_field(None, description="a shipped trace whose token lengths to use, e.g. azure-conv "
                                    "(list them with `fleetplan data traces`)")
    input_tokens_mean: float | None = input_field(None, ge=_TOKENS_LOW, le=_TOKENS_HIGH,
                                                  description="mean prompt length, tokens")
    input_tokens_p95: float | None = input_field(None, ge=_TOKENS_LOW, le=_TOKENS_HIGH,
                                                 description="95th-percentile prompt length, tokens")
    output_tokens_mean: float | None = input_field(None, ge=_TOKENS_LOW, le=_TOKENS_HIGH,
                                                   description="mean output length, tokens")
    output_tokens_p95: float | None = input_field(None, ge=_TOKENS_LOW, le=_TOKENS_HIGH,
                                                  description="95th-percentile output length, tokens")

    @model_validator(mode="after")
    def _one_form(self) -> TokenMixSpec:
        stats = {k: getattr(self, k) for k in ("input_tokens_mean", "input_tokens_p95", "output_tokens_mean",
                                                "output_tokens_p95")}
        if self.trace is not None:
            if any(v is not None for v in stats.values()):
                raise ValueError("give either 'trace' or the four token statistics under token_mix, not both")
            return self
        missing = [k for k, v in stats.items() if v is None]
        if missing:
            raise ValueError(f"token_mix is missing {', '.join(missing)}; give {{trace: azure-conv}} or all four "
                             "token statistics")
        return self


class DisaggregationSpec(InputModel):
    """Prefill/decode disaggregation (issue 17): the planner may serve a model's demand, window by window, by
    prefill replicas that ship the KV cache to decode replicas (same site: the inter-node link; another site: the
    WAN, with the KV and prompt bytes billed at the route's egress bands) instead of colocated replicas."""

    enabled: bool = input_field(False, description="let the planner choose prefill and decode pools")
    models: list[str] | None = input_field(None, description="only these models (scenario names); all when absent")
    cross_site: bool = input_field(True, description="prefill at one site and decode at another (KV over the WAN)")
    prefill_only_sites: list[str] = input_field(
        default_factory=list, description="sites whose pools may only prefill (no colocated, decode or shared "
        "replicas): e.g. a far, cheap region users must not be served from, as the ledger's split assumes")
    kv_egress_usd_per_gb: float | None = input_field(
        None, ge=0, le=5, description="flat USD per GB for KV and prompt bytes crossing sites, instead of the routes' "
        "egress tables (a what-if, e.g. near the break-even price)", fix="give USD per GB, e.g. 0.02")

    @model_validator(mode="after")
    def _keys_need_enabled(self) -> DisaggregationSpec:
        idle = sorted(self.model_fields_set - {"enabled"})
        if idle and not self.enabled:
            keys = ", ".join(idle)
            raise ValueError(f"{keys} {'has' if len(idle) == 1 else 'have'} no effect while enabled is false; set "
                             f"enabled: true to plan with prefill and decode pools, or remove {keys}")
        return self


class ArrivalsSpec(InputModel):
    """Burstiness of arrivals inside a window: capacity is sized for peak factor × each window's rate (the billed
    demand and its egress stay the window's rate). Give peak_factor, or from_trace (with interval_s and quantile)
    to measure it (:func:`fleetplan.costmodels.arrivals.peak_rate_factor`)."""

    peak_factor: float | None = input_field(
        None, ge=1, le=10, description="capacity is sized for this × each window's rate, e.g. 1.4",
        fix="give a factor of at least 1, e.g. 1.4")
    from_trace: str | None = input_field(
        None, min_length=1, description="a shipped trace name or trace file whose arrivals give the factor: the "
        "quantile of its interval_s rates over its window's mean rate, e.g. azure-conv")
    interval_s: float = input_field(60.0, ge=1, le=3600, description="counting interval of from_trace, seconds",
                                    fix="give seconds, e.g. 60")
    quantile: float = input_field(0.95, gt=0, le=1, description="quantile of the interval rates of from_trace",
                                  fix="give a quantile in (0, 1], e.g. 0.95")

    @model_validator(mode="after")
    def _one_source(self) -> ArrivalsSpec:
        if (self.peak_factor is None) == (self.from_trace is None):
            raise ValueError("give one of peak_factor (e.g. 1.4) or from_trace (e.g. azure-conv)")
        if self.peak_factor is not None and {"interval_s", "quantile"} & self.model_fields_set:
            raise ValueError("interval_s and quantile measure from_trace; with peak_factor leave them out")
        return self


class SpeculativeSchema(InputModel):
    """Speculative decoding on a model's replicas (:class:`fleetplan.costmodels.engine.Speculation`)."""

    acceptance_rate: float = input_field(
        ..., ge=0.0, le=1.0, description="share of drafted tokens the target accepts (vLLM's draft acceptance rate, "
        "measured for this draft, target and workload)", fix="e.g. 0.7")
    num_speculative_tokens: int = input_field(4, ge=1, le=64, description="tokens drafted per step (vLLM "
                                              "num_speculative_tokens)")
    method: Literal["draft_model", "ngram"] = input_field(
        "draft_model", description="draft_model: a smaller model run on the replica's GPUs; ngram: prompt lookup "
        "(no GPU work)")
    draft_model: str | None = input_field(None, min_length=1, description="the draft model's catalog name (method "
                                          "draft_model), e.g. Llama-3.1-8B for Llama-3.1-70B")


class PrefixHitFromTrace(InputModel):
    """A prefix-cache hit rate measured from a trace's block hashes (``engine: {prefix_hit_rate: {from_trace: ...}}``):
    per option, LRU over the option's KV budget
    (:func:`fleetplan.datasets.kv_tiers.trace_hit_rate`, the host KV tier's method)."""

    from_trace: str = input_field(
        ..., min_length=1, description="JSON Lines with hash_ids per request (512-token blocks; relative to the "
        "scenario's folder), or a shipped name: mooncake-conversation, mooncake-synthetic")
    requests: int = input_field(3000, ge=1, le=10_000_000, description="first requests of from_trace read")


class EngineSchema(InputModel):
    """The serving engine of a model's replicas (:class:`fleetplan.costmodels.engine.EngineConfig`); every key is
    optional and an unset key takes vLLM's default (for the GPU, for the token budget and the sequence cap)."""

    mode: Literal["vllm-v1", "prefill-first"] = input_field(
        "vllm-v1", description=f"scheduler: one of {', '.join(ENGINE_MODES)} (vllm-v1: chunked prefill, vLLM's "
        "default; prefill-first: whole prefills with priority over decode)")
    max_num_batched_tokens: int | None = input_field(
        None, ge=1, le=1_048_576, description="token budget of one step (vLLM --max-num-batched-tokens); default "
        "vLLM's: 8192 on GPUs of >= 70 GiB other than A100, else 2048")
    max_num_seqs: int | None = input_field(None, ge=1, le=65_536, description="most running sequences (vLLM "
                                           "--max-num-seqs); default vLLM's: 1024 / 256 as above")
    prefix_caching: bool = input_field(True, description="automatic prefix caching (vLLM V1's default: on)")
    prefix_hit_rate: float | PrefixHitFromTrace = input_field(
        0.0, description="share of prompt tokens found in the prefix cache (not recomputed), in [0, 1); 0 unless "
        "known from the workload; or {from_trace: FILE} to measure it per option from a trace's block hashes",
        fix="give a share in [0, 1), e.g. 0.3, or {from_trace: mooncake-conversation}")
    version: str = input_field(
        "0.11", min_length=1, description="engine version the plan assumes, e.g. \"0.11\" (quoted: text)",
        fix='quote the version, e.g. version: "0.10" (unquoted, YAML reads 0.10 as the number 0.1)')
    kv_read_fraction: float = input_field(
        1.0, gt=0.0, le=1.0, description="share of each sequence's KV a decode step reads: 1 for dense attention, "
        "below 1 for a long-context sparse decode (traffic only: its quality change is not modelled)")
    speculative: SpeculativeSchema | None = input_field(
        None, description="speculative decoding (off unless given): acceptance_rate, num_speculative_tokens, "
        "method, draft_model")

    @field_validator("version")
    @classmethod
    def _a_release(cls, v: str) -> str:
        # 'version: "0.99"' was planned with vLLM 0.11's constants "extrapolated" to a release that does not exist
        why = unknown_vllm_version(v)
        if why and f"vLLM {v}" not in {framework for framework, _ in load_framework_table()}:  # '0.5.x (Argonne)'
            raise ValueError(why)
        return v

    def to_engine(self, base: EngineConfig | None = None) -> EngineConfig:
        """The record, with the keys given here over ``base`` (the options' engine for a model's); a hit rate
        ``{from_trace: ...}`` is recorded as 0 here, each option's rate being set when it is
        sized (:func:`fleetplan.scenario.options.option_engine`)."""
        given = self.model_dump(exclude_unset=True)
        if isinstance(self.prefix_hit_rate, PrefixHitFromTrace):
            given["prefix_hit_rate"] = 0.0
        return engine_from_mapping(given, base) if base is not None else engine_from_mapping(given)


class HostTierSpec(InputModel):
    """A host KV tier on every dedicated replica (:mod:`fleetplan.costmodels.kvtiers`): host DRAM and local NVMe of
    the node each GPU type ships in (``datasets/data/hardware/host_tiers.csv``), prefix-block popularity from a
    trace with block hashes."""

    block_trace: str = input_field(
        "mooncake-conversation", min_length=1, description="JSON Lines with hash_ids per request (512-token blocks; "
        "relative to the scenario's folder), or a shipped name: mooncake-conversation, mooncake-synthetic; its reuse "
        "stands for the models' workload")
    requests: int = input_field(3000, ge=1, le=10_000_000, description="first requests of block_trace read")
    dram_share: float = input_field(0.5, ge=0.0, le=1.0, description="share of the node's host memory (per GPU) "
                                    "given to the KV tier", fix="give a share between 0 and 1, e.g. 0.5")
    spill_share: float = input_field(0.5, ge=0.0, le=1.0, description="share of the DRAM tier reserved for running "
                                     "sequences swapped out above HBM's room; the rest caches prefix blocks",
                                     fix="give a share between 0 and 1, e.g. 0.5")
    nvme_share: float = input_field(0.5, ge=0.0, le=1.0, description="share of the node's local NVMe (per GPU) "
                                    "caching prefix blocks (0: no NVMe tier)",
                                    fix="give a share between 0 and 1, e.g. 0.5")


class SpreadSpec(InputModel):
    """The spread of a model's capacity (constraint (18)): in every window, at most this share of the model's
    capacity at one site / in one pool. Capacity = (1 - margin) × capacity × replicas of its dedicated options plus,
    per shared GPU it resides on, (1 - margin) × its capacity there alone; so a site (pool) that fails takes at most
    this share with it."""

    max_share_per_site: float | None = input_field(
        None, gt=0, le=1, description="most of a model's capacity at one site in any window, a share in (0, 1]; "
        "absent or 1: no bound", fix="give a share such as 0.6 (at most 60% at one site)")
    max_share_per_pool: float | None = input_field(
        None, gt=0, le=1, description="most of a model's capacity in one pool (GPU type at a site, pricing model) "
        "in any window, a share in (0, 1]; absent or 1: no bound", fix="give a share such as 0.6")


class ScenarioOptions(InputModel):
    """Planning options; every key is optional."""

    window_length_s: float = input_field(
        3600.0, ge=60, le=86400, description="length of one planning window, whole seconds; every model's demand "
        "is read at this length", fix="give whole seconds, e.g. 3600 for 1-hour windows")

    @field_validator("window_length_s")
    @classmethod
    def _whole_seconds(cls, v: float) -> float:
        # Windows are clock intervals: labelled HH:MM, scheduled by cron (export), found from the time of day (the
        # service, diff --at). A fraction of a second (3600.5) shifts every later window's start off the clock
        # (window 23 of 3600.5 s starts at 23:00:11.5) and is almost surely a typo.
        if v != int(v):
            raise ValueError(f"{v:g} s is not a whole number of seconds; windows are clock intervals (labelled "
                             "HH:MM, scheduled by cron): give whole seconds, e.g. 3600 for 1-hour windows")
        return v
    margin: float = input_field(0.1, ge=0, le=0.9, description="share of every replica's SLO capacity kept as "
                                "headroom (capacity is used up to 1 - margin)", fix="e.g. 0.1 keeps 10% headroom")
    demand_rate: Literal["peak", "mean"] = input_field(
        "peak", description="plan each window for its busiest sub-interval's rate (peak) or its mean rate")
    weight_dtype: DType = input_field("bf16", description="data type of the model weights")
    kv_dtype: DType = input_field("bf16", description="data type of the KV cache")
    calibration: str | None = input_field(
        None, description="roofline calibration CSV (written by fleetplan calibrate), relative to the scenario file; "
        "default: the shipped one (a current vLLM)", fix="give the path of a file written by fleetplan calibrate")
    memory_utilization: float = input_field(0.9, ge=0.3, le=1.0, description="share of GPU memory a replica may use "
                                            "(the rest is runtime reserve)")
    shared_kv_fraction: float = input_field(0.5, ge=0.1, le=1.0, description="most of a shared GPU's memory one "
                                            "resident model may use")
    max_shared_gpus_per_pool: int = input_field(8, ge=0, le=1000, description="most GPUs of a pool that host "
                                                "several models")
    max_models_per_shared_gpu: int = input_field(2, ge=1, le=16, description="residents per shared GPU; a shared "
                                                 "model is sized for its TPOT target / this")
    min_batch: float = input_field(8, ge=1, le=4096, description="a replica whose KV cache holds fewer sequences "
                                   "(at the mean length) is left out")
    load_bandwidth_bytes_per_s: float = input_field(
        1.0e9, ge=1e6, le=1e12, description="weight loading speed, bytes/s: prices the start of a replica",
        fix="give bytes per second, e.g. 1.0e9")
    usd_per_migration: float = input_field(0.0, ge=0, le=1e4, description="flat cost added to every replica start, "
                                           "USD")
    bytes_per_token: float = input_field(4.0, ge=0, le=1e3, description="network bytes per token of request and "
                                         "response text (for egress)")
    allowed_gpus: list[str] | None = input_field(None, description="only these GPU types (catalog names or "
                                                 "aliases) are planned; all when absent")
    pricing_model: str = input_field("on-demand", description="pricing model of every pool unless a site or "
                                     f"inventory row says otherwise: one of {', '.join(PRICING_MODELS)}")
    price_date: str | None = input_field(
        None, pattern=r"^\d{4}-\d{2}-\d{2}$", description="catalog prices as of this date (YYYY-MM-DD): for each "
        "cloud, instance, region and pricing model the newest snapshot dated on or before it (undated snapshots "
        "count as the oldest); default: the newest snapshot. Your own price rows always win",
        fix="give a date as YYYY-MM-DD, e.g. 2025-05-31")
    price_snapshots: Literal["one", "mixed"] = input_field(
        "one", description="'one': every pool priced from the catalogs takes its price from snapshots of one date "
        "(an undated snapshot counts as one date), and a scenario whose pools would mix dates is refused, naming "
        "them; 'mixed': pools may use snapshots of different dates (the plan lists each pool's date). Prices "
        "given in the scenario or your own price rows are not snapshots and never count",
        fix="one or mixed")
    inter_node_link: str | None = input_field(None, description="links.csv name of the link between the nodes of a "
                                              "pipeline-parallel replica (the default link when absent)")
    disaggregation: DisaggregationSpec = input_field(default_factory=DisaggregationSpec,
                                                     description="prefill/decode pools (off by default)")
    arrivals: ArrivalsSpec | None = input_field(
        None, description="every model's arrival burstiness: capacity sized for a peak factor × each window's rate "
        "(a model's own arrivals key wins); default none (factor 1)")
    engine: EngineSchema | None = input_field(
        None, description="every model's serving engine (a model's own engine keys win); default vLLM V1 with "
        "chunked prefill and vLLM's defaults ({mode: prefill-first} plans the engine of earlier plans)")
    host_tier: HostTierSpec | None = input_field(
        None, description="a host KV tier (DRAM and NVMe) on every dedicated single-node replica: prefix hits "
        "fetched instead of recomputed, running sequences swapped out above HBM's room; default none (HBM only)")
    spread: SpreadSpec | None = input_field(
        None, description="every model's spread over sites and pools (a model's own spread key wins); default none "
        "(a window's whole capacity may sit at one site)")


class ScenarioFiles(InputModel):
    """The user's own catalog rows (CSV or YAML with the shipped files' columns); paths relative to the scenario."""

    gpus: str | None = input_field(None, description="extra GPU specs")
    models: str | None = input_field(None, description="extra model architectures")
    prices: str | None = input_field(None, description="extra GPU prices")


class InventoryRow(InputModel):
    """GPUs of one type at a site."""

    gpu: str = input_field(description="GPU type: a catalog name or alias, e.g. H100")
    nodes: int = input_field(ge=0, le=100_000, description="nodes of this GPU type at the site")
    gpus_per_node: TpDegree = input_field(8, description="GPUs per node (a pipeline stage spans one node, so a "
                                          f"tensor-parallel degree: {', '.join(map(str, TP_DEGREES))})")
    usd_per_gpu_hour: float | None = input_field(None, ge=0, le=1000, description="price per GPU-hour, USD, of the "
                                                 "row's pricing model (a committed row: per committed GPU-hour; an "
                                                 "owned row: the marginal cost of a busy hour); looked up in the price "
                                                 "catalogs when absent (owned: the power model)")
    pricing_model: str | None = input_field(None, description="overrides the site's and options' pricing_model; "
                                            "committed-1y/-3y, reserved and negotiated are commitments the planner "
                                            "sizes, owned GPUs cost their power, spot needs interruption_rate")
    name: str | None = input_field(None, min_length=1, description="the pool's id (default 'site/gpu'); needed when "
                                   "a site has several rows of one GPU type (owned + committed + on-demand + spot)")
    interruption_rate: float | None = input_field(None, ge=0, lt=1, description="spot rows: expected share of spot "
                                                  "GPU-hours lost to preemption; derates the pool's capacity",
                                                  fix="give the share of spot hours lost, e.g. 0.05")
    fallback: str | None = input_field(None, description="spot rows: name of the pool (same site and GPU type; "
                                       "on-demand or owned, not spot or committed) whose free GPUs must cover "
                                       "interruption_rate × the spot GPUs in use")
    on_demand_usd_per_gpu_hour: float | None = input_field(None, gt=0, le=1000, description="committed rows: the "
                                                           "on-demand rate for the break-even utilization only (the "
                                                           "cost is unchanged: overflow is priced at the site's "
                                                           "on-demand row); allowed only when the site has no "
                                                           "on-demand row of this GPU type, or equal to its rate "
                                                           "(default: that row's rate, else the catalogs')")


class SiteSpec(InputModel):
    """A site (cloud region or zone) and its GPU inventory."""

    name: str = input_field(min_length=1, description="cloud:region[:zone], e.g. aws:us-east-1")
    pricing_model: str | None = input_field(None, description="overrides options.pricing_model for this site")
    inventory: list[InventoryRow] = input_field(min_length=1, description="GPU types and node counts")


class ServegenDemand(InputModel):
    """Demand shaped like a ServeGen day curve, rescaled to a mean rate."""

    series: str = input_field(description="ServeGen series, e.g. m-small (list them with `fleetplan data traces`)")
    mean_rate_req_per_s: float = input_field(gt=0, le=1e7, description="mean request rate over the day, req/s")
    day: int | str = input_field("mean", description="a day of the series (0-based) or 'mean' for the mean day")
    gaps: GapMode = input_field(
        "interpolate", description="missing-data windows: interpolated, or masked (an error if a window is empty)")


class TraceDemand(InputModel, json_schema_extra={"oneOf": [{"required": ["name"]}, {"required": ["file"]}]}):
    """Demand read from a request trace: a shipped one by name, or a file."""

    name: str | None = input_field(None, description="a shipped trace, e.g. azure-conv")
    file: str | None = input_field(None, description="a trace file, relative to the scenario")
    rate_scale: float = input_field(1.0, ge=1e-6, le=1e6, description="arrival times are compressed by this factor "
                                    "(2 doubles the rate)")

    @model_validator(mode="after")
    def _name_or_file(self) -> TraceDemand:
        if (self.name is None) == (self.file is None):
            raise ValueError("demand.trace needs 'name' (a shipped trace) or 'file', exactly one")
        return self


class DayCurveDemand(InputModel):
    """Demand from a day-curve CSV (one rate per window)."""

    file: str = input_field(description="day-curve CSV, relative to the scenario; its windows must have "
                            "options.window_length_s")
    scale: float = input_field(1.0, ge=0, le=1e6, description="multiplies every rate")


_DEMAND_KINDS = ("servegen", "trace", "day_curve", "rates")


class DemandSpec(InputModel, json_schema_extra={"oneOf": [{"required": [k]} for k in _DEMAND_KINDS]}):
    """A model's demand per window: exactly one of servegen, trace, day_curve, rates."""

    servegen: ServegenDemand | None = input_field(None, description="a ServeGen day curve")
    trace: TraceDemand | None = input_field(None, description="a request trace")
    day_curve: DayCurveDemand | None = input_field(None, description="a day-curve CSV")
    rates: list[Annotated[float, Field(ge=0)]] | None = input_field(
        None, min_length=1, description="request rate per window, req/s, 0 or more")

    @model_validator(mode="after")
    def _exactly_one(self) -> DemandSpec:
        given = [k for k in _DEMAND_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(_DEMAND_KINDS)} under 'demand'"
                             + (f" (got {', '.join(given)})" if given else ""))
        return self

    @property
    def kind(self) -> str:
        """Which of servegen, trace, day_curve, rates is given."""
        return next(k for k in _DEMAND_KINDS if getattr(self, k) is not None)


class ProfileSpec(InputModel):
    """A measured performance profile of the model on one GPU type at one tensor-parallel degree; it replaces the
    roofline for that (GPU, tp) in the planner and the simulator."""

    gpu: str = input_field(description="GPU type the profile was measured on: a catalog name or alias, e.g. H100")
    tp: TpDegree = input_field(1, description="tensor-parallel degree of the measured replica")
    file: str | list[str] = input_field(description="profile file(s), relative to the scenario; a glob pattern "
                                        "(e.g. runs/*.json) or a list for several vllm bench serve runs")
    format: ProfileFormat | None = input_field(
        None, description="file format; detected from the content when absent")

    @property
    def files(self) -> list[str]:
        """``file`` as a list."""
        return list(self.file) if isinstance(self.file, list) else [self.file]


class RequestClassSpec(InputModel):
    """A request-size class of a model: its share of the model's demand and its own token lengths (Mélange's
    buckets). A replica serves a mix of its model's classes with additive load; each class may go to another GPU
    type."""

    name: str = input_field(min_length=1, description="class name, e.g. short-prompt")
    share: float = input_field(gt=0, le=1, description="share of the model's requests in this class (the shares "
                               "of a model's classes sum to 1)")
    token_mix: TokenMixSpec = input_field(description="this class's token lengths: the four statistics (or a trace)")
    input_tokens_max: float | None = input_field(None, gt=0, description="longest prompt of the class, tokens "
                                                 "(a request belongs to the first class whose bounds hold it; the "
                                                 "simulator routes by it); none: no bound")
    output_tokens_max: float | None = input_field(None, gt=0, description="longest output of the class, tokens; "
                                                  "none: no bound")


class ClassEdgesSpec(InputModel):
    """Request classes cut from the model's token-mix trace at prompt-length edges: each class (prompts in
    (previous edge, edge], the last one open) gets the share of the trace's requests and their token mix. Exactly
    one of the two lists, ascending (checked where the classes are cut, for a one-line error)."""

    prompt_edges: list[Annotated[float, Field(gt=0)]] | None = input_field(
        None, description="prompt-length class edges, tokens, ascending, e.g. [1000, 1300]")
    prompt_quantiles: list[Annotated[float, Field(gt=0, lt=1)]] | None = input_field(
        None, description="or the edges as quantiles of the trace's prompt lengths, e.g. [0.5, 0.8]")


class ScenarioModel(InputModel):
    """One model to serve: parallelism options, replica bounds, SLO, token mix and demand."""

    name: str = input_field(min_length=1, description="catalog model name or alias, e.g. Llama-3.1-8B")
    tp: Annotated[list[TpDegree], Field(min_length=1)] | TpDegree = input_field(list(DEFAULT_TP_DEGREES),
                                                                              description=_TP_DESCRIPTION)
    min_replicas: int = input_field(0, ge=0, le=10_000, description="replicas kept in every window")
    max_replicas: int | None = input_field(None, ge=1, le=100_000, description="most replicas in a window")
    priority: int = input_field(0, ge=-1_000_000, le=1_000_000, description="when demand exceeds the inventory "
                                "(plan --best-effort, the service), higher priorities are served first",
                                fix="give a whole number; higher is served first")
    slo: SLOSpec = input_field(description="latency targets, seconds")
    origin_site: str | None = input_field(None, description="a site of the scenario where the model's traffic "
                                          "comes from (egress is charged when it is served elsewhere)")
    token_mix: TokenMixSpec = input_field(description="token lengths: {trace: azure-conv} or the four statistics")
    demand: DemandSpec = input_field(description="request rate per window")
    source: str | None = input_field(None, description="free-text note on where the model's numbers come from")
    profiles: list[ProfileSpec] | None = input_field(
        None, description="measured performance per (GPU, tp): vllm bench serve or guidellm results, an AIBrix / "
        "Mélange throughput table, or a step-time CSV; replaces the roofline for that GPU and tp")
    config: str | None = input_field(None, description="a Hugging Face config.json giving the architecture, "
                                     "relative to the scenario (the parameter count is computed from it); 'name' "
                                     "is then this model's name")
    base_model: str | None = input_field(None, description="for a fine-tune: the catalog model (or one of "
                                         "files.models) whose architecture it shares; 'name' is the fine-tune's")
    params: float | None = input_field(None, ge=1e6, le=1e13, description="the parameter count you expect (a count, "
                                       "not billions); an error when the architecture's is more than 10% off",
                                       fix="give a count such as 8.03e9")
    weight_dtype: DType | None = input_field(None, description="this model's weight data type (default: "
                                             "options.weight_dtype), e.g. fp8 or int4 for a quantized checkpoint")
    kv_dtype: DType | None = input_field(None, description="this model's KV-cache data type (default: "
                                         "options.kv_dtype), e.g. fp8")
    classes: list[RequestClassSpec] | ClassEdgesSpec | Literal["auto"] | None = input_field(
        None, description="request-size classes: a list of (name, share, token_mix, bounds), or {prompt_edges} / "
        "{prompt_quantiles} cut from the token-mix trace, or 'auto' (the trace's prompt quantiles 0.5 and 0.8); "
        "each class gets its share of the demand and its own capacity per GPU type; a replica serves a mix of "
        "classes with additive load")
    arrivals: ArrivalsSpec | None = input_field(
        None, description="this model's arrival burstiness (instead of options.arrivals): capacity sized for a "
        "peak factor × each window's rate")
    engine: EngineSchema | None = input_field(
        None, description="this model's serving engine: the keys given here over options.engine")
    spread: SpreadSpec | None = input_field(
        None, description="this model's spread over sites and pools: the keys given here over options.spread's (1: "
        "no bound for this model)")

    @field_validator("tp")
    @classmethod
    def _tp_once(cls, v: list[int] | int) -> list[int] | int:
        if isinstance(v, list):
            twice = sorted({t for t in v if v.count(t) > 1})
            if twice:
                raise ValueError(f"tp {', '.join(map(str, twice))} is listed twice; give each degree once")
        return v

    @model_validator(mode="after")
    def _classes_sum_to_one(self) -> ScenarioModel:
        if (self.classes == "auto" or isinstance(self.classes, ClassEdgesSpec)) and self.token_mix.trace is None:
            raise ValueError("classes cut at prompt edges need token_mix: {trace: ...} (the requests to split)")
        if isinstance(self.classes, list) and self.classes:
            names = [c.name for c in self.classes]
            if len(set(names)) != len(names):
                raise ValueError(f"classes: two classes have the same name ({', '.join(names)})")
            total = sum(c.share for c in self.classes)
            if abs(total - 1.0) > 1e-6:
                raise ValueError(f"classes: the shares sum to {total:.9g}, not 1 (within 1e-6); make them add up to "
                                 "exactly 1")
        return self

    @model_validator(mode="after")
    def _one_architecture(self) -> ScenarioModel:
        if self.config is not None and self.base_model is not None:
            raise ValueError("gives both config and base_model; a fine-tune takes its base's architecture "
                             "(base_model) or a config.json (config), not both")
        return self

    @property
    def tp_degrees(self) -> list[int]:
        """``tp`` as a list."""
        return list(self.tp) if isinstance(self.tp, list) else [self.tp]


class ScenarioFile(InputModel):
    """A planner scenario: sites with GPU inventory, models with SLOs and demand, and planning options
    (``fleetplan plan SCENARIO``)."""

    name: str | None = input_field(None, min_length=1, description="label of the scenario")
    description: str | None = input_field(None, description="free text")
    notes: Notes = input_field(None, description="free text")
    options: ScenarioOptions = input_field(default_factory=ScenarioOptions, description="planning options")
    files: ScenarioFiles | None = input_field(None, description="the user's own catalog rows")
    sites: list[SiteSpec] = input_field(min_length=1, description="sites and their GPU inventory")
    models: list[ScenarioModel] = input_field(min_length=1, description="models to serve")


class PoolEntry(InputModel):
    """Nodes of one GPU type in the shared pool."""

    name: str = input_field(min_length=1, description="node name (with count > 1: name-0, name-1, ...)")
    gpu: str = input_field(description="GPU type: a catalog name or alias, e.g. H100")
    gpus_per_node: int = input_field(ge=1, le=64, description="GPUs per node")
    count: int = input_field(1, ge=1, le=100_000, description="number of such nodes")
    site: str = input_field("", description="where the nodes run (informational)")


class TenantModel(InputModel):
    """One model of a tenant whose demand is derived from request rates through the cost models."""

    name: str = input_field(min_length=1, description="catalog model name or alias, e.g. Llama-3.1-8B")
    rates_req_per_s: list[Annotated[float, Field(ge=0, le=1e6)]] = input_field(
        min_length=1, description="request rate per window, req/s",
        fix="give the requests per second in that window (0 or more)")
    token_mix: TokenMixSpec | None = input_field(None, description="token lengths (default: the tenant's)")
    slo: SLOSpec | None = input_field(None, description="latency targets, seconds (default: the tenant's)")
    tp: Annotated[list[TpDegree], Field(min_length=1)] | TpDegree = input_field(list(DEFAULT_TP_DEGREES),
                                                                              description=_TP_DESCRIPTION)

    @property
    def tp_degrees(self) -> list[int]:
        """``tp`` as a list."""
        return list(self.tp) if isinstance(self.tp, list) else [self.tp]


#: A tenant's model list, as ``demand_from_models`` checks it.
TenantModels = Annotated[list[TenantModel], Field(min_length=1)]


class TenantReplay(InputModel):
    """What a tenant that gives its demand in GPUs serves, for ``fleetplan allocate --verify``: one model at one
    tensor-parallel degree, its token mix and SLO. The replay turns the tenant's GPUs per window into a request rate
    at that model's capacity per GPU under the SLO (:func:`fleetplan.scenario.tenants.tenant_workloads`)."""

    name: str = input_field(min_length=1, description="catalog model name or alias, e.g. Llama-3.1-8B")
    token_mix: TokenMixSpec | None = input_field(None, description="token lengths (default: the tenant's)")
    slo: SLOSpec | None = input_field(None, description="latency targets, seconds (default: the tenant's)")
    tp: TpDegree = input_field(1, description="tensor-parallel degree of one replica")


class TenantEntry(InputModel, json_schema_extra={"oneOf": [{"required": ["demand_gpus"]},
                                                           {"required": ["models"]}]}):
    """A team sharing the pool: quota, burst limit, priority, SLA target, interference class and demand (GPUs per
    window, or models with request rates)."""

    name: str = input_field(min_length=1, description="unique tenant name")
    quota_gpus: int = input_field(ge=0, le=100_000, description="guaranteed GPUs: each window the tenant gets "
                                  "min(quota_gpus, demand)")
    burst_gpus: int | None = input_field(None, ge=0, le=100_000, description="most GPUs held in a window "
                                         "(>= quota_gpus; default quota_gpus)")
    weight: float = input_field(1.0, ge=1e-6, le=1e6, description="priority weight", fix="give a positive weight")
    sla_target: float = input_field(1.0, ge=1e-6, le=1.0, description="share of demand that must be served",
                                    fix="give the share of demand to serve, e.g. 0.99")
    interference_class: str = input_field(min_length=1, description="a class of the interference table, e.g. "
                                          "interactive, batch, prefill, training")
    gpu_types: list[str] = input_field(default_factory=list, description="GPU types of the pool the tenant runs on "
                                       "(all when empty)")
    demand_gpus: list[Annotated[float, Field(ge=0, le=100_000)]] | None = input_field(
        None, min_length=1, description="GPUs wanted per window (may be fractional)",
        fix="give GPUs wanted in that window")
    models: TenantModels | None = input_field(None, description="models and request rates the demand is derived "
                                              "from (instead of demand_gpus)")
    slo: SLOSpec | None = input_field(None, description="default SLO of the tenant's models, seconds")
    token_mix: TokenMixSpec | None = input_field(None, description="default token mix of the tenant's models")
    replay: TenantReplay | None = input_field(None, description="the model a tenant that gives demand_gpus serves, "
                                              "for allocate --verify (none: the tenant is not replayed, e.g. "
                                              "training; its GPUs still share nodes)")
    notes: Notes = input_field(None, description="free text")
    description: str | None = input_field(None, description="free text")

    @model_validator(mode="after")
    def _one_demand(self) -> TenantEntry:
        if self.models is not None and self.demand_gpus is not None:
            raise ValueError("gives both demand_gpus and models; give one of them")
        if self.models is None and self.demand_gpus is None:
            raise ValueError("needs demand_gpus (GPUs per window) or models (request rates per window)")
        if self.models is not None and self.replay is not None:
            raise ValueError("gives both models and replay; a tenant with models is replayed on them, drop replay")
        return self


class TenantsFile(InputModel):
    """A multi-tenant pool: nodes, tenants and the interference table (``fleetplan allocate SCENARIO``)."""

    name: str = input_field("", description="label of the scenario")
    description: str | None = input_field(None, description="free text")
    notes: Notes = input_field(None, description="free text")
    window_s: float = input_field(3600.0, ge=1, le=86400, description="window length, seconds")
    interference: str | None = input_field(None, description="interference CSV (class_a, class_b, coefficient, "
                                           "source); the shipped coefficients when absent")
    pool: list[PoolEntry] = input_field(min_length=1, description="the pool's nodes")
    tenants: list[TenantEntry] = input_field(min_length=1, description="the tenants")
    weights: dict[str, float] | None = input_field(None, description="objective weights for --mode weighted, e.g. "
                                                   "{utilization: 1, isolation: 1, sla: 1}")
    order: list[str] | None = input_field(None, description="objective order for --mode lexicographic, e.g. "
                                          "[sla, utilization, isolation]")
    tolerance: float | None = input_field(None, ge=0, le=1, description="relative tolerance of earlier "
                                          "lexicographic stages")
