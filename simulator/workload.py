"""The requests of a replay (:class:`Workload`): drawn from a scenario's day curve (ServeGen clients as Gamma renewal
processes with their own inter-arrival CVs, or Poisson) with lengths from each model's token mix, or read from a
trace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fleetplan.datasets.servegen import SLOT_S, servegen_client_mix, servegen_day_curve
from fleetplan.datasets.traces import Trace, load_trace
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.placement.problem import Problem
from fleetplan.scenario.read import Scenario, scenario_spec
from fleetplan.scenario.schemas import ScenarioModel, TraceDemand


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests to replay, sorted by arrival (numpy arrays of length n) and the measured interval.

    Attributes:
        arrival_s, input_tokens, output_tokens, model: per request.
        measure_from_s, measure_to_s: requests arriving in [from, to) are measured (earlier ones warm the fleet up).
        source: where the requests come from.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    model: np.ndarray
    measure_from_s: float
    measure_to_s: float
    source: str = ""

    @staticmethod
    def concat(parts: list[Workload], measure_from_s: float, measure_to_s: float, source: str) -> Workload:
        """Merge workloads into one sorted by arrival."""
        if not parts:
            z = np.zeros(0)
            return Workload(z, z.astype(np.int64), z.astype(np.int64), np.zeros(0, dtype=object), measure_from_s,
                            measure_to_s, source)
        a = np.concatenate([p.arrival_s for p in parts])
        order = np.argsort(a, kind="stable")
        return Workload(a[order], np.concatenate([p.input_tokens for p in parts])[order],
                        np.concatenate([p.output_tokens for p in parts])[order],
                        np.concatenate([p.model for p in parts])[order], measure_from_s, measure_to_s, source)


def _tokens(m: ScenarioModel, scenario: Scenario, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` requests' token lengths for a scenario model: its trace's requests, or the lognormals of its given
    statistics (:meth:`~fleetplan.costmodels.demand.TokenMix.draw`, what the capacity model samples too)."""
    return scenario.token_mixes[m.name].draw(rng, n)


def gamma_renewal(rng: np.random.Generator, rate_req_per_s: float, cv: float, start_s: float,
                  end_s: float) -> np.ndarray:
    """Arrival times of a Gamma renewal process on [start_s, end_s): inter-arrivals Gamma(shape 1/cv², scale
    cv²/rate) (mean 1/rate, coefficient of variation cv; cv = 1 is Poisson), started in its stationary state (the
    first arrival is a uniform point of a length-biased gap), so the expected count is rate × span at any CV. Empty
    for a zero rate."""
    span = end_s - start_s
    if rate_req_per_s <= 0 or span <= 0:
        return np.zeros(0)
    cv = cv if (cv and math.isfinite(cv) and cv > 0) else 1.0
    shape, scale = 1.0 / cv ** 2, cv ** 2 / rate_req_per_s
    expected = rate_req_per_s * span
    chunks, total = [], 0.0
    first = True
    while total < span:
        m = int(expected + 6 * math.sqrt(expected * max(cv * cv, 1.0)) + 16)
        g = rng.gamma(shape, scale, size=m)
        if first:
            # the stationary start: the gap the window opens in is length-biased (Gamma(shape + 1, scale)) and the
            # window opens at a uniform point of it, so E[arrivals] = rate × span whatever the CV (a first gap of
            # U × an ordinary gap over-counts by about (cv² + 1) / 2 arrivals per start: +0.5 even for Poisson)
            g[0] = rng.gamma(shape + 1.0, scale) * rng.uniform()
            first = False
        c = total + np.cumsum(g)
        chunks.append(c)
        total = float(c[-1])
    t = np.concatenate(chunks)
    return start_s + t[t < span]


#: Per slot, either one CV (an array over the slots) or the clients' (share of the rate, CV) pairs.
_SlotCvs = np.ndarray | tuple[tuple[tuple[float, float], ...], ...]


