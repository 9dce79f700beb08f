"""Prefill here, decode there: the cost of three ways to serve one model's demand.

Options, on the same demand (rate λ req/s, token mix from a trace):

(a) ``colocated``: prefill and decode on the same replicas at the decode site (near the users), sized by
    :func:`fleetplan.costmodels.capacity.replica_capacity` for the default engine
    (:data:`~fleetplan.costmodels.engine.DEFAULT_ENGINE`, vLLM V1: prefills chunked onto decode steps).
(b) ``disaggregated``: a prefill pool and a decode pool at the decode site, sized separately; the KV cache crosses
    the site's inter-node link (InfiniBand / NVLink class, links.csv ``inter_node`` default), no egress.
(c) ``split``: the prefill pool at the prefill site, the decode pool at the decode site. The KV cache crosses the
    WAN: bytes = KV-cached prompt tokens × KV bytes per token; time = bytes / (link bandwidth × streams) + RTT,
    added to TTFT (the decode side asks for the cache and receives it: one round trip; ``streams`` = one connection
    per tensor-parallel rank of the prefill replica, each sending its shard, as links.csv gives per-flow bandwidth).
    Egress: KV at the route's class and tier, prompt text back the other way.

Pool sizing (the capacity model, never guesses; replicas = ceil(λ / (capacity × (1 − margin)))):

* prefill pool, by compute: a replica is an M/M/1 server with service time prefill_time_s(I_mean); its capacity
  is the largest λ with prefill_time_s(I_p95) + W_p95(λ) + KV transfer ≤ TTFT SLO, W_p95 = max(0, ln(ρ/0.05)) /
  (μ − λ) as in capacity.py (point 4);
* decode pool, by memory bandwidth and KV memory: the largest batch B ≤ KV budget / (KV bytes of a mean sequence)
  whose step time decode_step_time_s(B, I_p95 + O_p95/2) ≤ TPOT SLO; capacity = B / (O_mean × step(B))
  (Little's law);
* the tensor-parallel degree of each pool is the one needing the fewest GPUs (ties: smaller tp).

Every option serves responses to the users from the decode site (internet egress, same for all options).
Break-even values: the flat cross-site egress USD/GB at which (c) costs as much as the cheaper of (a) and (b), and
the mean prompt length (p95 scaled with it) from which (c) stops saving money.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleetplan.costmodels.calibration import Calibration, calibration_for
from fleetplan.costmodels.capacity import latency_at_rate, replica_capacity
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.energy import idle_fraction_for
from fleetplan.costmodels.engine import engine_or_default
from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.latency import TP_DEGREES, decode_step_time_s, prefill_time_s
from fleetplan.costmodels.ledger import SECONDS_PER_DAY, Flow, GpuPool, Ledger, build_ledger, egress_items
from fleetplan.costmodels.network import Link, route_class
from fleetplan.costmodels.prices import EgressTable, EgressTier, GpuPrice
from fleetplan.costmodels.queueing import mm1_wait_quantile_s
from fleetplan.costmodels.slo import SLO
from fleetplan.errors import InputError, UnknownNameError, check_range

OPTIONS = ("colocated", "disaggregated", "split")


@dataclass(frozen=True)
class SplitSpec:
    """Everything the comparison needs, resolved (catalog lookups done by
    :func:`fleetplan.scenario.split.make_spec`; this module only does the arithmetic).

    Attributes:
        model: the model.
        mix: token mix (tokens).
        rate_req_per_s: steady request rate served all day, req/s.
        slo: latency targets.
        prefill_site, decode_site: sites (users are near the decode site).
        prefill_gpu, decode_gpu: GPU records.
        prefill_price, decode_price: price rows at those sites (decode price also used by (a) and (b)).
        kv_table: egress table of the prefill→decode route; prompt_table: decode→prefill; response_table: decode
            site to the internet.
        wan_link: the prefill→decode link; local_link: the inter-node link inside a site.
        calibrations: roofline calibration rows by GPU name, with a 'default' row (GPUs without their own row).
        idle_fractions: idle board power / TDP by GPU name, with a 'default' row.
        text_bytes_per_token (bytes), usd_per_kwh (USD/kWh), pue, energy_billed: ledger assumptions.
        margin: capacity headroom (replicas = ceil(λ / (capacity × (1 − margin)))).
        kv_dtype, weight_dtype: data types.
        max_tp: largest tensor-parallel degree tried (the node size of the price rows).
        trace: the trace name (for reports).
    """

    model: Model
    mix: TokenMix
    rate_req_per_s: float
    slo: SLO
    prefill_site: str
    decode_site: str
    prefill_gpu: GPU
    decode_gpu: GPU
    prefill_price: GpuPrice
    decode_price: GpuPrice
    kv_table: EgressTable
    prompt_table: EgressTable
    response_table: EgressTable
    wan_link: Link
    local_link: Link
    calibrations: Mapping[str, Calibration]
    idle_fractions: Mapping[str, float]
    text_bytes_per_token: float
    usd_per_kwh: float
    pue: float
    margin: float = 0.1
    energy_billed: bool = False
    kv_dtype: str = "bf16"
    weight_dtype: str = "bf16"
    trace: str = ""

    def __post_init__(self) -> None:
        check_range(self.rate_req_per_s, field="rate_req_per_s", low=1e-6, high=1e6, unit="req/s")
        check_range(self.margin, field="margin", low=0.0, high=0.9)
        check_range(self.text_bytes_per_token, field="text_bytes_per_token", low=0.0, high=100)

    def calib(self, gpu: GPU) -> Calibration:
        """The roofline calibration row of ``gpu`` (the default row when it has none)."""
        return calibration_for(self.calibrations, gpu)

    def idle_fraction(self, gpu: GPU) -> float:
        """Idle board power / TDP of ``gpu`` (the default row when it has none)."""
        return idle_fraction_for(self.idle_fractions, gpu.name)

    @property
    def kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token(self.kv_dtype)

    def kv_bytes(self, prompt_tokens: float) -> float:
        """KV bytes of one prompt: KV-cached tokens × KV bytes per token."""
        return self.model.kv_tokens_cached(prompt_tokens) * self.kv_bytes_per_token

    @property
    def requests_per_day(self) -> float:
        return self.rate_req_per_s * SECONDS_PER_DAY


@dataclass(frozen=True)
class OptionResult:
    """One option's pools, traffic, latency and ledger.

    Attributes:
        name: 'colocated', 'disaggregated' or 'split'.
        pools: GPU pools; flows: traffic crossing a billed boundary.
        ttft_added_s: TTFT the KV transfer adds for a p95 prompt, seconds (0 for colocated).
        ttft_p95_s: modelled p95 TTFT at the day's load (each replica at rate / replicas), seconds: colocated by
            the capacity model (:func:`fleetplan.costmodels.capacity.latency_at_rate`); prefill/decode pools as
            prefill of the p95 prompt + the M/M/1 p95 wait of a prefill replica + the KV transfer (module
            docstring), the models the pools are sized with.
        slo_ok: True when the SLO holds; note: why not, or other remarks.
        ledger: the line items.
        kv_gb_per_request: KV GB one mean prompt moves (0 when nothing crosses a network).
        sizing: what sizes each pool, e.g. 'colocated: TTFT binds at tp 8 (...), 0.150 req/s per replica'.
    """

    name: str
    pools: tuple[GpuPool, ...]
    flows: tuple[Flow, ...]
    ttft_added_s: float
    ttft_p95_s: float
    slo_ok: bool
    note: str
    ledger: Ledger
    kv_gb_per_request: float = 0.0
    sizing: str = ""

    @property
    def gpus(self) -> int:
        """GPUs of all pools."""
        return sum(p.gpus for p in self.pools)

    @property
    def cross_site_gb_per_day(self) -> float:
        return sum(f.gb_per_day for f in self.flows if f.kind in ("kv", "prompt"))

    @property
    def cross_site_egress_usd_per_day(self) -> float:
        """Egress USD per day the cross-site flows (KV, prompts) add: all egress minus that of the other flows
        alone (so shared tables and tiers are handled)."""
        rest = [f for f in self.flows if f.kind not in ("kv", "prompt")]
        return self.ledger.egress_usd_per_day - sum(i.amount_usd_per_day for i in egress_items(self.name, rest))

    def summary(self) -> dict:
        s = self.ledger.summary()
        s.update(ttft_added_s=self.ttft_added_s, ttft_p95_s=self.ttft_p95_s, slo_ok=self.slo_ok, note=self.note,
                 gpus={p.role: p.gpus for p in self.pools}, tp={p.role: p.tp for p in self.pools},
                 sites={p.role: p.site for p in self.pools}, kv_gb_per_request=self.kv_gb_per_request,
                 sizing=self.sizing)
        return s


@dataclass(frozen=True)
class SplitResult:
    """The three options and the break-even values.

    Attributes:
        spec: the inputs.
        options: {name: OptionResult}.
        best_single_site: 'colocated' or 'disaggregated': the cheaper of those meeting the SLO.
        break_even_egress_usd_per_gb: flat cross-site egress price at which (c) costs as much as the best
            single-site option (0: (c) costs the same with free egress, to half a cent a day; negative: (c) costs
            more even with free egress; None: not applicable, see
            ``break_even_egress_note``).
        break_even_prompt_tokens: mean prompt length at which (c) stops saving money (None: not computed, or no
            crossing in the searched range; see ``break_even_note``).
        verdict: one line.
    """

    spec: SplitSpec
    options: dict[str, OptionResult]
    best_single_site: str
    break_even_egress_usd_per_gb: float | None
    break_even_prompt_tokens: float | None
    break_even_note: str
    verdict: str
    break_even_egress_note: str = ""

    @property
    def savings_usd_per_day(self) -> float | None:
        """Best single-site total minus the split's total (positive: the split saves); None when the split misses
        the SLO (a design that misses its targets has no cost to compare)."""
        if not self.options["split"].slo_ok:
            return None
        return (self.options[self.best_single_site].ledger.total_usd_per_day
                - self.options["split"].ledger.total_usd_per_day)

    def to_dict(self) -> dict:
        """One JSON-able object: per option the totals and latencies, and the break-even values."""
        s = self.spec
        return {
            "model": s.model.name, "trace": s.trace, "rate_req_per_s": s.rate_req_per_s,
            "input_tokens_mean": s.mix.input_tokens_mean, "input_tokens_p95": s.mix.input_tokens_p95,
            "output_tokens_mean": s.mix.output_tokens_mean, "prefill_site": s.prefill_site,
            "decode_site": s.decode_site, "kv_bytes_per_token": s.kv_bytes_per_token,
            "slo": {"ttft_p95_s": s.slo.ttft_s, "tpot_p95_s": s.slo.tpot_s},
            "options": {k: v.summary() for k, v in self.options.items()},
            "best_single_site": self.best_single_site, "savings_usd_per_day": self.savings_usd_per_day,
            "break_even_egress_usd_per_gb": self.break_even_egress_usd_per_gb,
            "break_even_egress_note": self.break_even_egress_note,
            "break_even_prompt_tokens": self.break_even_prompt_tokens, "break_even_note": self.break_even_note,
            "verdict": self.verdict,
        }


# ---- capacity of the two pools ----------------------------------------------------------------------------------

def prefill_replica_capacity(model: Model, gpu: GPU, mix: TokenMix, ttft_budget_s: float, *, tp: int,
                             calib: Calibration, weight_dtype: str = "bf16") -> tuple[float, float]:
    """(capacity req/s, p95 TTFT at capacity s) of one prefill replica on ``tp`` GPUs (module docstring); ``calib``:
    the GPU's roofline calibration row.

    Capacity is 0.0 when even an idle replica misses ``ttft_budget_s`` or the weights do not fit (90% of memory).
    """
    if model.weight_bytes(weight_dtype) > 0.9 * tp * gpu.memory_bytes:
        return 0.0, math.nan
    p_mean = prefill_time_s(model, gpu, mix.input_tokens_mean, tp=tp, weight_dtype=weight_dtype, calib=calib)
    p95 = prefill_time_s(model, gpu, mix.input_tokens_p95, tp=tp, weight_dtype=weight_dtype, calib=calib)
    if p95 > ttft_budget_s:
        return 0.0, p95
    mu = 1.0 / p_mean
    lo, hi = 0.0, mu
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if p95 + mm1_wait_quantile_s(mid, mu) <= ttft_budget_s:
            lo = mid
        else:
            hi = mid
    return lo, p95 + mm1_wait_quantile_s(lo, mu)


def decode_replica_capacity(model: Model, gpu: GPU, mix: TokenMix, slo: SLO, *, tp: int, calib: Calibration,
                            weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                            memory_utilization: float = 0.9) -> tuple[float, float, str]:
    """(capacity req/s, batch at capacity, limiting) of one decode-only replica on ``tp`` GPUs (module docstring);
    ``calib``: the GPU's roofline calibration row.

    KV budget = memory_utilization × tp × GPU memory − weights, as capacity.py. Capacity 0.0 when the weights do
    not fit, no sequence fits, or one sequence alone misses the TPOT target.
    """
    budget = memory_utilization * tp * gpu.memory_bytes - model.weight_bytes(weight_dtype)
    kv_seq = model.kv_tokens_cached(mix.input_tokens_mean + mix.output_tokens_mean) * model.kv_bytes_per_token(kv_dtype)
    max_batch = budget / kv_seq if budget > 0 else 0.0
    if max_batch < 1:
        return 0.0, 0.0, "kv_memory"
    ctx = mix.input_tokens_p95 + mix.output_tokens_p95 / 2

    def step(b: float) -> float:
        return decode_step_time_s(model, gpu, b, ctx, tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                                  calib=calib)

    if step(1.0) > slo.tpot_s:
        return 0.0, 0.0, "tpot"
    if step(max_batch) <= slo.tpot_s:
        b, lim = max_batch, "kv_memory"
    else:
        lo, hi = 1.0, max_batch
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if step(mid) <= slo.tpot_s else (lo, mid)
        b, lim = lo, "tpot"
    return b / (mix.output_tokens_mean * step(b)), b, lim


#: Words for a capacity model's ``limiting`` value (what stops a replica from serving more).
_BINDS = {"ttft": "TTFT", "tpot": "TPOT", "kv_memory": "KV memory", "prefill_saturated": "prefill compute",
          "e2e": "end-to-end latency"}

#: What binds when no tensor-parallel degree meets the SLO: {limiting: (SplitSpec field, fix)}.
_BINDING = {
    "ttft": ("ttft_slo_s", "TTFT (the prefill) binds", "give a looser TTFT target (--ttft-slo-s), shorter prompts or "
             "a faster GPU"),
    "prefill_saturated": ("ttft_slo_s", "TTFT (the prefill) binds", "give a looser TTFT target (--ttft-slo-s), "
                          "shorter prompts or a faster GPU"),
    "tpot": ("tpot_slo_s", "TPOT (the decode) binds", "give a looser TPOT target (--tpot-slo-s) or a faster GPU"),
    "e2e": ("e2e_slo_s", "end-to-end latency binds", "give a looser end-to-end target or a faster GPU"),
}
_MEMORY = ("memory binds", "choose a GPU with more memory or shorter prompts/outputs")


def _no_tp_error(what: str, gpu: GPU, gpu_field: str, slo: SLO, tried: list[tuple[int, str, str]]) -> InputError:
    """The error when ``what`` (e.g. 'colocated Llama-3.1-70B') meets its targets at no tensor-parallel degree.

    ``tried``: (tp, limiting, reason with the numbers) per tp tried. The binding constraint is the one at the
    largest tp (the most compute and memory); the message lists every tp's reason, largest first, and names the
    field to change: the TTFT or TPOT target, or the GPU when memory binds.
    """
    tried = sorted(tried, reverse=True)
    lim = tried[0][1] if tried else "weights_do_not_fit"
    field, head, fix = _BINDING.get(lim, (gpu_field, *_MEMORY))
    value: object = {"ttft_slo_s": slo.ttft_s, "tpot_slo_s": slo.tpot_s, "e2e_slo_s": slo.e2e_s}.get(field, gpu.name)
    detail = "; ".join(f"tp {tp}: {reason}" for tp, _, reason in tried)
    return InputError(f"{what} on {gpu.name} meets the SLO at no tp up to {tried[0][0] if tried else '?'}: {head} "
                      f"({detail}); {fix}", field=field, value=value)


def _decode_reason(spec: SplitSpec, tp: int, limiting: str) -> str:
    """Why a decode-only replica on ``tp`` decode GPUs has no capacity (:func:`decode_replica_capacity`), with the
    numbers."""
    s, g = spec, spec.decode_gpu
    weights = s.model.weight_bytes(s.weight_dtype)
    budget = 0.9 * tp * g.memory_bytes - weights
    if budget <= 0:
        return f"weights {weights / 1e9:.0f} GB exceed 0.9 × {g.memory_bytes / 1e9:.0f} GB × tp {tp}"
    if limiting == "kv_memory":
        kv_seq = s.model.kv_tokens_cached(s.mix.input_tokens_mean + s.mix.output_tokens_mean) * s.kv_bytes_per_token
        return (f"KV budget {budget / 1e9:.2f} GB holds less than one mean sequence of "
                f"{s.mix.input_tokens_mean + s.mix.output_tokens_mean:.0f} tokens ({kv_seq / 1e9:.3f} GB)")
    ctx = s.mix.input_tokens_p95 + s.mix.output_tokens_p95 / 2
    step = decode_step_time_s(s.model, g, 1.0, ctx, tp=tp, weight_dtype=s.weight_dtype, kv_dtype=s.kv_dtype,
                              calib=s.calib(g))
    return f"TPOT {step * 1e3:.1f} ms at batch 1 exceeds the target {s.slo.tpot_s * 1e3:.1f} ms"


def _tp_choices(price: GpuPrice) -> list[int]:
    return [t for t in TP_DEGREES if t <= price.gpus_per_node]


def _replicas(rate: float, cap: float, margin: float) -> int:
    return max(1, math.ceil(rate / (cap * (1.0 - margin)) - 1e-9))


def kv_transfer_s(kv_bytes: float, link: Link, streams: int) -> float:
    """Seconds to move ``kv_bytes`` of one prompt's KV cache over ``link``: bytes / (bandwidth × ``streams``) + one
    round trip (the decode side asks for the cache, then receives it; one connection per tensor-parallel rank of
    the prefill replica, each sending its shard, as links.csv gives per-flow bandwidth). The planner's prefill
    options (:mod:`fleetplan.scenario`) and this module's pools both use it."""
    return kv_bytes / (link.bandwidth_bytes_per_s * streams) + link.rtt_s


