"""A training-troughs scenario (``fleetplan troughs``; the shipped ``datasets/scenarios/troughs_default.yaml``): an
inference service with its own GPUs and a demand curve, and a training job whose GPUs inference may borrow in its
troughs (:class:`TroughProblem`, solved by :mod:`fleetplan.solvers.troughs`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field

from fleetplan.errors import InputError
from fleetplan.fileio import InputModel, input_field, validate_input
from fleetplan.scenario.read import read_yaml_input


class TrainingSpec(InputModel):
    """The training job: its GPUs, the work it must finish, its priority and what a preemption costs."""

    gpus: int = input_field(ge=1, le=100_000, description="GPUs the job owns")
    gpu_hours: float = input_field(gt=0, le=1e8, description="GPU-hours of work it must finish over the day")
    priority: float = input_field(1.0, ge=0, le=1e6, description="weight on the price of the work a preemption "
                                  "loses (0: lost work is free as long as the job finishes)")
    checkpoint_interval_s: float = input_field(gt=0, le=86_400, description="seconds between checkpoints; a "
                                               "preempted GPU loses half of it on average")
    restart_s: float = input_field(0.0, ge=0, le=86_400, description="seconds to restart a preempted GPU's share "
                                   "(reload, warm-up)")
    usd_per_gpu_hour: float = input_field(gt=0, le=1e4, description="what one training GPU-hour costs (prices the "
                                          "lost work)")


class InferenceSpec(InputModel):
    """The inference service: its own GPUs, its demand per window and the on-demand price of overflow GPUs."""

    own_gpus: int = input_field(ge=0, le=100_000, description="GPUs inference owns")
    demand_gpus: list[Annotated[float, Field(ge=0, le=100_000)]] = input_field(
        min_length=1, description="GPUs inference needs per window (rounded up)")
    on_demand_usd_per_gpu_hour: float = input_field(gt=0, le=1e4, description="price of an overflow GPU-hour "
                                                    "rented on demand")


class TroughsFile(InputModel):
    """A training-troughs scenario."""

    name: str = input_field("", description="label")
    description: str | None = input_field(None, description="free text")
    window_s: float = input_field(3600.0, ge=60, le=86_400, description="window length, seconds")
    training: TrainingSpec = input_field(description="the training job")
    inference: InferenceSpec = input_field(description="the inference service")


@dataclass(frozen=True)
class TroughProblem:
    """The checked scenario (field meanings as in :class:`TrainingSpec` and :class:`InferenceSpec`).

    Attributes:
        need_gpus: per window, the GPUs inference needs beyond its own: max(0, ceil(demand) − own_gpus).
        lost_gpu_hours_per_preemption: work one preempted GPU loses, GPU-hours:
            (checkpoint_interval_s / 2 + restart_s) / 3600.
    """

    name: str
    window_h: float
    training_gpus: int
    training_gpu_hours: float
    priority: float
    lost_gpu_hours_per_preemption: float
    training_usd_per_gpu_hour: float
    own_gpus: int
    demand_gpus: tuple[float, ...]
    on_demand_usd_per_gpu_hour: float

    @property
    def need_gpus(self) -> tuple[int, ...]:
        return tuple(max(0, math.ceil(d - 1e-9) - self.own_gpus) for d in self.demand_gpus)

    @property
    def n_windows(self) -> int:
        return len(self.demand_gpus)


def troughs_from_dict(data: object, *, source: str = "scenario") -> TroughProblem:
    """A :class:`TroughProblem` from a mapping of the ``troughs_default.yaml`` layout. Raises InputError naming the
    field for bad values, and when the training job cannot finish its work even with nothing borrowed."""
    spec = validate_input(TroughsFile, data, source=source)
    t, i = spec.training, spec.inference
    h = spec.window_s / 3600
    cap = t.gpus * h * len(i.demand_gpus)
    if t.gpu_hours > cap + 1e-9:
        raise InputError(f"training needs {t.gpu_hours:g} GPU-hours but its {t.gpus} GPUs give only {cap:g} over the "
                         f"{len(i.demand_gpus)} windows; lower gpu_hours or give more GPUs", source=source,
                         field="training.gpu_hours", value=t.gpu_hours)
    return TroughProblem(spec.name, h, t.gpus, t.gpu_hours, t.priority, (t.checkpoint_interval_s / 2 + t.restart_s)
                         / 3600, t.usd_per_gpu_hour, i.own_gpus, tuple(i.demand_gpus), i.on_demand_usd_per_gpu_hour)


def load_troughs(path: str | Path | None = None) -> TroughProblem:
    """Read a troughs YAML (the shipped ``troughs_default.yaml`` if no path); InputError for a missing or bad file."""
    data, src = read_yaml_input(path, "troughs_default.yaml", "troughs YAML file")
    return troughs_from_dict(data, source=src)
