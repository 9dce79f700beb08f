"""Names and aliases of GPUs and models (``datasets/data/aliases.csv``): resolving what a user typed to a catalog
name, with "did you mean" suggestions, and the lookups by name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.datasets.catalog.gpus import load_gpu_specs
from fleetplan.datasets.catalog.models import load_models, shipped_models
from fleetplan.datasets.catalog.rows import shipped_rows
from fleetplan.errors import InputError, UnknownNameError


@lru_cache(maxsize=1)
def load_aliases() -> dict[str, dict[str, str]]:
    """The alias table datasets/data/aliases.csv as {kind: {alias: catalog name}} (kind 'gpu' or 'model')."""
    out: dict[str, dict[str, str]] = {}
    for _, row in shipped_rows("aliases.csv").rows:
        out.setdefault(row["kind"], {})[row["alias"]] = row["name"]
    return out


@lru_cache(maxsize=1)
def _alias_repos() -> dict[str, str]:
    """{squashed model alias: its Hugging Face repository} of the aliases.csv rows that name other weights than
    their catalog model (an instruct variant: the same architecture, its own checkpoint; the ``hf_repo`` column)."""
    return {_squash(row["alias"]): row["hf_repo"] for _, row in shipped_rows("aliases.csv").rows
            if row["kind"] == "model" and row.get("hf_repo")}


def alias_hf_repo(name: str) -> str | None:
    """The checkpoint (Hugging Face repository) of model alias ``name`` when the alias names other weights than its
    catalog model (datasets/data/aliases.csv, ``hf_repo`` column; matched ignoring case, spaces and punctuation, as
    :func:`resolve_name` does), else None: the catalog model's own checkpoint holds its weights."""
    return _alias_repos().get(_squash(name))


def _squash(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def resolve_name(kind: str, name: str, known: Iterable[str], extra_aliases: dict[str, str] | None = None) -> str:
    """The catalog name that ``name`` refers to among ``known``.

    Tries, in order: exact; case-insensitive; the alias table (case-insensitive); the same ignoring spaces,
    hyphens and punctuation ('h100 sxm 80gb' -> 'H100-SXM-80GB').

    Raises:
        UnknownNameError: no match; the message suggests close names ("did you mean ...").
    """
    known = list(known)
    if name in known:
        return name
    lower = {k.lower(): k for k in known}
    key = name.strip().lower()
    if key in lower:
        return lower[key]
    aliases = dict(load_aliases().get(kind, {}))
    aliases.update(extra_aliases or {})
    by_lower = {a.lower(): t for a, t in aliases.items()}
    if key in by_lower and by_lower[key].lower() in lower:
        return lower[by_lower[key].lower()]
    squashed = {_squash(k): k for k in known}
    if _squash(name) in squashed:
        return squashed[_squash(name)]
    for alias, target in aliases.items():
        if _squash(alias) == _squash(name) and target.lower() in lower:
            return lower[target.lower()]
    # Suggest aliases too (an 'H10' typo should suggest 'H100', not only the long catalog names).
    raise UnknownNameError(kind, name, known + [a for a, t in aliases.items() if t.lower() in lower])


def get_gpu(name: str, extra: str | Path | None = None) -> GPU:
    """The :class:`GPU` named ``name`` (case-insensitive, aliases such as 'H100', 'A100-80GB', 'L4', 'A10G').

    Raises:
        UnknownNameError: no such GPU ("did you mean ...").
        InputError: the GPU is in the catalog but lacks numbers the analytic model needs (names them and says
            how to add them with an extra file).
    """
    specs = load_gpu_specs(extra)
    canonical = resolve_name("gpu", name, specs)
    spec = specs[canonical]
    if spec.gpu is None:
        raise InputError(f"GPU {canonical!r} is in the catalog but has no {', '.join(spec.missing)} in a cited "
                         "source, so the analytic model cannot use it; add the numbers in your own GPU file "
                         "(same columns as gpus.csv) passed with --extra", field="gpu", value=name)
    return spec.gpu


def get_model(name: str, extra: str | Path | None = None) -> Model:
    """The :class:`Model` named ``name`` (case-insensitive, aliases such as 'llama-3.1-70b', 'Mixtral-8x7B',
    or the Hugging Face repo id 'meta-llama/Llama-3.1-8B').

    Raises:
        UnknownNameError: no such model ("did you mean ...").
    """
    models = load_models(extra)
    _, repos = shipped_models()
    return models[resolve_name("model", name, models, extra_aliases=repos)]