def _kv_transfer_s(spec: SplitSpec, link: Link, streams: int, prompt_tokens: float) -> float:
    return kv_transfer_s(spec.kv_bytes(prompt_tokens), link, streams)


def _pd_pools(spec: SplitSpec, link: Link, prefill_site: str, prefill_gpu: GPU, prefill_price: GpuPrice,
              ) -> tuple[list[GpuPool], float, float, bool, str, str]:
    """Prefill and decode pools for options (b)/(c): (pools, ttft_added_s, ttft_p95_s, slo_ok, note, sizing);
    ttft_p95_s is the modelled p95 at the day's load (:class:`OptionResult`)."""
    s = spec
    pcal = s.calib(prefill_gpu)
    dec = []
    failed = []
    for tp in _tp_choices(s.decode_price):
        cap, b, lim = decode_replica_capacity(s.model, s.decode_gpu, s.mix, s.slo, tp=tp, weight_dtype=s.weight_dtype,
                                              kv_dtype=s.kv_dtype, calib=s.calib(s.decode_gpu))
        if cap > 0:
            n = _replicas(s.rate_req_per_s, cap, s.margin)
            dec.append((n * tp, tp, n, cap, lim))
        else:
            failed.append((tp, lim, _decode_reason(s, tp, lim)))
    if not dec:
        raise _no_tp_error(f"the decode pool of {s.model.name}", s.decode_gpu, "decode_gpu", s.slo, failed)
    _, dtp, dn, dcap, dlim = min(dec)
    pre = []
    for tp in _tp_choices(prefill_price):
        added = _kv_transfer_s(s, link, tp, s.mix.input_tokens_p95)
        cap, _ = prefill_replica_capacity(s.model, prefill_gpu, s.mix, s.slo.ttft_s - added, tp=tp,
                                          weight_dtype=s.weight_dtype, calib=pcal)
        if cap > 0:
            n = _replicas(s.rate_req_per_s, cap, s.margin)
            pre.append((n * tp, tp, n, cap, added, True))
    if not pre:  # the SLO cannot hold: size by compute alone and say so
        for tp in _tp_choices(prefill_price):
            if s.model.weight_bytes(s.weight_dtype) > 0.9 * tp * prefill_gpu.memory_bytes:
                continue
            cap = 1.0 / prefill_time_s(s.model, prefill_gpu, s.mix.input_tokens_mean, tp=tp,
                                       weight_dtype=s.weight_dtype, calib=pcal)
            pre.append((_replicas(s.rate_req_per_s, cap, s.margin) * tp, tp,
                        _replicas(s.rate_req_per_s, cap, s.margin), cap,
                        _kv_transfer_s(s, link, tp, s.mix.input_tokens_p95), False))
        if not pre:
            raise InputError(f"{s.model.name}'s weights do not fit on {prefill_gpu.name} at any tp",
                             field="prefill_gpu", value=prefill_gpu.name)
    _, ptp, pn, pcap, added, ok = min(pre, key=lambda r: (r[0], r[1]))
    p_mean = prefill_time_s(s.model, prefill_gpu, s.mix.input_tokens_mean, tp=ptp, weight_dtype=s.weight_dtype,
                            calib=pcal)
    p95 = prefill_time_s(s.model, prefill_gpu, s.mix.input_tokens_p95, tp=ptp, weight_dtype=s.weight_dtype,
                         calib=pcal)
    # The modelled p95 TTFT at the day's load (each prefill replica at rate / replicas), not at capacity (which is
    # the target itself when TTFT sizes the pool).
    ttft = p95 + mm1_wait_quantile_s(s.rate_req_per_s / pn, 1.0 / p_mean) + added
    if ok:
        sizing = (f"prefill: TTFT binds at tp {ptp} (the p95 prompt of {s.mix.input_tokens_p95:,.0f} tokens "
                  f"prefills in {p95:.2f} s + KV transfer {added:.2f} s of the {s.slo.ttft_s:g} s target), "
                  f"{pcap:.4g} req/s per replica")
        note = ""
    else:
        sizing = f"prefill: compute alone at tp {ptp}, {pcap:.4g} req/s per replica (the TTFT target cannot hold)"
        note = (f"TTFT p95 {ttft:.2f} s exceeds the SLO {s.slo.ttft_s:g} s (the p95 prompt of "
                f"{s.mix.input_tokens_p95:,.0f} tokens prefills in {p95:.2f} s at tp {ptp}, the KV transfer adds "
                f"{added:.2f} s); prefill pool sized by compute alone")
    sizing += f"; decode: {_BINDS.get(dlim, dlim)} binds at tp {dtp}, {dcap:.4g} req/s per replica"
    pools = [
        GpuPool("prefill", prefill_site, prefill_gpu.name, ptp, pn, prefill_price, prefill_gpu.tdp_w,
                utilization=min(1.0, s.rate_req_per_s * p_mean / pn),
                input_share=1.0, capacity_req_per_s=pcap, idle_fraction=s.idle_fraction(prefill_gpu)),
        GpuPool("decode", s.decode_site, s.decode_gpu.name, dtp, dn, s.decode_price, s.decode_gpu.tdp_w,
                utilization=min(1.0, s.rate_req_per_s / (dn * dcap)), input_share=0.0, capacity_req_per_s=dcap,
                idle_fraction=s.idle_fraction(s.decode_gpu)),
    ]
    return pools, added, ttft, ok, note, sizing


