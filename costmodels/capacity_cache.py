"""Replica capacities kept on disk between runs, so a scenario sized once is not sized again by the next process.

Sizing one replica option takes ~20 ms (:mod:`fleetplan.costmodels.capacity`: a bisection over arrival rates whose
every step replays 4,000 requests), and the default scenario sizes ~150 of them: three quarters of ``fleetplan plan``'s
CPU time, paid again by every plan, every ``fleetplan serve`` start and every test process. :func:`kept` looks a
computation up by a digest of

- its inputs, pickled (every field of the model, GPU, token mix with its length sample, SLO, engine, calibration row,
  ...): only objects of this layer's modules, numpy's and Python's built-in types may appear in them, else nothing is
  kept (:class:`_KeyPickler`), so no input the digest cannot see (a function, another layer's object) can share an
  entry;
- the code that computes it: every module of :mod:`fleetplan.costmodels` and :mod:`fleetplan.errors`, the only code
  this layer may import from fleetplan (the import-layer contract), with numpy's and Python's versions
  (:func:`code_version`).

A changed input or a changed line of the cost models is a new digest, so an entry is always the value the same code
would compute from the same inputs, to the bit (the computation is deterministic: fixed seeds, no clock).

Where: the folder ``FLEETPLAN_CACHE_DIR`` names, else the user's cache folder (``platformdirs.user_cache_dir``:
``~/.cache/fleetplan`` on Linux). ``FLEETPLAN_CACHE_DIR=`` (empty) turns the cache off. The store is a
:class:`diskcache.Cache` (SQLite: safe for concurrent processes, e.g. pytest-xdist's workers), at most
:data:`SIZE_LIMIT_BYTES`, the oldest entries dropped first. A folder that cannot be opened leaves the cache off with
one warning on the ``fleetplan`` logger; results are then computed, never wrong.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import diskcache
import numpy as np
import platformdirs

_LOG = logging.getLogger("fleetplan")

#: Environment variable naming the cache folder; empty turns the cache off.
CACHE_DIR_ENV = "FLEETPLAN_CACHE_DIR"

#: Largest size of the store, bytes (an entry is ~1 KB: a quarter of a million capacities).
SIZE_LIMIT_BYTES = 256 * 2**20

#: Module prefixes whose objects may appear in a key or a stored value (see the module docstring).
_ALLOWED_MODULES = ("fleetplan.costmodels", "fleetplan.errors", "numpy", "builtins", "copyreg", "_codecs",
                    "collections")

T = TypeVar("T")


def cache_dir() -> Path | None:
    """The cache folder: ``FLEETPLAN_CACHE_DIR`` when set (None when set empty: no cache), else
    ``platformdirs.user_cache_dir("fleetplan")``."""
    given = os.environ.get(CACHE_DIR_ENV)
    if given is not None:
        return Path(given).expanduser() if given.strip() else None
    return Path(platformdirs.user_cache_dir("fleetplan"))


@functools.cache
def code_version() -> str:
    """Hex digest of the code a cached value depends on: the source of every module of fleetplan.costmodels and
    fleetplan.errors (by file name and content), numpy's version and Python's (major.minor.micro)."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(here.glob("*.py")) + [here.parent / "errors.py"]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(f"numpy {np.__version__}; python {sys.version_info[:3]}".encode())
    return h.hexdigest()


def _allowed(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in _ALLOWED_MODULES)


class _Outside(Exception):
    """An object of a module outside :data:`_ALLOWED_MODULES` in a key or a stored value."""


class _KeyPickler(pickle.Pickler):
    """Pickles a key, refusing (:class:`_Outside`) any object whose type, or any class or function pickled by name,
    is not of an allowed module: its behaviour would not be covered by :func:`code_version`."""

    def reducer_override(self, obj: Any) -> Any:  # noqa: D102
        named = obj if isinstance(obj, type) or callable(obj) and hasattr(obj, "__qualname__") else type(obj)
        module = getattr(named, "__module__", None) or ""
        if not _allowed(module) or "<lambda>" in getattr(named, "__qualname__", "") \
                or "<locals>" in getattr(named, "__qualname__", ""):
            raise _Outside(f"{module}.{getattr(named, '__qualname__', '?')}")
        return NotImplemented


class _ValueUnpickler(pickle.Unpickler):
    """Reads a stored value, loading classes of allowed modules only (a foreign file in the folder cannot run
    code)."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102
        if not _allowed(module):
            raise _Outside(f"{module}.{name}")
        return super().find_class(module, name)


def _digest(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> str | None:
    buf = io.BytesIO()
    try:
        _KeyPickler(buf, protocol=5).dump((fn.__module__, fn.__qualname__, args, sorted(kwargs.items())))
    except (_Outside, pickle.PicklingError, TypeError, AttributeError):
        return None
    return hashlib.sha256(code_version().encode() + b"\0" + buf.getvalue()).hexdigest()


@functools.cache
def _store(folder: Path) -> diskcache.Cache | None:
    try:
        return diskcache.Cache(str(folder / "capacity"), size_limit=SIZE_LIMIT_BYTES)
    except Exception as exc:  # an unwritable or broken folder: compute without the cache, and say so once
        _LOG.warning("fleetplan: the capacity cache is off: cannot open %s (%s); set %s to a writable folder, or to "
                     "nothing to turn the cache off", folder, exc, CACHE_DIR_ENV)
        return None


def kept(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, read from the disk cache when the same call was stored by the same code, else
    computed and stored (module docstring). ``fn`` must be a module-level function of this layer, deterministic in
    its arguments. Exceptions propagate and are not stored."""
    folder = cache_dir()
    store = _store(folder) if folder is not None else None
    key = _digest(fn, args, kwargs) if store is not None else None
    if store is None or key is None:
        return fn(*args, **kwargs)
    try:
        blob = store.get(key)
        if isinstance(blob, bytes):
            return _ValueUnpickler(io.BytesIO(blob)).load()
    except Exception:  # noqa: S110 -- an unreadable entry (another version's, a torn disk) is computed again
        pass
    value = fn(*args, **kwargs)
    buf = io.BytesIO()
    try:
        _KeyPickler(buf, protocol=5).dump(value)
        store.set(key, buf.getvalue())
    except Exception:  # noqa: S110 -- a value that cannot be kept, or a full disk: it is returned all the same
        pass
    return value
