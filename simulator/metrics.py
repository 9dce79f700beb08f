"""What a replay measures, per model and window (:class:`ModelWindowMetrics`, gathered in a :class:`SimReport`):
TTFT and TPOT percentiles, SLO attainment, goodput, queueing delay, utilization, energy and cost per 1M tokens,
with a distribution-free confidence interval of the P95 TTFT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fleetplan.costmodels.energy import energy_kwh
from fleetplan.costmodels.queueing import normal_quantile
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import idle_fraction
from fleetplan.placement.problem import Problem
from fleetplan.scenario.read import Scenario, scenario_slos
from fleetplan.simulator.engine import RunResult
from fleetplan.simulator.fleet import Fleet
from fleetplan.simulator.workload import Workload

#: Relative tolerance of a replayed percentile against its target before it counts as a miss (2%: the sampling
#: noise of a P95 over a few thousand requests).
SLO_TOLERANCE = 0.02


@dataclass(frozen=True)
class ModelWindowMetrics:
    """What one model got in one window (module docstring for the definitions).

    Times in seconds; utilization 0..1; energy kWh and cost USD per 1M tokens over the whole window.
    """

    model: str
    window: int
    requests: int
    dropped: int
    ttft_p50_s: float
    ttft_p95_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p95_s: float
    tpot_p99_s: float
    slo_attainment: float
    goodput_req_per_s: float
    queue_delay_p99_s: float
    utilization: float
    energy_kwh: float
    usd_per_1m_tokens: float
    ttft_slo_s: float
    tpot_slo_s: float
    preemptions: int = 0
    slo: SLO | None = None
    ttft_at_target_s: float = math.nan
    tpot_at_target_s: float = math.nan
    e2e_at_target_s: float = math.nan

    def as_dict(self) -> dict:
        d = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.__dict__.items()
             if k != "slo"}
        d["misses"] = self.misses()
        return d

    def misses(self, tolerance: float = SLO_TOLERANCE) -> list[str]:
        """The SLO targets this row misses: a latency at its target's percentile above target × (1 + tolerance),
        or an attainment below the SLO's attainment target; e.g. ['TPOT p95 125.3 ms > 100 ms']. Empty without an
        SLO or requests."""
        slo = self.slo
        if slo is None or not self.requests:
            return []
        out = []
        measured = {"ttft": self.ttft_at_target_s, "tpot": self.tpot_at_target_s, "e2e": self.e2e_at_target_s}
        for metric, pct, target in slo.targets():
            v = measured[metric]
            if v == math.inf:
                out.append(f"{metric.upper()} p{pct:g} never: {self.dropped} of {self.requests} requests dropped "
                           "(no replica's KV cache holds them)")
            elif math.isfinite(v) and v > target * (1.0 + tolerance):
                unit, k = ("ms", 1e3) if metric == "tpot" else ("s", 1.0)
                out.append(f"{metric.upper()} p{pct:g} {v * k:.4g} {unit} > {target * k:g} {unit}")
        if slo.attainment is not None and math.isfinite(self.slo_attainment) \
                and self.slo_attainment < slo.attainment - tolerance * (1.0 - slo.attainment):
            out.append(f"attainment {self.slo_attainment:.2%} < {slo.attainment:.2%}")
        return out


def quantile_or_nan(x: np.ndarray, q: float) -> float:
    """The q-quantile of ``x`` (numpy's linear interpolation), nan when ``x`` is empty."""
    return float(np.quantile(x, q)) if len(x) else math.nan


def model_slos(problem: Problem, scenario: Scenario | None) -> dict[str, SLO]:
    """Each model's :class:`SLO` (percentiles, end-to-end and attainment targets) from the scenario, by catalog
    name; p95 targets from the problem's model specs when there is no scenario."""
    if scenario is not None:
        return scenario_slos(scenario, problem)
    return {m.name: SLO(m.ttft_p95_s, m.tpot_p95_s) for m in problem.models}


def meets_slo(slo: SLO, ttft: np.ndarray, tpot: np.ndarray, e2e: np.ndarray, dropped: np.ndarray) -> np.ndarray:
    """Per request: meets every target of ``slo`` (and was not dropped)."""
    ok = (ttft <= slo.ttft_s) & (tpot <= slo.tpot_s) & ~dropped
    if slo.e2e_s is not None:
        ok &= e2e <= slo.e2e_s
    return ok


def quantile_with_drops(x: np.ndarray, q: float, dropped: int) -> float:
    """The q-quantile of ``x`` (finite latencies) together with ``dropped`` requests that were never served, counted
    as infinitely late: numpy's linear interpolation over the n = len(x) + dropped sorted values, inf when the
    quantile's position falls among (or next to) the dropped ones; nan when there is no request. Equals
    :func:`quantile_or_nan` without drops."""
    n = len(x) + dropped
    if n == 0:
        return math.nan
    if dropped == 0:
        return quantile_or_nan(x, q)
    pos = q * (n - 1)  # numpy's 'linear' position among the n sorted values, the dropped ones last
    if pos > len(x) - 1:
        return math.inf
    return float(np.quantile(x, pos / (len(x) - 1))) if len(x) > 1 else float(x[0])


def _at_targets(slo: SLO, tt: np.ndarray, tp: np.ndarray, e2e: np.ndarray, dropped: int = 0) -> dict[str, float]:
    """The replayed latency at each target's percentile, the ``dropped`` requests (never served: no replica's KV
    cache could hold them) counted as infinitely late (:func:`quantile_with_drops`): a target whose percentile
    reaches them is missed."""
    return {"ttft_at_target_s": quantile_with_drops(tt[np.isfinite(tt)], slo.ttft_percentile / 100, dropped),
            "tpot_at_target_s": quantile_with_drops(tp[np.isfinite(tp)], slo.tpot_percentile / 100, dropped),
            "e2e_at_target_s": quantile_with_drops(e2e[np.isfinite(e2e)], slo.e2e_percentile / 100, dropped)}


def p95_confidence_interval(x: np.ndarray, q: float = 0.95, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the ``q`` quantile of ``x`` (order statistics at the binomial
    bounds: ranks n·q ∓ z·sqrt(n·q·(1−q)), z = the normal quantile of 0.5 + level/2, 1.96 for 95%). (nan, nan) with
    fewer than 20 values."""
    n = len(x)
    if n < 20:
        return math.nan, math.nan
    z = normal_quantile(0.5 + level / 2)
    s = np.sort(x)
    half = z * math.sqrt(n * q * (1 - q))
    lo = int(max(0, math.floor(n * q - half) - 1))
    hi = int(min(n - 1, math.ceil(n * q + half) - 1))
    return float(s[lo]), float(s[hi])


def request_latencies(wl: Workload, res: RunResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ttft_s, tpot_s, queue_s) per request; tpot is 0 for one-token outputs, NaN where not reached."""
    ttft = res.first_token_s - wl.arrival_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(wl.output_tokens > 1, (res.done_s - res.first_token_s) / (wl.output_tokens - 1), 0.0)
    queue = res.prefill_start_s - wl.arrival_s
    return ttft, tpot, queue


def window_metrics(problem: Problem, fleet: Fleet, wl: Workload, res: RunResult, w: int,
                   window_length_s: float, slos: dict[str, SLO] | None = None) -> list[ModelWindowMetrics]:
    """Per-model metrics of one simulated window (the measured interval of ``wl``; energy and cost extrapolated
    from the measured interval to ``window_length_s``). ``slos``: each model's targets (default: p95 targets of
    the problem's model specs)."""
    slos = slos or model_slos(problem, None)

    dur = max(wl.measure_to_s - wl.measure_from_s, 1e-9)
    span = max(res.end_s - 0.0, dur)
    ttft, tpot, queue = request_latencies(wl, res)
    measured = (wl.arrival_s >= wl.measure_from_s) & (wl.arrival_s < wl.measure_to_s)
    specs = problem.model_by_name
    # Device utilization over the simulated span (warm-up included: busy time is not attributable to requests).
    dev_u = np.minimum(res.device_busy_s / span, 1.0)
    eng_dev = np.asarray([e.device for e in fleet.engines])
    eng_model = np.asarray([e.model for e in fleet.engines], dtype=object)
    hours = window_length_s / 3600.0
    out = []
    for m in specs:
        sel = measured & (wl.model == m)
        n = int(sel.sum())
        mine = np.flatnonzero(eng_model == m)
        if n == 0 and len(mine) == 0:
            continue
        # Each of the model's engines owns a share of its device: busy share, or 1/k when the device was idle.
        cost = energy = dev_equiv = busy = 0.0
        for ei in mine:
            di = eng_dev[ei]
            on_dev = np.flatnonzero(eng_dev == di)
            tot = res.engine_busy_s[on_dev].sum()
            frac = res.engine_busy_s[ei] / tot if tot > 0 else 1.0 / len(on_dev)
            d = fleet.devices[di]
            cost += frac * d.gpus * d.usd_per_gpu_hour * hours
            if d.tdp_w:
                energy += frac * d.gpus * energy_kwh(d.tdp_w, float(dev_u[di]), hours, idle_fraction(d.gpu))
            dev_equiv += 1.0 / len(on_dev)
            busy += res.engine_busy_s[ei] / span
        spec, slo = specs[m], slos[m]
        dropped = res.dropped[sel]
        e2e = res.done_s[sel] - wl.arrival_s[sel]
        meets = meets_slo(slo, ttft[sel], tpot[sel], e2e, dropped)
        tt = ttft[sel][~dropped]
        tp = tpot[sel][(~dropped) & (wl.output_tokens[sel] > 1)]
        tokens = float((wl.input_tokens[sel] + wl.output_tokens[sel]).sum()) * window_length_s / dur
        out.append(ModelWindowMetrics(
            model=m, window=w, requests=n, dropped=int(dropped.sum()),
            ttft_p50_s=quantile_or_nan(tt, .5), ttft_p95_s=quantile_or_nan(tt, .95),
            ttft_p99_s=quantile_or_nan(tt, .99),
            tpot_p50_s=quantile_or_nan(tp, .5), tpot_p95_s=quantile_or_nan(tp, .95),
            tpot_p99_s=quantile_or_nan(tp, .99),
            slo_attainment=float(meets.mean()) if n else math.nan,
            goodput_req_per_s=float(meets.sum()) / dur,
            queue_delay_p99_s=quantile_or_nan(queue[sel][~dropped], .99),
            utilization=min(1.0, busy / dev_equiv) if dev_equiv else math.nan,
            energy_kwh=energy, usd_per_1m_tokens=cost / tokens * 1e6 if tokens else math.nan,
            ttft_slo_s=spec.ttft_p95_s, tpot_slo_s=spec.tpot_p95_s,
            preemptions=int(res.preemptions[sel].sum()), slo=slo,
            **_at_targets(slo, tt, tp, e2e[~dropped], int(dropped.sum()))))
    return out


@dataclass
class SimReport:
    """Result of a replay.

    Attributes:
        rows: per (model, window) metrics.
        overall: per model metrics over every measured request (window = -1; energy and cost summed over windows).
        notes: how the replay was made (sources, slices, steady-state checks, confidence intervals).
        latencies: per model, (ttft_s, tpot_s) arrays of the measured requests (for plots).
        wall_s: wall time of the replay, seconds.
        requests: requests simulated (warm-up included).
    """

    rows: list[ModelWindowMetrics]
    overall: list[ModelWindowMetrics]
    notes: list[str]
    latencies: dict[str, tuple[np.ndarray, np.ndarray]]
    wall_s: float = 0.0
    requests: int = 0
    title: str = ""

    def attainment(self) -> float:
        """Share of all measured requests (all models) meeting both SLO targets."""
        n = sum(r.requests for r in self.overall)
        return sum(r.slo_attainment * r.requests for r in self.overall if r.requests) / n if n else math.nan

    def misses(self, tolerance: float = SLO_TOLERANCE) -> list[tuple[str, int, list[str]]]:
        """[(model, window, missed targets)] for every model-window row that misses a target
        (:meth:`ModelWindowMetrics.misses`), in row order."""
        return [(r.model, r.window, m) for r in self.rows if (m := r.misses(tolerance))]

    def to_dict(self) -> dict:
        keys = ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "tpot_p50_s", "tpot_p95_s", "tpot_p99_s", "slo_attainment",
                "goodput_req_per_s", "queue_delay_p99_s", "utilization", "energy_kwh", "usd_per_1m_tokens",
                "requests", "dropped", "preemptions", "ttft_at_target_s", "tpot_at_target_s", "e2e_at_target_s",
                "misses")

        def pick(r: ModelWindowMetrics) -> dict:
            d = r.as_dict()
            return {k: d[k] for k in keys}

        per_model: dict[str, dict] = {}
        for r in self.overall:
            per_model[r.model] = {"overall": pick(r), "windows": {}}
        for r in self.rows:
            per_model.setdefault(r.model, {"overall": None, "windows": {}})["windows"][str(r.window)] = pick(r)
        return {"title": self.title, "slo_attainment": _none(self.attainment()), "models": per_model,
                "misses": [{"model": m, "window": w, "targets": t} for m, w, t in self.misses()],
                "notes": self.notes, "wall_s": self.wall_s, "requests_simulated": self.requests}


def _none(x: float):
    return None if isinstance(x, float) and not math.isfinite(x) else x


def overall_metrics(problem: Problem, rows: list[ModelWindowMetrics], lat: dict[str, list],
             slos: dict[str, SLO]) -> list[ModelWindowMetrics]:
    out = []
    for m in problem.model_by_name:
        rs = [r for r in rows if r.model == m]
        if not rs:
            continue
        n = sum(r.requests for r in rs)
        parts = lat.get(m, [])
        tt = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
        tp = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0)
        qq = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0)
        ok = np.concatenate([p[3] for p in parts]) if parts else np.zeros(0, dtype=bool)
        e2e = np.concatenate([p[4] for p in parts]) if parts else np.zeros(0)
        tokens_cost = [(r.usd_per_1m_tokens, r.energy_kwh) for r in rs]
        costs = [c for c, _ in tokens_cost if math.isfinite(c)]
        spec = problem.model_by_name[m]
        out.append(ModelWindowMetrics(
            model=m, window=-1, requests=n, dropped=sum(r.dropped for r in rs),
            ttft_p50_s=quantile_or_nan(tt[np.isfinite(tt)], .5), ttft_p95_s=quantile_or_nan(tt[np.isfinite(tt)], .95),
            ttft_p99_s=quantile_or_nan(tt[np.isfinite(tt)], .99),
            tpot_p50_s=quantile_or_nan(tp[np.isfinite(tp)], .5), tpot_p95_s=quantile_or_nan(tp[np.isfinite(tp)], .95),
            tpot_p99_s=quantile_or_nan(tp[np.isfinite(tp)], .99),
            slo_attainment=float(ok.mean()) if len(ok) else math.nan,
            goodput_req_per_s=float(np.mean([r.goodput_req_per_s for r in rs])),
            queue_delay_p99_s=quantile_or_nan(qq[np.isfinite(qq)], .99),
            utilization=float(np.mean([r.utilization for r in rs if math.isfinite(r.utilization)] or [math.nan])),
            energy_kwh=sum(e for _, e in tokens_cost),
            usd_per_1m_tokens=float(np.mean(costs)) if costs else math.nan,
            ttft_slo_s=spec.ttft_p95_s, tpot_slo_s=spec.tpot_p95_s,
            preemptions=sum(r.preemptions for r in rs), slo=slos[m],
            **_at_targets(slos[m], tt, tp, e2e, sum(r.dropped for r in rs))))
    return out


def collect_latencies(problem: Problem, wl: Workload, res: RunResult, lat: dict[str, list],
                      slos: dict[str, SLO]) -> None:
    ttft, tpot, queue = request_latencies(wl, res)
    measured = (wl.arrival_s >= wl.measure_from_s) & (wl.arrival_s < wl.measure_to_s)
    e2e_all = res.done_s - wl.arrival_s
    for m in problem.model_by_name:
        sel = measured & (wl.model == m)
        if not sel.any():
            continue
        ok = meets_slo(slos[m], ttft[sel], tpot[sel], e2e_all[sel], res.dropped[sel])
        tp = np.where(wl.output_tokens[sel] > 1, tpot[sel], np.nan)
        lat.setdefault(m, []).append((ttft[sel], tp, queue[sel], ok, e2e_all[sel]))