def _response_flow(spec: SplitSpec) -> Flow:
    gb = spec.requests_per_day * spec.mix.output_tokens_mean * spec.text_bytes_per_token / 1e9
    return Flow("response", spec.decode_site, "users", "internet", gb, spec.response_table, 0.0)


def _ledger(spec: SplitSpec, name: str, pools, flows) -> Ledger:
    d = spec.requests_per_day
    return build_ledger(name, pools, flows, requests_per_day=d, input_tokens_per_day=d * spec.mix.input_tokens_mean,
                        output_tokens_per_day=d * spec.mix.output_tokens_mean, usd_per_kwh=spec.usd_per_kwh,
                        pue=spec.pue, energy_billed=spec.energy_billed)


def colocated(spec: SplitSpec) -> OptionResult:
    """Option (a): replicas serving prefill and decode at the decode site (capacity.replica_capacity)."""
    s = spec
    cands = []
    failed = []
    for tp in _tp_choices(s.decode_price):
        c = replica_capacity(s.model, s.decode_gpu, s.mix, s.slo, tp=tp, weight_dtype=s.weight_dtype,
                             kv_dtype=s.kv_dtype, calib=s.calib(s.decode_gpu))
        if c.req_per_s > 0:
            n = _replicas(s.rate_req_per_s, c.req_per_s, s.margin)
            cands.append((n * tp, tp, n, c))
        else:
            failed.append((tp, c.limiting, c.reason))
    if not cands:
        raise _no_tp_error(f"{s.model.name} colocated (prefill and decode on one replica)", s.decode_gpu, "decode_gpu",
                           s.slo, failed)
    _, tp, n, c = min(cands, key=lambda r: (r[0], r[1]))
    lam = s.rate_req_per_s / n
    g, cal = s.decode_gpu, s.calib(s.decode_gpu)
    p_mean = prefill_time_s(s.model, g, s.mix.input_tokens_mean, tp=tp, weight_dtype=s.weight_dtype, calib=cal)
    # The modelled p95 TTFT at the day's load (each replica at rate / replicas), the capacity model's own latencies.
    ttft, _ = latency_at_rate(
        lambda i: prefill_time_s(s.model, g, i, tp=tp, weight_dtype=s.weight_dtype, calib=cal),
        lambda b, ctx: decode_step_time_s(s.model, g, b, ctx, tp=tp, weight_dtype=s.weight_dtype,
                                          kv_dtype=s.kv_dtype, calib=cal), s.mix, s.slo, lam,
        engine=engine_or_default(c.engine, g.memory_bytes / 2**30, g.name))
    sizing = f"colocated: {_BINDS.get(c.limiting, c.limiting)} binds at tp {tp}"
    if c.limiting in ("ttft", "prefill_saturated"):
        p95 = prefill_time_s(s.model, g, s.mix.input_tokens_p95, tp=tp, weight_dtype=s.weight_dtype, calib=cal)
        sizing += (f" (the p95 prompt of {s.mix.input_tokens_p95:,.0f} tokens prefills in {p95:.2f} s of the "
                   f"{s.slo.ttft_s:g} s target)")
    sizing += f", {c.req_per_s:.4g} req/s per replica"
    pool = GpuPool("colocated", s.decode_site, g.name, tp, n, s.decode_price, g.tdp_w,
                   utilization=min(1.0, lam / c.req_per_s), input_share=min(1.0, lam * p_mean),
                   capacity_req_per_s=c.req_per_s, idle_fraction=s.idle_fraction(g))
    flows = (_response_flow(s),)
    return OptionResult("colocated", (pool,), flows, 0.0, ttft, True, "",
                        _ledger(s, "colocated", [pool], flows), sizing=sizing)


