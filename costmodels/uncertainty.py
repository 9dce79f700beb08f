"""The expected error of an option's capacity, with its basis, from the calibration's held-out errors.

A capacity is only as good as the latency model behind it. Each option's capacity gets a relative error and the
basis of that figure (issue 26, item 5), by where its numbers come from:

1. ``measured``: a measured serving profile (vllm bench serve, guidellm, an AIBrix table) for this GPU and tp: the
   rate is read between the profile's own load levels; its error is the relative distance from the capacity to the
   farther of the two measured levels around it (the true limit lies between them), 0 at a measured level.
2. ``fitted in-sample``: the roofline, and the calibration data holds this (model, GPU) group measured on the
   planned engine: the error is that group's held-out error (its rows predicted by the constants refitted without
   it; larger than its in-sample fit error, so the figure does not reward the fit for having seen the group).
3. ``held-out family``: the roofline, the model is not measured on this GPU but its GPU family is, on the planned
   engine: the median over the family's groups of their held-out error.
4. ``extrapolated``: the GPU family is measured only on other engines or versions (e.g. A100 on vLLM 0.5 and
   TensorRT-LLM only, the planned engine vLLM 0.11), or not at all (the calibration's default row): the largest
   held-out error among the groups the figure rests on (the family's, on any engine; all groups for an unmeasured
   family), with what was extrapolated named.

A group's error is the largest of its prefill-time, decode-step-time (kinds as ``fleetplan.datasets.measured.GOALS``)
and static-batch (e2e) held-out MdAPE (median absolute percentage error): a capacity is bounded by TTFT or TPOT,
whichever binds.
The figures are data: ``datasets/data/calibration/held_out_errors.csv`` (``fleetplan calibrate
--held-out-table``), never constants here.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: Held-out kinds per goal (as fleetplan.datasets.measured.GOALS): prefill time and decode step time.
PREFILL_KINDS = ("prefill",)
DECODE_KINDS = ("decode", "tpot", "tpot_mixed")
#: A static batch run to completion (prefill + every decode step): a third figure where a group has no other.
E2E_KINDS = ("e2e",)


@dataclass(frozen=True)
class HeldOutError:
    """One row of the held-out error table.

    Attributes:
        model, gpu: the held-out (model, GPU) group (catalog names as the measurements give them).
        framework: engine and version of the rows, e.g. 'vLLM 0.11'.
        kind: observation kind (prefill, decode, tpot, tpot_mixed, e2e).
        n: observations of the group of that kind.
        relative: their median absolute relative error (0.19 = 19%).
    """

    model: str
    gpu: str
    framework: str
    kind: str
    n: int
    relative: float


@dataclass(frozen=True)
class CapacityError:
    """An option capacity's expected relative error and its basis.

    Attributes:
        relative: expected relative error of the capacity (0.19 = ±19%), >= 0.
        basis: 'measured', 'fitted in-sample', 'held-out family' or 'extrapolated'.
        detail: the figures behind it, in words.
    """

    relative: float
    basis: str
    detail: str

    def to_dict(self) -> dict[str, float | str]:
        """{'relative', 'basis': basis and detail in one string} for the plan JSON."""
        return {"relative": round(self.relative, 4), "basis": f"{self.basis}: {self.detail}"}


def group_errors(rows: Iterable[HeldOutError]) -> dict[tuple[str, str, str], float]:
    """{(model, GPU, framework): relative error} per held-out group: the largest of its prefill, decode-step and
    static-batch (e2e) medians (each the median over the group's kinds of that goal, weighted by observations);
    groups with none of these kinds are left out."""
    by: dict[tuple[str, str, str], dict[str, list[tuple[float, int]]]] = {}
    for r in rows:
        goal = ("prefill" if r.kind in PREFILL_KINDS else "decode" if r.kind in DECODE_KINDS
                else "e2e" if r.kind in E2E_KINDS else None)
        if goal:
            by.setdefault((r.model, r.gpu, r.framework), {}).setdefault(goal, []).append((r.relative, r.n))
    out = {}
    for key, goals in by.items():
        out[key] = max(_weighted_median(v) for v in goals.values())
    return out


def _weighted_median(values: Sequence[tuple[float, int]]) -> float:
    """Median of values repeated by their counts (each group-kind MdAPE stands for its n observations)."""
    return statistics.median([v for v, n in values for _ in range(max(n, 1))])


def roofline_error(model: str, gpu: str, *, engine: str, family_of: dict[str, str],
                   rows: Iterable[HeldOutError]) -> CapacityError:
    """The error of a roofline capacity of ``model`` on ``gpu`` planned for ``engine`` (e.g. 'vLLM 0.11').

    ``family_of`` maps each GPU name of the table (and ``gpu``) to its family ('A100', 'H100'; absent or 'other'
    for an unfitted family). Cases 2-4 of the module docstring. Raises ValueError when the table has no group.
    """
    errs = group_errors(rows)
    if not errs:
        raise ValueError("the held-out error table has no prefill or decode-step group")
    fam = family_of.get(gpu)
    own = errs.get((model, gpu, engine))
    if own is not None:
        return CapacityError(own, "fitted in-sample",
                             f"{model} on {gpu} ({engine}) is in the calibration data; its held-out error "
                             f"{own:.1%}")
    same = {k: v for k, v in errs.items() if fam is not None and family_of.get(k[1]) == fam}
    on_engine = [v for k, v in same.items() if k[2] == engine]
    if on_engine:
        med = statistics.median(on_engine)
        return CapacityError(med, "held-out family",
                             f"median held-out error of the {len(on_engine)} {fam} group(s) measured on {engine}")
    if same:
        worst = max(same.values())
        engines = ", ".join(sorted({k[2] for k in same}))
        return CapacityError(worst, "extrapolated",
                             f"to {engine}: {fam} is measured on {engines} only; the largest held-out error of its "
                             f"{len(same)} group(s)")
    worst = max(errs.values())
    return CapacityError(worst, "extrapolated",
                         f"to GPU {gpu}: its family is not in the calibration data (the default row); the largest "
                         f"held-out error of all {len(errs)} groups")


def measured_error(capacity_req_per_s: float, levels_req_per_s: Sequence[float], detail: str = "") -> CapacityError:
    """The error of a capacity read from a measured profile's load levels (case 1 of the module docstring):
    max(capacity − the level below, the level above − capacity) / capacity, over the two measured levels around it
    (0 at a level; only the level below counts at or past the highest). ``levels_req_per_s``: the measured rates.
    """
    levels = sorted(levels_req_per_s)
    below = [x for x in levels if x <= capacity_req_per_s]
    above = [x for x in levels if x >= capacity_req_per_s]
    if capacity_req_per_s <= 0 or not levels:
        return CapacityError(0.0, "measured", detail or "no load levels")
    gaps = [capacity_req_per_s - below[-1]] if below else []
    gaps += [above[0] - capacity_req_per_s] if above and below else []
    rel = max(gaps, default=0.0) / capacity_req_per_s
    return CapacityError(rel, "measured", (detail + "; " if detail else "")
                         + f"the farther measured load level around {capacity_req_per_s:.3g} req/s is {rel:.1%} away")