def _day_rate_profile(m: ScenarioModel, scenario: Scenario, arrivals: str) -> tuple[np.ndarray, _SlotCvs, float, str]:
    """(rates per slot req/s, cv per slot or client mix per slot, slot length s, description) over the day for one
    model's demand."""
    L = float(scenario.options["window_length_s"])
    body = m.demand.servegen
    if body is not None:
        series, day, gaps = body.series, body.day, body.gaps
        factor = float(body.mean_rate_req_per_s) / float(servegen_day_curve(series, day, L, gaps).mean())
        rates = servegen_day_curve(series, day, SLOT_S, gaps) * factor
        cv: _SlotCvs
        if arrivals == "servegen":
            # One Gamma renewal process per ServeGen client, each with its share of the slot's rate and its own
            # fitted CV, superposed (servegen_client_mix): the total stream's burstiness as production had it.
            cv = servegen_client_mix(series, day)
            what = (f"ServeGen {series} 10-min rates × {factor:.4g}, one Gamma renewal process per ServeGen client "
                    "(its share of the rate, its fitted CV), superposed")
        else:
            cv = np.ones_like(rates)
            what = f"ServeGen {series} 10-min rates × {factor:.4g}, Poisson arrivals"
        return rates, cv, SLOT_S, what
    rates = np.asarray(scenario.demands[m.name].rates_req_per_s, dtype=np.float64)
    return rates, np.ones_like(rates), L, "window mean rates, Poisson arrivals"