def disaggregated(spec: SplitSpec) -> OptionResult:
    """Option (b): prefill and decode pools at the decode site; KV over the inter-node link, no egress."""
    s = spec
    pools, added, ttft, ok, note, sizing = _pd_pools(s, s.local_link, s.decode_site, s.decode_gpu, s.decode_price)
    flows = (_response_flow(s),)
    return OptionResult("disaggregated", tuple(pools), flows, added, ttft, ok, note,
                        _ledger(s, "disaggregated", pools, flows), 0.0, f"disaggregated: {sizing}")


def split(spec: SplitSpec) -> OptionResult:
    """Option (c): prefill pool at the prefill site, decode pool at the decode site; KV and prompts cross the WAN."""
    s = spec
    pools, added, ttft, ok, note, sizing = _pd_pools(s, s.wan_link, s.prefill_site, s.prefill_gpu, s.prefill_price)
    d = s.requests_per_day
    kv_gb = d * s.kv_bytes(s.mix.input_tokens_mean) / 1e9
    prompt_gb = d * s.mix.input_tokens_mean * s.text_bytes_per_token / 1e9
    rc = route_class(s.prefill_site, s.decode_site)
    flows = (Flow("kv", s.prefill_site, s.decode_site, rc, kv_gb, s.kv_table, 1.0),
             Flow("prompt", s.decode_site, s.prefill_site, rc, prompt_gb, s.prompt_table, 1.0),
             _response_flow(s))
    return OptionResult("split", tuple(pools), flows, added, ttft, ok, note, _ledger(s, "split", pools, flows),
                        s.kv_bytes(s.mix.input_tokens_mean) / 1e9, f"split: {sizing}")


