"""Each option's capacity error with its basis (:mod:`fleetplan.costmodels.uncertainty`), for the options of a
built problem, and the derating that plans for the pessimistic end (``fleetplan plan --robust``).

Roofline options take the held-out errors of the shipped calibration (``datasets/data/calibration/
held_out_errors.csv``), for the engine version each option was sized for (its engine's ``version``, e.g. vLLM 0.11;
a version measured nowhere, or a GPU family measured only on other versions, gets the 'extrapolated' basis). A
scenario with its own calibration file (``options.calibration``) still gets the shipped table's figures, and the
basis says so. Measured options take the spacing of their profile's load levels around the capacity.
"""

from __future__ import annotations

from fleetplan.costmodels.calibration_fit import gpu_family
from fleetplan.costmodels.engine import DEFAULT_ENGINE, EngineConfig
from fleetplan.costmodels.uncertainty import CapacityError, measured_error, roofline_error
from fleetplan.datasets.held_out import load_held_out_table
from fleetplan.placement.problem import DeratingKey, Problem
from fleetplan.scenario.profiles import scenario_profiles
from fleetplan.scenario.read import Scenario


def option_errors(scenario: Scenario, problem: Problem) -> dict[DeratingKey, CapacityError]:
    """{option key ((model, pool, tp, pp); (model, pool, 'shared', 1) for a shared-GPU option): its capacity
    error} for every dedicated and shared option of ``problem`` (built from ``scenario``). Raises InputError for an
    unreadable held-out table."""
    rows = load_held_out_table()
    family_of = {r.gpu: gpu_family(r.gpu) for r in rows}
    calib_file = scenario.options.get("calibration")
    sources = [o.capacity_source for o in problem.options] + [s.capacity_source for s in problem.share_options]
    profiles = scenario_profiles(scenario) if any(src.startswith("measured") for src in sources) else {}
    peak = {m.name: m.peak_factor for m in problem.models}
    pools = problem.pool_by_id
    cache: dict[tuple[str, str, str], CapacityError] = {}

    def roofline(model: str, gpu: str, engine: EngineConfig | None) -> CapacityError:
        fw = (engine or DEFAULT_ENGINE).framework  # the engine version the option was sized for
        if (model, gpu, fw) not in cache:
            e = roofline_error(model, gpu, engine=fw, family_of={**family_of, gpu: gpu_family(gpu)}, rows=rows)
            if calib_file:
                e = CapacityError(e.relative, e.basis, e.detail + " (the shipped calibration's held-out errors; "
                                  "the scenario's calibration file gives none of its own)")
            cache[(model, gpu, fw)] = e
        return cache[(model, gpu, fw)]

    def measured(model: str, gpu: str, tp: int, cap: float, interruption: float) -> CapacityError:
        prof = profiles.get(model, {}).get((gpu, tp))
        if prof is None or not prof.points:
            what = "a throughput table's rate" if prof is not None and prof.table is not None else "step times"
            return CapacityError(0.0, "measured", f"{what} measured on {gpu} tp {tp}; the run-to-run spread is "
                                 "not in the profile")
        raw = cap * peak[model] / (1 - interruption)  # the rate the profile was read at
        return measured_error(raw, [p.req_per_s for p in prof.points], f"profile {prof.label}")

    out: dict[DeratingKey, CapacityError] = {}
    for o in problem.options:
        p = pools[o.pool]
        out[(o.model, o.pool, o.tp, o.pp)] = (
            measured(o.model, p.gpu, o.tp, o.capacity_req_per_s, p.interruption_rate)
            if o.capacity_source.startswith("measured") else roofline(o.model, p.gpu, o.engine))
    for s in problem.share_options:
        p = pools[s.pool]
        out[(s.model, s.pool, "shared", 1)] = (
            measured(s.model, p.gpu, 1, s.capacity_req_per_s, p.interruption_rate)
            if s.capacity_source.startswith("measured") else roofline(s.model, p.gpu, s.engine))
    return out


def robust_derating(errors: dict[DeratingKey, CapacityError]) -> dict[DeratingKey, float]:
    """{option key: 1 − its relative error}: the capacity factors that plan every option at the pessimistic end of
    its stated error (``build_problem(..., derating=...)``); options without error are left out. Raises ValueError
    for an error of 100% or more (no capacity would be left)."""
    out = {}
    for k, e in errors.items():
        if e.relative >= 1:
            raise ValueError(f"capacity error {e.relative:.0%} of {k} leaves no capacity at the pessimistic end")
        if e.relative > 0:
            out[k] = 1 - e.relative
    return out


def step_time_factors(errors: dict[DeratingKey, CapacityError]) -> dict[DeratingKey, float]:
    """{option key: 1 / (1 − its relative error)}: the factor on an option's step times at the pessimistic end of
    its error (a replica that much slower serves (1 − e) × the rate); options without error are left out (factor
    1). Raises ValueError as :func:`robust_derating`."""
    return {k: 1.0 / f for k, f in robust_derating(errors).items()}
