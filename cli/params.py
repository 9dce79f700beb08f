"""click parameter types of the fleetplan commands."""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteRange(click.FloatRange):
    """:class:`click.FloatRange` that also refuses nan and ±inf: every comparison with nan is false, so a plain
    FloatRange let ``--slice nan`` through to a traceback deep in the simulator (a fresh user's finding), and
    ``--slice inf`` through to a replay that never ends. Bounds as FloatRange's (``min``, ``max``, ``min_open``,
    ``max_open``, ``clamp``)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:  # noqa: D102
        rv = super().convert(value, param, ctx)
        if isinstance(rv, float) and not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number; give a number {self._describe_range()}", param, ctx)
        return rv
