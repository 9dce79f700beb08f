"""Which arrival process each model's capacity assumes, and how the model's trace compares (issue 26, item 6).

The capacity model sizes a replica for a Poisson stream at each window's rate (× the peak factor of an
``arrivals`` key, :mod:`fleetplan.costmodels.arrivals`). A model whose demand comes from a trace (``demand.trace``),
or whose token mix is a trace's (``token_mix.trace``: its arrival times then describe the traffic the lengths come
from), gets that trace's burstiness beside the assumption: the coefficient of variation of its inter-arrival
times, the index of dispersion of its per-minute counts, and the peak factor ``arrivals: {from_trace: ...}`` would
size for, with how to replay it. The figures are measured on the trace, not assumed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetplan.costmodels.arrivals import index_of_dispersion, interarrival_cv, peak_rate_factor
from fleetplan.datasets.traces import load_trace
from fleetplan.errors import InputError
from fleetplan.placement.problem import Problem
from fleetplan.scenario.read import Scenario, scenario_spec

#: The counting interval and quantile of the peak factor quoted (the ``arrivals`` key's defaults).
INTERVAL_S, QUANTILE = 60.0, 0.95


def arrival_assumptions(scenario: Scenario, problem: Problem) -> list[dict[str, Any]]:
    """Per model (the problem's order) {model, assumes, trace (or None), trace_role ('demand' | 'token mix'),
    interarrival_cv, index_of_dispersion_60s, peak_factor_60s_p95, advice}: the arrival process its capacity
    assumes and its trace's burstiness. A trace too short for the figures gets None for them."""
    spec = scenario_spec(scenario)
    base = Path(scenario.base_dir) if scenario.base_dir else None
    out = []
    for sm, m in zip(spec.models, problem.models, strict=True):
        rate = ("each window's planned rate (demand_rate: peak, its busiest 10 minutes where the demand curve has them)"
                if scenario.options.get("demand_rate") == "peak" else "each window's rate")
        assumes = (f"Poisson at {rate}" if m.peak_factor == 1.0 else
                   f"Poisson at {m.peak_factor:.3g} × {rate} ({m.peak_factor_source})")
        ref, role = None, None
        if sm.demand.trace is not None:
            ref, role = sm.demand.trace.name or sm.demand.trace.file, "demand"
            if sm.demand.trace.file and base is not None:
                ref = str(base / sm.demand.trace.file)
        elif sm.token_mix.trace is not None:
            ref, role = sm.token_mix.trace, "token mix"
        entry: dict[str, Any] = {"model": m.name, "assumes": assumes, "trace": None, "trace_role": None,
                                 "interarrival_cv": None, "index_of_dispersion_60s": None,
                                 "peak_factor_60s_p95": None, "advice": ""}
        if ref is not None:
            entry.update(_trace_figures(ref, problem.window_length_s))
            entry["trace_role"] = role
            if m.peak_factor == 1.0 and entry["peak_factor_60s_p95"] is not None:
                entry["advice"] = (f"to size for the trace's burstiness set arrivals: {{from_trace: "
                                   f"{entry['trace']}}} (peak factor {entry['peak_factor_60s_p95']:.3g}); to check "
                                   f"the plan on it: fleetplan simulate PLAN --trace {entry['trace']} --model "
                                   f"{m.name} --rate-scale --window HH:MM")
        out.append(entry)
    return out


def _trace_figures(ref: str, window_s: float) -> dict[str, Any]:
    """The trace's name and its burstiness figures (None where the trace is too short)."""
    tr = load_trace(ref)
    t = tr.arrival_s
    try:
        peak: float | None = peak_rate_factor(t, interval_s=INTERVAL_S, quantile=QUANTILE, window_s=window_s)
    except InputError:  # too short for a 60 s quantile in a window, or a factor below 1
        peak = None
    iod = index_of_dispersion(t, interval_s=INTERVAL_S) if len(t) > 2 else float("nan")
    cv = interarrival_cv(t)
    return {"trace": tr.name, "interarrival_cv": None if cv != cv else cv,
            "index_of_dispersion_60s": None if iod != iod else iod, "peak_factor_60s_p95": peak}


def arrival_lines(entries: list[dict[str, Any]]) -> list[str]:
    """One line per model: the process assumed and, with a trace, its figures and the advice."""
    lines = []
    for e in entries:
        line = f"{e['model']}: capacity assumes {e['assumes']}"
        if e["trace"]:
            figs = [f"inter-arrival CV {e['interarrival_cv']:.2f}" if e["interarrival_cv"] is not None else "",
                    f"index of dispersion {e['index_of_dispersion_60s']:.1f} at 60 s"
                    if e["index_of_dispersion_60s"] is not None else "",
                    f"p95 60 s rate {e['peak_factor_60s_p95']:.2f} × the window's mean"
                    if e["peak_factor_60s_p95"] is not None else ""]
            line += (f"; its {e['trace_role']} trace {e['trace']} (Poisson: CV 1, dispersion 1): "
                     + ", ".join(f for f in figs if f))
            if e["advice"]:
                line += f"; {e['advice']}"
        lines.append(line)
    return lines
