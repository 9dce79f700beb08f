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
would compute from the same inputs, to the bit (the computation is deterministic: fixed seeds, no clock). An entry is
read back only when its bytes match the SHA-256 stored with them, it unpickles from the cost models' own classes
alone (:class:`_ValueUnpickler`, :class:`_RawDisk`: an entry naming any function, e.g. exec or os.system, is not
loaded) and it is of the function's return type; else it is computed again and replaced. The folder is trusted as
the user's own files are: whoever can write it can make the next plan use wrong capacities (of the right type),
though not run code.

Where: the folder ``FLEETPLAN_CACHE_DIR`` names, else the user's cache folder (``platformdirs.user_cache_dir``:
``~/.cache/fleetplan`` on Linux). ``FLEETPLAN_CACHE_DIR=`` (empty) turns the cache off. The store is a
:class:`diskcache.Cache` (SQLite: safe for concurrent processes, e.g. pytest-xdist's workers), at most
:data:`SIZE_LIMIT_BYTES`, the oldest entries dropped first. A folder that cannot be opened leaves the cache off with
one warning per process on the ``fleetplan`` logger (results are then computed, never wrong); a store that is not a
readable database is moved aside and started again, with one warning. A variable one typo away from
``FLEETPLAN_CACHE_DIR`` is named in a warning.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import io
import logging
import os
import pickle
import shutil
import sqlite3
import sys
from collections.abc import Callable, Mapping
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


#: Functions a stored value may name besides the cost models' classes: numpy's scalar and array reconstructors.
_VALUE_FUNCTIONS = {("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
                    ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct")}


class _ValueUnpickler(pickle.Unpickler):
    """Reads a stored value, loading only classes defined in fleetplan.costmodels (and numpy's dtype, ndarray and
    reconstructors): a foreign entry cannot name a function that runs code (exec, os.system, a loader), so it fails
    to load and is computed again."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102
        if (module, name) in _VALUE_FUNCTIONS or (module, name) in (("numpy", "dtype"), ("numpy", "ndarray")):
            return super().find_class(module, name)
        if module.startswith("fleetplan.costmodels.") and "." not in name:
            obj = super().find_class(module, name)
            if isinstance(obj, type) and obj.__module__.startswith("fleetplan.costmodels."):
                return obj
        raise _Outside(f"{module}.{name}")


class _RawDisk(diskcache.Disk):
    """diskcache's serializer for this store, refusing every entry that is not raw bytes: diskcache itself would
    unpickle a row marked as a pickle (or read a file the row names) before fleetplan's checks see it."""

    def get(self, key: Any, raw: bool) -> Any:  # noqa: D102
        if not raw:
            raise _Outside("a pickled key")
        return super().get(key, raw)

    def fetch(self, mode: int, filename: Any, value: Any, read: bool) -> Any:  # noqa: D102
        if mode != diskcache.core.MODE_RAW:
            raise _Outside(f"an entry of mode {mode}")
        return super().fetch(mode, filename, value, read)


def _digest(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> str | None:
    buf = io.BytesIO()
    try:
        _KeyPickler(buf, protocol=5).dump((fn.__module__, fn.__qualname__, args, sorted(kwargs.items())))
    except (_Outside, pickle.PicklingError, TypeError, AttributeError):
        return None
    return hashlib.sha256(code_version().encode() + b"\0" + buf.getvalue()).hexdigest()


def _open(path: Path) -> diskcache.Cache:
    return diskcache.Cache(str(path), size_limit=SIZE_LIMIT_BYTES, disk=_RawDisk)


@functools.cache
def _store(folder: Path) -> diskcache.Cache | None:
    """The store in ``folder``/capacity, opened once per process; None (the cache off, said once) when it cannot be
    opened. A store that is not a readable database (a torn or foreign cache.db) is moved aside to
    ``capacity.unreadable`` and an empty one started."""
    path = folder / "capacity"
    try:
        return _open(path)
    except sqlite3.DatabaseError as exc:
        aside = folder / "capacity.unreadable"
        try:
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(path, aside)
            store = _open(path)
        except Exception as again:
            _LOG.warning("fleetplan: the capacity cache is off: %s cannot be read (%s) nor moved aside (%s); delete "
                         "that folder, or set %s to another folder (or to nothing to turn the cache off)", path, exc,
                         again, CACHE_DIR_ENV)
            return None
        _LOG.warning("fleetplan: the capacity cache in %s could not be read (%s): moved to %s, an empty one started",
                     path, exc, aside)
        return store
    except Exception as exc:  # an unwritable folder: compute without the cache, and say so once
        _LOG.warning("fleetplan: the capacity cache is off: cannot open %s (%s); set %s to a writable folder, or to "
                     "nothing to turn the cache off", path, exc, CACHE_DIR_ENV)
        return None


def _misspelled_variable(environ: Mapping[str, str]) -> str | None:
    """A FLEETPLAN_* variable in ``environ`` one typo away from :data:`CACHE_DIR_ENV` (which is unset), or None."""
    if CACHE_DIR_ENV in environ:
        return None
    names = [n for n in environ if n.startswith("FLEETPLAN_")]
    close = difflib.get_close_matches(CACHE_DIR_ENV, names, n=1, cutoff=0.85)
    return close[0] if close else None


@functools.cache
def _warn_misspelled(name: str, folder: str) -> None:
    _LOG.warning("fleetplan: %s is not a fleetplan variable; did you mean %s? (the capacity cache stays in %s)", name,
                 CACHE_DIR_ENV, folder)


def kept(returns: type[T], fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, read from the disk cache when the same call was stored by the same code, else
    computed and stored (module docstring). ``fn`` must be a module-level function of this layer, deterministic in
    its arguments, returning a ``returns``. An entry that does not read back as a ``returns`` whose bytes match the
    SHA-256 stored beside them (a torn write, a changed byte, a foreign entry) is computed again and replaced.
    Exceptions of ``fn`` propagate and are not stored."""
    folder = cache_dir()
    if folder is not None and (typo := _misspelled_variable(os.environ)):
        _warn_misspelled(typo, str(folder))
    store = _store(folder) if folder is not None else None
    key = _digest(fn, args, kwargs) if store is not None else None
    if store is None or key is None:
        return fn(*args, **kwargs)
    try:
        blob = store.get(key)
        if isinstance(blob, bytes) and hashlib.sha256(blob[32:]).digest() == blob[:32]:
            value = _ValueUnpickler(io.BytesIO(blob[32:])).load()
            if isinstance(value, returns):
                return value
    except Exception:  # noqa: S110 -- an unreadable entry is computed again (below) and replaced
        pass
    value = fn(*args, **kwargs)
    buf = io.BytesIO()
    try:
        _KeyPickler(buf, protocol=5).dump(value)
        payload = buf.getvalue()
        store.set(key, hashlib.sha256(payload).digest() + payload)
    except Exception:  # noqa: S110 -- a value that cannot be kept, or a full disk: it is returned all the same
        pass
    return value