def flat_table(table: EgressTable, usd_per_gb: float) -> EgressTable:
    """``table`` with one flat rate (a user override), scope marked."""
    check_range(usd_per_gb, field="egress_usd_per_gb", low=0, high=5, unit="USD/GB", fix="give USD per GB")
    return EgressTable(table.cloud, table.route_class, f"{table.scope} [flat {usd_per_gb:g} USD/GB given]",
                       (EgressTier(0.0, None, float(usd_per_gb)),), source="user override")


def with_prompt_tokens(spec: SplitSpec, prompt_tokens_mean: float) -> SplitSpec:
    """``spec`` with the mean prompt length set: every prompt (statistics and population,
    :meth:`~fleetplan.costmodels.demand.TokenMix.scaled`) scaled by the same factor, capped by the context."""
    check_range(prompt_tokens_mean, field="prompt_tokens", low=1, high=spec.model.max_context_tokens, unit="tokens")
    cap = max(1.0, spec.model.max_context_tokens - spec.mix.output_tokens_p95)
    mix = spec.mix.scaled(prompt_tokens_mean / spec.mix.input_tokens_mean, input_cap_tokens=cap)
    return dataclasses.replace(spec, mix=mix)


def with_cross_site_egress(spec: SplitSpec, usd_per_gb: float) -> SplitSpec:
    """``spec`` with a flat cross-site egress price, both directions."""
    return dataclasses.replace(spec, kv_table=flat_table(spec.kv_table, usd_per_gb),
                               prompt_table=flat_table(spec.prompt_table, usd_per_gb))


