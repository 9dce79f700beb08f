"""The ``--vary`` grids of ``fleetplan sweep``, ``fleetplan whatif`` and ``fleetplan ledger whatif``: one variable's
values from ``NAME=START:STOP:COUNT`` or ``NAME=V1,V2,...``, and the grid of several, refused before any work when
it is malformed or larger than ``--max-cells``."""

from __future__ import annotations

import math
from collections.abc import Collection

from fleetplan.costmodels.split import SWEEP_VARIABLES
from fleetplan.errors import InputError, UnknownNameError

#: Most values one ``--vary NAME=START:STOP:COUNT`` range gives.
MAX_VARY_COUNT = 1000
#: Largest what-if grid run without --max-cells (a 1000 × 1000 grid is a million scenarios: hours of work).
MAX_GRID_CELLS = 10_000
#: Largest ``fleetplan sweep`` grid run without --max-cells: every cell is a solve of up to --time-limit seconds.
MAX_SWEEP_CELLS = 1000
#: Largest --max-cells accepted (of either command).
MAX_CELLS_LIMIT = 10_000_000


def parse_vary(text: str, names: Collection[str] = tuple(SWEEP_VARIABLES)) -> tuple[str, list[float]]:
    """'name=a:b:n' (n values from a to b) or 'name=v1,v2,...', the name one of ``names`` (default: the what-if
    variables). Raises InputError otherwise."""
    if "=" not in text:
        raise InputError(f"--vary {text!r}: write NAME=START:STOP:COUNT or NAME=V1,V2,...", field="--vary", value=text)
    name, spec = (x.strip() for x in text.split("=", 1))
    if name not in names:
        raise UnknownNameError("sweep variable", name, names, field="--vary")
    vals = _range_values(text, name, spec) if ":" in spec else _list_values(text, name, spec)
    if not all(math.isfinite(v) for v in vals):
        raise InputError(f"--vary {text!r}: values must be finite numbers", field="--vary", value=text)
    if not vals:
        raise InputError(f"--vary {text!r}: no values", field="--vary", value=text)
    return name, vals


def _range_values(text: str, name: str, spec: str) -> list[float]:
    """The COUNT values from START to STOP of ``spec`` 'START:STOP:COUNT' (of ``--vary text``), rounded to 12
    decimals (so 0.1 steps print as 0.1, 0.2, ...). Raises InputError naming the part that is wrong."""
    import numpy as np

    if spec.count(":") != 2:
        raise InputError(f"--vary {text!r}: a range is START:STOP:COUNT (three numbers, e.g. {name}=1:2:5 for 5 "
                         f"values from 1 to 2); for a list of values write {name}={spec.replace(':', ',')}",
                         field="--vary", value=text)
    a, b, n = (x.strip() for x in spec.split(":"))
    try:
        count = int(n)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_VARY_COUNT:
        raise InputError(f"--vary {text!r}: the COUNT {n!r} (how many values from START to STOP) must be a whole "
                         f"number from 1 to {MAX_VARY_COUNT}, e.g. {name}={a}:{b}:5", field="--vary", value=text)
    try:
        start, stop = float(a), float(b)
    except ValueError:
        raise InputError(f"--vary {text!r}: START and STOP must be numbers, e.g. {name}=1:2:{count}",
                         field="--vary", value=text) from None
    if not (math.isfinite(start) and math.isfinite(stop)):  # before linspace, which warns on inf/nan
        raise InputError(f"--vary {text!r}: START and STOP must be finite numbers", field="--vary", value=text)
    return [round(float(x), 12) for x in np.linspace(start, stop, count)]


def _list_values(text: str, name: str, spec: str) -> list[float]:
    """The values of ``spec`` 'V1,V2,...' (of ``--vary text``). Raises InputError for an empty or non-numeric
    value."""
    items = spec.split(",")
    if any(not x.strip() for x in items):
        raise InputError(f"--vary {text!r}: value {[x.strip() for x in items].index('') + 1} of the list is empty; "
                         f"write the values with one comma between them, e.g. "
                         f"{name}={','.join(x.strip() for x in items if x.strip()) or '1,2'}", field="--vary",
                         value=text)
    try:
        return [float(x) for x in items]
    except ValueError:
        raise InputError(f"--vary {text!r}: values must be numbers (NAME=V1,V2,... or NAME=START:STOP:COUNT)",
                         field="--vary", value=text) from None


def parse_grid(vary: tuple[str, ...], max_cells: int = MAX_GRID_CELLS,
               names: Collection[str] = tuple(SWEEP_VARIABLES)) -> dict[str, list[float]]:
    """{variable: values} of the ``--vary`` options (variables among ``names``), in order. Raises InputError when a
    variable is given twice (the last would silently win) or the grid has more than ``max_cells`` cells (raise
    --max-cells to run it)."""
    variables: dict[str, list[float]] = {}
    for text in vary:
        name, vals = parse_vary(text, names)
        if name in variables:
            raise InputError(f"--vary {name} is given twice; give all its values in one --vary (e.g. {name}=1,2,3)",
                             field="--vary", value=text)
        variables[name] = vals
    cells = math.prod(len(v) for v in variables.values())
    if cells > max_cells:
        sizes = " × ".join(str(len(v)) for v in variables.values())
        raise InputError(f"the grid has {cells:,} cells ({sizes}); at most {max_cells:,} run without asking: use "
                         f"fewer values or raise --max-cells", field="--vary", value=cells)
    return variables