def scenario_workload(scenario: Scenario, w: int, start_s: float, end_s: float, seed: int, *, arrivals: str = "poisson",
                      measure_from_s: float | None = None, models: list[str] | None = None,
                      names: list[str] | None = None) -> Workload:
    """Requests of every model of ``scenario`` arriving in [start_s, end_s) of window ``w`` (seconds from the
    window's start), drawn as the module docstring says. Deterministic for a given seed.

    ``names`` gives the catalog name of each scenario model in order (``[m.name for m in problem.models]``; the
    scenario may use an alias); ``models`` restricts the replay to those catalog names."""
    if arrivals not in ("servegen", "poisson"):
        raise InputError("arrivals must be 'servegen' or 'poisson'", field="arrivals", value=arrivals)
    L = float(scenario.options["window_length_s"])
    parts, what = [], []
    for i, m in enumerate(scenario_spec(scenario).models):
        name = names[i] if names is not None else m.name
        if models is not None and name not in models:
            continue
        rng = np.random.default_rng([seed, w, i])
        if m.demand.trace is not None:
            tr = _scenario_trace(m.demand.trace, scenario)
            lo, hi = np.searchsorted(tr.arrival_s, [w * L + start_s, w * L + end_s])
            a = tr.arrival_s[lo:hi] - w * L
            inp, out = tr.input_tokens[lo:hi], tr.output_tokens[lo:hi]
            what.append(f"{name}: trace {tr.name} replayed")
        else:
            rates, cv, slot, desc = _day_rate_profile(m, scenario, arrivals)
            t0, t1 = w * L + start_s, w * L + end_s
            chunks = []
            k0, k1 = int(t0 // slot), int(math.ceil(t1 / slot))
            for k in range(k0, k1):
                a0, a1 = max(t0, k * slot), min(t1, (k + 1) * slot)
                r = float(rates[k % len(rates)])
                c = cv[k % len(cv)]
                if isinstance(c, tuple) and c:  # per-client superposition
                    chunks += [gamma_renewal(rng, r * share, ccv, a0, a1) for share, ccv in c]
                else:
                    chunks.append(gamma_renewal(rng, r, float(c) if not isinstance(c, tuple) else 1.0, a0, a1))
            a = np.sort(np.concatenate(chunks)) - w * L if chunks else np.zeros(0)
            inp, out = _tokens(m, scenario, rng, len(a))
            what.append(f"{name}: {desc}")
        parts.append(Workload(np.asarray(a, dtype=np.float64), np.asarray(inp, dtype=np.int64),
                              np.asarray(out, dtype=np.int64), np.full(len(a), name, dtype=object), 0, 0))
    return Workload.concat(parts, start_s if measure_from_s is None else measure_from_s, end_s,
                           "; ".join(what) + f"; seed {seed}")


def _scenario_trace(body: TraceDemand, scenario: Scenario) -> Trace:
    """The trace a model's ``demand.trace`` names (a file relative to the scenario's folder, or a shipped trace),
    time-scaled by its rate_scale."""
    ref = body.file or body.name or ""
    if body.file and scenario.base_dir and not Path(ref).is_absolute():
        ref = str(Path(scenario.base_dir) / ref)
    tr = load_trace(ref)
    scale = float(body.rate_scale or 1.0)
    return tr.time_scaled(scale) if scale != 1.0 else tr


def peak_slot_start_s(scenario: Scenario, w: int) -> float:
    """Start (seconds from the window's start) of window ``w``'s busiest 10-minute slot, all models summed (0 when
    the window is not longer than a slot or the curves have no finer detail than the window)."""
    L = float(scenario.options["window_length_s"])
    if L <= SLOT_S:
        return 0.0
    n = int(L // SLOT_S)
    total = np.zeros(n)
    for m in scenario_spec(scenario).models:
        if m.demand.servegen is None:
            continue
        rates, _, slot, _ = _day_rate_profile(m, scenario, "poisson")
        k0 = int(w * L // slot)
        total += np.resize(np.roll(rates, -k0)[:n], n)
    return float(np.argmax(total) * SLOT_S)


def trace_workload(trace: Trace, problem: Problem, w: int, *, model: str | None = None, rate_scale: bool = False,
                   time_scale: float | None = None, seed: int = 0) -> Workload:
    """The requests of ``trace`` mapped onto the plan's models for window ``w`` (module docstring).

    Raises UnknownNameError for a model (in the trace or given) that the plan does not serve.
    """
    names = list(problem.model_by_name)
    specs = problem.model_by_name
    if model is not None and model not in specs:
        raise UnknownNameError("model", model, names, field="model")
    if time_scale is not None:
        trace = trace.time_scaled(time_scale)
    n = len(trace)
    rng = np.random.default_rng([seed, w])
    if trace.model is not None and model is None:
        mods = np.asarray(trace.model, dtype=object)
        for m in sorted(set(mods.tolist())):
            if m not in specs:
                raise UnknownNameError("model", str(m), names, field="model")
        what = "the trace's model column"
    elif model is not None:
        mods = np.full(n, model, dtype=object)
        what = f"every request to {model}"
    else:
        d = np.asarray([specs[m].demand_req_per_s[w] for m in names], dtype=np.float64)
        if d.sum() <= 0:
            raise InputError(f"no model has demand in window {w}; give --model", field="window", value=w)
        mods = np.asarray(names, dtype=object)[rng.choice(len(names), size=n, p=d / d.sum())]
        what = "split over the plan's models in proportion to their demand in the window (" + ", ".join(
            f"{m} {x / d.sum():.0%}" for m, x in zip(names, d, strict=True)) + ")"
    arr = trace.arrival_s - trace.arrival_s[0]
    factor = 1.0
    if rate_scale:
        want = sum(specs[m].demand_req_per_s[w] for m in set(mods.tolist()))
        have = n / max(trace.span_s, 1e-9)
        factor = want / have if have > 0 else 1.0
        arr = arr / factor
    end = float(arr[-1]) + 1e-9
    src = f"trace {trace.name} ({n} requests), {what}" + (
        f", rate-scaled x{factor:.3g} to the window's demand" if rate_scale else "")
    return Workload(arr.astype(np.float64), np.asarray(trace.input_tokens, dtype=np.int64),
                    np.asarray(trace.output_tokens, dtype=np.int64), mods, 0.0, end, src)