def compare_options(spec: SplitSpec) -> dict[str, OptionResult]:
    """The three options' results (no break-even search)."""
    return {"colocated": colocated(spec), "disaggregated": disaggregated(spec), "split": split(spec)}


def _best_single_site(options: Mapping[str, OptionResult]) -> str:
    """The cheaper of 'colocated' and 'disaggregated' among those meeting the SLO (colocated always does: it raises
    otherwise)."""
    return min((k for k in ("colocated", "disaggregated") if options[k].slo_ok),
               key=lambda k: options[k].ledger.total_usd_per_day)


def _savings(spec: SplitSpec) -> float:
    """Best single-site total minus the split's, USD/day; -inf when the split misses the SLO (it saves nothing)."""
    o = compare_options(spec)
    if not o["split"].slo_ok:
        return -math.inf
    return o[_best_single_site(o)].ledger.total_usd_per_day - o["split"].ledger.total_usd_per_day


def break_even_prompt_tokens(spec: SplitSpec, *, low: float = 16.0, points: int = 16) -> tuple[float | None, str]:
    """Mean prompt length (tokens) from which (c) stops saving money, and a note.

    Scans a geometric grid from ``low`` to the model's context (minus the p95 output) for the first length where the
    savings are <= 0 (a split that misses the SLO saves nothing), then bisects between the last saving and the first
    non-saving length (12 steps). The pools change in whole replicas, so the savings are a step function; the first
    crossing is reported.
    """
    hi = max(low * 2, (spec.model.max_context_tokens - spec.mix.output_tokens_p95) / (
        spec.mix.input_tokens_p95 / spec.mix.input_tokens_mean))
    grid = [low * (hi / low) ** (i / (points - 1)) for i in range(points)]
    prev = None
    for length in grid:
        sv = _savings(with_prompt_tokens(spec, length))
        if sv <= 0:
            if prev is None:
                return None, f"the split does not save money at any mean prompt length from {low:g} tokens"
            a, b = prev, length
            for _ in range(12):
                mid = math.sqrt(a * b)
                a, b = (mid, b) if _savings(with_prompt_tokens(spec, mid)) > 0 else (a, mid)
            return b, f"the split saves money below about {b:,.0f} prompt tokens (mean)"
        prev = length
    return None, f"the split saves money at every mean prompt length up to {hi:,.0f} tokens"


