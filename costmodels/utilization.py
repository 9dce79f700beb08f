"""One vocabulary for "utilization": the three figures fleetplan prints under that word, defined once.

A plan, a replay and a benchmark each measure a different thing and used to call all of them "utilization"
(e.g. 66% for a plan's load, 99.9% for a replay's busy time over a day, 44% for the same replay sliced).
Each printed figure now names its kind (:data:`RATED_LOAD`, :data:`BUSY_TIME`, :data:`SERVED_SHARE`) and the
output carries the kind's definition (:func:`legend`).

- **rated-capacity load**: the load served, in units of the rated capacity of the GPUs held (req/s served / req/s
  those replicas sustain under the SLO by the capacity model), GPU-weighted: what the planner sizes for. The plan's
  ``utilization`` (:func:`fleetplan.placement.plan.evaluate`) and the fleet-day replay's
  ``capacity_utilization`` (rated GPU-seconds of the served requests / billed GPU-seconds) are this kind.
- **busy time**: seconds a device runs an iteration (a prefill or a decode step) / seconds simulated, what
  ``nvidia-smi`` reports as utilization. Continuous batching keeps it near 100% at any load that keeps one request
  in flight, so it says little about headroom. The replay's ``utilization`` column is this kind.
- **served share of the pool**: GPUs' worth of demand served / GPUs in the pool, summed over windows (the tenant
  allocation's objective, ``fleetplan allocate``): idle and unowned nodes count against it, interference losses too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UtilizationKind:
    """One meaning of "utilization".

    Attributes:
        key: short identifier (JSON, code); name: the words printed before the figure; definition: one sentence,
            numerator / denominator.
    """

    key: str
    name: str
    definition: str

    def label(self, value: float, digits: int = 1) -> str:
        """The figure with its kind's name, e.g. 'rated-capacity load 66.0%' (``value`` a fraction)."""
        return f"{self.name} {100 * value:.{digits}f}%"


RATED_LOAD = UtilizationKind(
    "rated_load", "rated-capacity load",
    "load served / rated capacity of the GPUs held (req/s served over the req/s those replicas sustain under the "
    "SLO by the capacity model), GPU-weighted over windows")
BUSY_TIME = UtilizationKind(
    "busy_time", "busy time",
    "seconds a device runs a prefill or decode iteration / seconds simulated (what nvidia-smi reports; continuous "
    "batching keeps it high at any load)")
SERVED_SHARE = UtilizationKind(
    "served_share", "served share of the pool",
    "GPUs' worth of demand served / GPUs in the pool, over the windows (idle, unowned and interference-lost GPUs "
    "count against it)")

#: Every kind, by key.
KINDS: dict[str, UtilizationKind] = {k.key: k for k in (RATED_LOAD, BUSY_TIME, SERVED_SHARE)}


def legend(*kinds: UtilizationKind) -> str:
    """Lines '<name>: <definition>' for ``kinds`` (all when none given), to print under the figures."""
    return "\n".join(f"{k.name}: {k.definition}" for k in (kinds or tuple(KINDS.values())))
