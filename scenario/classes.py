"""Request classes of a model (``models[].classes``): given, or cut from its token-mix trace by prompt edges or
quantiles, each with its share of the demand and its own token mix.
"""

from __future__ import annotations

import math

import numpy as np

from fleetplan.costmodels.demand import TokenMix
from fleetplan.datasets.traces import (
    load_trace,
)
from fleetplan.scenario.options import RequestClass
from fleetplan.scenario.read import field_error, token_mix_from_spec
from fleetplan.scenario.schemas import ClassEdgesSpec, ScenarioModel

#: Prompt-length quantiles of the class edges of ``classes: auto`` (bench_classes: 8B at 10x, -16.6% cost).
AUTO_CLASS_QUANTILES = (0.5, 0.8)


def trace_classes(m: ScenarioModel, where: str) -> list[RequestClass]:
    """Request classes of ``m`` cut from its token-mix trace at prompt-length edges (``classes: {prompt_edges}``,
    ``{prompt_quantiles}`` or ``auto``): [(name, share, token mix, input_tokens_max, output_tokens_max)], empty
    classes left out. Raises InputError when a class would hold fewer than 20 requests (no p95 to speak of)."""
    if m.token_mix.trace is None:  # ScenarioModel checks this too
        raise field_error("classes cut at prompt edges need token_mix: {trace: ...}", where, "classes")
    spec = m.classes
    if isinstance(spec, ClassEdgesSpec):
        given = [v for v in (spec.prompt_edges, spec.prompt_quantiles) if v is not None]
        if len(given) != 1 or not given[0]:
            raise field_error("classes: give one of prompt_edges or prompt_quantiles (a non-empty "
                              "list)", where, "classes")
        if any(b <= a for a, b in zip(given[0], given[0][1:], strict=False)):
            raise field_error(f"classes: edges {given[0]} must be ascending", where, "classes", given[0])
    tr = load_trace(m.token_mix.trace)
    inp, out = tr.input_tokens, tr.output_tokens
    if isinstance(spec, ClassEdgesSpec) and spec.prompt_edges is not None:
        edges = [float(e) for e in spec.prompt_edges]
    else:
        qs = spec.prompt_quantiles if isinstance(spec, ClassEdgesSpec) and spec.prompt_quantiles else (
            AUTO_CLASS_QUANTILES)
        edges = sorted({float(np.quantile(inp, q)) for q in qs})
    bounds = [0.0, *edges, math.inf]
    out_classes = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        sel = (inp > lo) & (inp <= hi)
        if not sel.any():
            continue
        if sel.sum() < 20:
            raise field_error(f"the class of prompts in ({lo:g}, {hi:g}] tokens holds {int(sel.sum())} requests of "
                              f"trace "
                       f"{tr.name}; move the edges", where, "classes")
        mix = TokenMix(float(inp[sel].mean()), float(np.percentile(inp[sel], 95)), float(out[sel].mean()),
                       float(np.percentile(out[sel], 95)), lengths=(inp[sel], out[sel]))
        out_classes.append((f"prompt<={hi:g}", float(sel.mean()), mix, hi, math.inf))
    total = sum(c[1] for c in out_classes)
    return [(n, sh / total, mx, a, b) for n, sh, mx, a, b in out_classes]


def model_classes(m: ScenarioModel, where: str) -> list[RequestClass]:
    """The request classes of scenario model ``m`` (the entry ``where``): cut from its trace
    (:func:`trace_classes`) for ``auto`` or edges, else the listed classes with their token mixes and bounds (inf
    when not given); empty without ``classes``. Raises InputError naming the class."""
    if m.classes == "auto" or isinstance(m.classes, ClassEdgesSpec):
        return trace_classes(m, where)
    return [(c.name, c.share, token_mix_from_spec(c.token_mix, f"{where}.classes[{k}]"),
             c.input_tokens_max or math.inf, c.output_tokens_max or math.inf)
            for k, c in enumerate(m.classes or [])]
