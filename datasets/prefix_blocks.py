"""Prefix-cache block ids of a trace: the Mooncake FAST'25 traces' ``hash_ids`` (one list per request; equal ids
are the same 512-token KV block; provenance and license in ``data/traces/mooncake/PROVENANCE.md``). The request
fields themselves are read by :func:`fleetplan.datasets.traces.read_mooncake_jsonl`, which drops the block ids."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from fleetplan.errors import InputError

#: Tokens per block of the Mooncake traces (their README).
MOONCAKE_BLOCK_TOKENS = 512
_SHIPPED = {"mooncake-conversation": "conversation_trace.jsonl", "mooncake-synthetic": "synthetic_trace.jsonl"}


def read_block_ids(path_or_name: str | Path, *, limit: int | None = None) -> list[list[int]]:
    """Per request (file order), its prefix-block ids. ``path_or_name``: a JSON Lines path, or a shipped name
    ('mooncake-conversation', 'mooncake-synthetic'); ``limit``: read at most that many requests. Raises InputError
    naming the file and line for a missing file, bad JSON or a missing/ill-typed ``hash_ids``."""
    name = str(path_or_name)
    if name in _SHIPPED:
        text = resources.files("fleetplan.datasets").joinpath("data", "traces", "mooncake",
                                                             _SHIPPED[name]).read_text(encoding="utf-8")
    else:
        p = Path(path_or_name)
        if not p.is_file():
            raise InputError(f"trace {p} does not exist; give a JSON Lines file or one of {', '.join(_SHIPPED)}",
                             source=str(p))
        text = p.read_text(encoding="utf-8")
    out: list[list[int]] = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if limit is not None and len(out) >= limit:
            break
        try:
            ids = json.loads(line)["hash_ids"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise InputError("each line must be a JSON object with hash_ids (a list of block ids)", source=name,
                             row=i, field="hash_ids") from None
        if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
            raise InputError("hash_ids must be a list of whole numbers", source=name, row=i, field="hash_ids")
        out.append(ids)
    return out
