"""Does speculative decoding pay for a model's token mix? Each dedicated option of the model sized with and
without speculation (``fleetplan ledger speculation``).

For every pool and tensor-parallel degree the scenario gives the model (pp 1), the option's capacity under the
model's SLO and mix (:func:`fleetplan.scenario.options.replica_option`: derated by the pool's interruption rate, as
the planner sizes it) is computed twice on the calibrated roofline, with the model's engine as the scenario states
it, once without and once with the given :class:`~fleetplan.costmodels.engine.Speculation`. The draft runs on the
replica's own GPUs, so a replica costs the same per hour either way and capacity per dollar moves with capacity:
speculation pays on an option when its capacity is higher. Capacity with speculation need not grow with the
acceptance rate alpha, so where it pays is a set of ranges of alpha
(:func:`fleetplan.costmodels.speculative.acceptance_break_even`: sampled every 0.05 and at the rate asked, crossings
to :data:`BREAK_EVEN_TOLERANCE`), and the break-even acceptance rate is the lowest alpha from which it pays at every
higher rate (None when it does not pay at alpha 1, even if it pays at lower rates: the ranges say where). The row's
``pays`` (at the rate asked) and its ranges agree by construction: the rate asked is one of the samples. Measured
profiles are left aside (both sides on the roofline, like for like): a profile holds no verification pass.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from fleetplan.costmodels.calibration import Calibration
from fleetplan.costmodels.engine import Speculation
from fleetplan.costmodels.hardware import GPU
from fleetplan.costmodels.speculative import AcceptanceBreakEven, acceptance_break_even
from fleetplan.placement.problem import Pool
from fleetplan.scenario.build import ModelSizing, model_sizing
from fleetplan.scenario.options import ModelInputs, engine_calibration, replica_option, tp_candidates
from fleetplan.scenario.read import Scenario, scenario_catalog_file, scenario_engine

#: Acceptance-rate tolerance of the break-even search.
BREAK_EVEN_TOLERANCE = 1e-3


@dataclass(frozen=True)
class SpeculationRow:
    """One option with and without speculation.

    Attributes:
        pool, gpu, tp: the option.
        usd_per_replica_hour: its GPUs' price per hour (the pool's per-GPU price × tp), USD.
        base_req_per_s, spec_req_per_s: capacity without and with speculation, req/s (0: the SLO is out of reach).
        base_note, spec_note: why the option has no capacity on that side ('' when it has).
        base_usd_per_million_requests, spec_usd_per_million_requests: the replica's hourly price / (capacity ×
            3600) × 1e6 (inf without capacity), USD.
        ratio: spec / base capacity (inf when only speculation meets the SLO, nan when neither does).
        acceptance: where speculation pays over alpha in [0, 1] and the break-even rate (module docstring); None
            when not searched (``break_even=False``).
    """

    pool: str
    gpu: str
    tp: int
    usd_per_replica_hour: float
    base_req_per_s: float
    spec_req_per_s: float
    base_note: str
    spec_note: str
    base_usd_per_million_requests: float
    spec_usd_per_million_requests: float
    ratio: float
    acceptance: AcceptanceBreakEven | None

    @property
    def pays(self) -> bool:
        """True when speculation gives this option more capacity per dollar (at the acceptance rate asked)."""
        return self.spec_req_per_s > self.base_req_per_s

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form: the fields, ``pays``, and (when searched, else null) ``pays_at_acceptance`` (a list of
        [lo, hi] ranges of alpha), ``break_even_acceptance_rate`` (the lowest alpha from which it pays at every
        higher rate) and ``break_even_note`` (why there is none, '' when there is one)."""
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "acceptance"}
        a = self.acceptance
        return {**d, "pays": self.pays,
                "pays_at_acceptance": [list(r) for r in a.pays_at] if a is not None else None,
                "break_even_acceptance_rate": a.break_even if a is not None else None,
                "break_even_note": a.note() if a is not None else "not searched"}


def _usd_per_million(usd_per_hour: float, req_per_s: float) -> float:
    return usd_per_hour / (req_per_s * 3600.0) * 1e6 if req_per_s > 0 else math.inf


