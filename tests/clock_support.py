"""A deterministic stand-in for the solvers' clock, shared by the tests that put a solve on a slow machine."""

from __future__ import annotations


class StepClock:
    """A stand-in for the ``time`` module whose perf_counter advances ``step_s`` seconds at every read: a machine
    as slow as we like, deterministically (the solvers' own clocks are not touched)."""

    def __init__(self, step_s: float):
        self.now, self.step_s = 1000.0, step_s

    def perf_counter(self) -> float:
        self.now += self.step_s
        return self.now
