"""Interference between workload classes that share a node: the fraction of throughput each loses.

The shipped coefficients are data (``datasets/data/interference/coefficients.csv``, read by
:func:`fleetplan.datasets.sharing.load_interference`); this module holds only the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fleetplan.errors import InputError, UnknownNameError, check_range


@dataclass(frozen=True)
class InterferenceTable:
    """Pairwise interference coefficients by class: the fraction of throughput lost when two classes share a node.

    Attributes:
        coefficients: {(class_a, class_b): fraction in [0, 0.9]}; symmetric, both orders accepted.
        source: where the numbers come from.
    """

    coefficients: Mapping[tuple[str, str], float]
    source: str = ""

    def __post_init__(self) -> None:
        for (a, b), c in self.coefficients.items():
            check_range(c, field=f"coefficient[{a},{b}]", low=0.0, high=0.9, source=self.source or None,
                        fix="give the throughput loss as a fraction, e.g. 0.15")

    @property
    def classes(self) -> set[str]:
        """All classes the table names."""
        return {c for pair in self.coefficients for c in pair}

    def coefficient(self, a: str, b: str) -> float:
        """Loss fraction when classes ``a`` and ``b`` share a node; raises UnknownNameError for a missing pair."""
        if (a, b) in self.coefficients:
            return float(self.coefficients[(a, b)])
        if (b, a) in self.coefficients:
            return float(self.coefficients[(b, a)])
        for c in (a, b):
            if c not in self.classes:
                raise UnknownNameError("interference class", c, self.classes)
        raise InputError(f"interference table has no coefficient for the pair ({a}, {b}); add a row",
                         source=self.source or None, field="coefficient")