def _capacity(sizing: ModelSizing, mi: ModelInputs, *, pool: Pool, gpu: GPU, tp: int, pp: int, calib: Calibration,
              src: str) -> tuple[float, str]:
    """(capacity req/s of ``mi``'s option on ``pool`` at (tp, pp), '') or (0.0, why it has none)."""
    why: list[str] = []
    o = replica_option(sizing.context, mi, pool, gpu, tp=tp, pp=pp, calib=calib, roofline_source=src, why=why)
    return (o.capacity_req_per_s, "") if o is not None else (0.0, "; ".join(why))


def speculation_whatif(scenario: Scenario, model: str, spec: Speculation, *,
                       break_even: bool = True) -> tuple[ModelInputs, list[SpeculationRow]]:
    """Each dedicated option (pp 1) of ``model`` in ``scenario`` with and without ``spec`` (module docstring):
    (the model's inputs, one row per option in pool order, then tp). ``spec``'s draft model is resolved from the
    catalog (or the scenario's ``files.models``). ``break_even``: also search where speculation pays over alpha and
    the break-even rate (21 sizings per option and about 7 per crossing). Raises InputError / UnknownNameError
    for an unknown model or draft."""
    sizing: ModelSizing = model_sizing(scenario, model)
    mi = dataclasses.replace(sizing.model, profiles={})
    engine = scenario_engine(dataclasses.replace(mi.engine, speculative=spec), scenario.source,
                             "speculation", scenario_catalog_file(scenario, "models"))
    resolved = engine.speculative
    assert resolved is not None
    base_mi = dataclasses.replace(mi, engine=dataclasses.replace(mi.engine, speculative=None))
    rows = []
    for pool in sizing.pools:
        gpu = sizing.gpus[pool.gpu]
        calib, src = engine_calibration(sizing.context, gpu, mi.engine)
        for tp, pp in tp_candidates(mi, pool, []):
            capacity = functools.partial(_capacity, sizing, pool=pool, gpu=gpu, tp=tp, pp=pp, calib=calib, src=src)

            def at(alpha: float, capacity: Callable[[ModelInputs], tuple[float, str]] = capacity) -> float:
                s = dataclasses.replace(resolved, acceptance_rate=alpha)
                return capacity(dataclasses.replace(mi, engine=dataclasses.replace(engine, speculative=s)))[0]

            base, base_why = capacity(base_mi)
            spec_cap, spec_why = capacity(dataclasses.replace(mi, engine=engine))
            if base <= 0 and spec_cap <= 0:
                continue  # the option exists on neither side: the plan's options_not_used says why
            acceptance = (acceptance_break_even(at, base, sample=(spec.acceptance_rate,),
                                                tolerance=BREAK_EVEN_TOLERANCE) if break_even else None)
            usd = pool.usd_per_gpu_hour * tp * pp
            rows.append(SpeculationRow(
                pool=pool.id, gpu=pool.gpu, tp=tp, usd_per_replica_hour=usd, base_req_per_s=base,
                spec_req_per_s=spec_cap, base_note=base_why, spec_note=spec_why,
                base_usd_per_million_requests=_usd_per_million(usd, base),
                spec_usd_per_million_requests=_usd_per_million(usd, spec_cap),
                ratio=spec_cap / base if base > 0 else (math.inf if spec_cap > 0 else math.nan),
                acceptance=acceptance))
    return mi, rows


def verdict(rows: list[SpeculationRow]) -> str:
    """One sentence: the cheapest option per request without and with speculation, and whether speculation pays
    for the mix (the cheapest with it is cheaper than the cheapest without)."""
    if not rows:
        return "no option of the model meets its SLO with or without speculation"
    b = min(rows, key=lambda r: r.base_usd_per_million_requests)
    s = min(rows, key=lambda r: r.spec_usd_per_million_requests)
    what = (f"cheapest without: {b.pool} tp {b.tp} at ${b.base_usd_per_million_requests:,.2f} per 1M requests; "
            f"with: {s.pool} tp {s.tp} at ${s.spec_usd_per_million_requests:,.2f}")
    if not math.isfinite(b.base_usd_per_million_requests):
        return f"speculation pays: only with it does an option meet the SLO ({what})"
    if s.spec_usd_per_million_requests < b.base_usd_per_million_requests:
        return (f"speculation pays: {1 - s.spec_usd_per_million_requests / b.base_usd_per_million_requests:.1%} "
                f"less per request ({what})")
    return (f"speculation does not pay: {s.spec_usd_per_million_requests / b.base_usd_per_million_requests - 1:.1%} "
            f"more per request ({what})")