def compare(spec: SplitSpec, *, prompt_break_even: bool = True) -> SplitResult:
    """Compare (a), (b) and (c) on ``spec``; the break-even values and a one-line verdict (module docstring)."""
    opts = compare_options(spec)
    best = _best_single_site(opts)
    c = opts["split"]
    cross_gb = c.cross_site_gb_per_day
    fixed = c.ledger.total_usd_per_day - c.cross_site_egress_usd_per_day
    be_egress: float | None = None
    if spec.prefill_site == spec.decode_site:
        be_note_egress = f"one site, {spec.decode_site}: nothing crosses sites"
    elif not c.slo_ok:
        be_note_egress = "the split misses the SLO at any egress price"
    elif cross_gb <= 0:
        be_note_egress = "nothing crosses the sites"
    else:
        # Within half a cent a day the split without egress costs what the single site does (a rounding residue
        # read as "costs more even with free egress" when the GPU costs were equal to the cent).
        left = opts[best].ledger.total_usd_per_day - fixed
        be_egress = 0.0 if abs(left) < 0.005 else left / cross_gb
        be_note_egress = ""
    be_prompt, be_note = (break_even_prompt_tokens(spec) if prompt_break_even else (None, "not computed"))
    tb, tc = opts[best].ledger.total_usd_per_day, c.ledger.total_usd_per_day
    diff = tb - tc
    if not c.slo_ok:
        verdict = (f"keep it in one site: {best} at {spec.decode_site} costs ${tb:,.0f}/day and meets the SLO; the "
                   f"split misses it ({c.note}), so it has no cost to compare")
    elif diff > 0:
        verdict = (f"split across sites saves ${diff:,.0f}/day ({diff / tb:.0%}) over {best} at {spec.decode_site} "
                   f"(${tc:,.0f} vs ${tb:,.0f}/day); TTFT +{c.ttft_added_s:.2f} s, the SLO holds")
        if be_egress is not None:
            verdict += f"; it stops paying above ${be_egress:.4f}/GB cross-site egress"
    else:
        verdict = (f"keep it in one site: {best} at {spec.decode_site} costs ${tb:,.0f}/day, the split "
                   f"${tc:,.0f}/day (+${abs(diff):,.0f}, of which ${c.cross_site_egress_usd_per_day:,.0f} egress); "
                   f"TTFT +{c.ttft_added_s:.2f} s, the SLO holds")
        if be_egress is not None:
            verdict += (f"; it would pay below ${be_egress:.4f}/GB egress" if be_egress > 0 else
                        "; with free egress it would cost the same, so no egress price makes it pay"
                        if be_egress == 0 else "; not even free egress would make it pay")
    return SplitResult(spec, opts, best, be_egress, be_prompt, be_note, verdict, be_note_egress)


# ---- sweeps -----------------------------------------------------------------------------------------------------

#: Variables a sweep may vary, and what each sets.
SWEEP_VARIABLES = {
    "egress_usd_per_gb": "flat cross-site egress price, USD/GB (both directions)",
    "prompt_tokens": "mean prompt length, tokens (p95 scaled with it)",
    "output_tokens": "mean output length, tokens (p95 scaled with it)",
    "rate_req_per_s": "request rate, req/s",
    "gpu_price_factor": "factor on every GPU price (1.3 = +30%)",
    "prefill_price_factor": "factor on the prefill site's GPU price",
    "decode_price_factor": "factor on the decode site's GPU price",
}


def _scaled(price: GpuPrice, f: float) -> GpuPrice:
    check_range(f, field="price_factor", low=0.0, high=100)
    return dataclasses.replace(price, node_usd_per_hour=price.node_usd_per_hour * f,
                               usd_per_gpu_hour=price.usd_per_gpu_hour * f,
                               source=f"{price.source} × {f:g}")


def apply_variables(spec: SplitSpec, values: dict[str, float]) -> SplitSpec:
    """``spec`` with the sweep variables set (:data:`SWEEP_VARIABLES`). Raises UnknownNameError for others."""
    for k, v in values.items():
        if k == "egress_usd_per_gb":
            spec = with_cross_site_egress(spec, v)
        elif k == "prompt_tokens":
            spec = with_prompt_tokens(spec, v)
        elif k == "output_tokens":
            check_range(v, field="output_tokens", low=1, high=spec.model.max_context_tokens, unit="tokens")
            spec = dataclasses.replace(spec, mix=spec.mix.scaled(output_factor=v / spec.mix.output_tokens_mean))
        elif k == "rate_req_per_s":
            spec = dataclasses.replace(spec, rate_req_per_s=float(v))
        elif k == "gpu_price_factor":
            spec = dataclasses.replace(spec, prefill_price=_scaled(spec.prefill_price, v),
                                       decode_price=_scaled(spec.decode_price, v))
        elif k == "prefill_price_factor":
            spec = dataclasses.replace(spec, prefill_price=_scaled(spec.prefill_price, v))
        elif k == "decode_price_factor":
            spec = dataclasses.replace(spec, decode_price=_scaled(spec.decode_price, v))
        else:
            raise UnknownNameError("sweep variable", k, SWEEP_VARIABLES)
    return spec


def scenario_row(spec: SplitSpec, values: dict[str, float]) -> dict[str, float | bool | str | None]:
    """One sweep cell: the variables, each option's total USD/day (None when it misses the SLO) and GPUs, the
    split's TTFT (added and p95) and SLO, the savings (None when the split misses the SLO), a short verdict
    ('split saves' / '<option> cheaper' / '<option> (the split misses the SLO)' / 'infeasible: ...') and what sizes
    each design ('sizing': binding constraint, tp and capacity per replica, or why the SLO is missed)."""
    s = apply_variables(spec, values)
    row: dict[str, float | bool | str | None] = dict(values)
    try:
        r = compare(s, prompt_break_even=False)
    except InputError as exc:
        # A cell whose design cannot meet the SLO at all (e.g. a 32k-token prompt on one GPU type) is reported as
        # such; the rest of the grid still runs.
        row.update({f"{k}_usd_per_day": None for k in OPTIONS})
        row.update({f"{k}_gpus": None for k in OPTIONS})
        row.update(split_ttft_added_s=None, split_ttft_p95_s=None, split_slo_ok=False, savings_usd_per_day=None,
                   verdict=f"infeasible: {exc}", sizing=None)
        return row
    for k, o in r.options.items():
        # A design that misses the SLO has no cost to compare: null, and the sizing column says why.
        row[f"{k}_usd_per_day"] = o.ledger.total_usd_per_day if o.slo_ok else None
    for k, o in r.options.items():
        row[f"{k}_gpus"] = o.gpus
    sp = r.options["split"]
    row["split_ttft_added_s"] = sp.ttft_added_s
    row["split_ttft_p95_s"] = sp.ttft_p95_s
    row["split_slo_ok"] = sp.slo_ok
    row["savings_usd_per_day"] = r.savings_usd_per_day
    # A split that misses the SLO saves nothing a team can use: the verdict never says "split saves" for it.
    if not sp.slo_ok:
        row["verdict"] = f"{r.best_single_site} (the split misses the SLO)"
    else:
        row["verdict"] = "split saves" if sp.ledger.total_usd_per_day < r.options[
            r.best_single_site].ledger.total_usd_per_day else f"{r.best_single_site} cheaper"
    # Why each design has the GPUs it has (the binding constraint, tp and capacity per replica), and why the split
    # misses its SLO when it does.
    row["sizing"] = " | ".join(o.sizing if o.slo_ok else f"{o.name} misses the SLO: {o.note}"
                               for o in r.options.values())
    return row


def grid(variables: dict[str, Sequence[float]]) -> list[dict[str, float]]:
    """All combinations of the variables' values, first variable slowest."""
    names = list(variables)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(variables[n] for n in names))]


__all__ = [
    "OPTIONS", "SWEEP_VARIABLES", "OptionResult", "SplitResult", "SplitSpec", "apply_variables",
    "break_even_prompt_tokens", "colocated", "compare", "compare_options", "decode_replica_capacity",
    "disaggregated", "flat_table", "grid", "kv_transfer_s", "prefill_replica_capacity", "scenario_row", "split",
    "with_cross_site_egress", "with_prompt_tokens",
]
