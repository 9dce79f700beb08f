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
alone (:class:`_ValueUnpickler`: an entry naming any function, e.g. exec or os.system, is not loaded) and it is of
the function's return type; else it is computed again and replaced. The folder is trusted as the user's own files
are: whoever can write it can make the next plan use wrong capacities (of the right type), though not run code.

Where: the folder ``FLEETPLAN_CACHE_DIR`` names, else the user's cache folder (``platformdirs.user_cache_dir``:
``~/.cache/fleetplan`` on Linux). ``FLEETPLAN_CACHE_DIR=`` (empty) turns the cache off. The store is one SQLite
table of (digest, bytes) in ``capacity/cache.db`` (:class:`_Store`: WAL, safe for concurrent processes such as
pytest-xdist's workers), at most :data:`MAX_ENTRIES` entries, the oldest dropped first. (diskcache was used first;
it is unmaintained and unpickles rows itself, CVE-2025-69872.) A folder that cannot be opened leaves the cache off
with one warning per process on the ``fleetplan`` logger (results are then computed, never wrong); so do a store
another process keeps locked for :data:`LOCK_TIMEOUT_S`, a missing home folder and an install without the cost
models' sources. A store that is not a readable database is moved aside and started again, with one warning. A
variable one typo away from ``FLEETPLAN_CACHE_DIR`` is named in a warning.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import io
import logging
import os
import pickle
import pkgutil
import shutil
import sqlite3
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import platformdirs

_LOG = logging.getLogger("fleetplan")

#: Environment variable naming the cache folder; empty turns the cache off.
CACHE_DIR_ENV = "FLEETPLAN_CACHE_DIR"

#: Most entries the store keeps (an entry is under 1 KB: at most ~200 MB); the oldest go first.
MAX_ENTRIES = 200_000

#: Longest wait for the store's write lock, seconds (diskcache's default was 60 s: a process holding the lock, e.g.
#: a sqlite3 shell in a transaction, made a 1.5-s plan take 182 s). After one such wait the cache is off for the
#: process: a cache must never make a plan slower than no cache.
LOCK_TIMEOUT_S = 1.0

#: Module prefixes whose objects may appear in a key or a stored value (see the module docstring).
_ALLOWED_MODULES = ("fleetplan.costmodels", "fleetplan.errors", "numpy", "builtins", "copyreg", "_codecs",
                    "collections")

T = TypeVar("T")


def cache_dir() -> Path | None:
    """The cache folder: ``FLEETPLAN_CACHE_DIR`` when set (None when set empty: no cache), else
    ``platformdirs.user_cache_dir("fleetplan")``. Raises RuntimeError where there is no home folder to expand
    (no HOME and no passwd entry; a ``~user`` that does not exist)."""
    given = os.environ.get(CACHE_DIR_ENV)
    if given is not None:
        return Path(given).expanduser() if given.strip() else None
    return Path(platformdirs.user_cache_dir("fleetplan"))


class _Off(Exception):
    """The cache cannot be used in this process (the reason is the message)."""


@functools.cache
def code_version() -> str:
    """Hex digest of the code a cached value depends on: the source of every module of fleetplan.costmodels and
    fleetplan.errors (by file name and content), numpy's version and Python's (major.minor.micro). Raises
    :class:`_Off` when a module's source is not installed (an install of bytecode alone): the digest would not
    cover that module's code."""
    here = Path(__file__).resolve().parent
    files = sorted(here.glob("*.py"))
    sourceless = sorted({m.name for m in pkgutil.iter_modules([str(here)])} - {f.stem for f in files})
    if sourceless or not (here.parent / "errors.py").is_file():
        missing = ", ".join(sourceless) or "errors"
        raise _Off(f"the cost models' sources are not installed beside their bytecode ({missing}), so a cached "
                   "capacity could not be tied to the code that computed it")
    h = hashlib.sha256()
    for path in files + [here.parent / "errors.py"]:
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


def _digest(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> str | None:
    buf = io.BytesIO()
    try:
        _KeyPickler(buf, protocol=5).dump((fn.__module__, fn.__qualname__, args, sorted(kwargs.items())))
    except (_Outside, pickle.PicklingError, TypeError, AttributeError):
        return None
    return hashlib.sha256(code_version().encode() + b"\0" + buf.getvalue()).hexdigest()


class _Locked(Exception):
    """The store stayed locked by another process for :data:`LOCK_TIMEOUT_S`."""


class _Store:
    """One SQLite table ``entry(key TEXT PRIMARY KEY, value BLOB)`` in ``folder``/cache.db, in WAL mode (readers do
    not wait for a writer), with a connection per thread and process. Keeps at most :data:`MAX_ENTRIES` entries
    (checked at open and every 1,024 writes of a process), dropping the oldest written. Raises sqlite3 errors at
    open (:func:`_store` handles them) and :class:`_Locked` when a write waits :data:`LOCK_TIMEOUT_S` in vain."""

    def __init__(self, folder: Path):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # the entries are trusted: the owner's alone
        self.directory = folder
        self._path = folder / "cache.db"
        self._local = threading.local()
        self._writes = 0
        con = self._con()
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE IF NOT EXISTS entry (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
        self._bound()

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None or getattr(self._local, "pid", None) != os.getpid():
            con = sqlite3.connect(self._path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
            self._local.con, self._local.pid = con, os.getpid()
        return con

    def get(self, key: str) -> bytes | None:
        """The bytes stored under ``key``, or None."""
        row = self._con().execute("SELECT value FROM entry WHERE key = ?", (key,)).fetchone()
        return bytes(row[0]) if row is not None else None

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def set(self, key: str, value: bytes) -> None:
        """Store ``value`` under ``key`` (replacing it: a replaced entry counts as the newest)."""
        try:
            self._con().execute("INSERT OR REPLACE INTO entry (key, value) VALUES (?, ?)", (key, value))
            self._writes += 1
            if self._writes % 1024 == 0:
                self._bound()
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise _Locked(str(exc)) from None
            raise

    def _bound(self) -> None:
        con = self._con()
        (n,) = con.execute("SELECT COUNT(*) FROM entry").fetchone()
        if n > MAX_ENTRIES:
            con.execute("DELETE FROM entry WHERE rowid IN (SELECT rowid FROM entry ORDER BY rowid LIMIT ?)",
                        (n - MAX_ENTRIES,))


@functools.cache
def _store(folder: Path) -> _Store | None:
    """The store in ``folder``/capacity, opened once per process; None (the cache off, said once) when it cannot be
    opened. A store that is not a readable database (a torn or foreign cache.db) is moved aside to
    ``capacity.unreadable`` and an empty one started."""
    path = folder / "capacity"
    try:
        return _Store(path)
    except (sqlite3.OperationalError, OSError) as exc:  # unwritable, locked, a file in the way, /proc: said once
        _LOG.warning("the capacity cache is off: cannot open %s (%s); set %s to a writable folder, or to nothing to "
                     "turn the cache off", path, exc, CACHE_DIR_ENV)
        return None
    except sqlite3.DatabaseError as exc:  # not a database, malformed (OperationalError is caught above)
        aside = folder / "capacity.unreadable"
        try:
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(path, aside)
            store = _Store(path)
        except Exception as again:
            _LOG.warning("the capacity cache is off: %s cannot be read (%s) nor moved aside (%s); delete that "
                         "folder, or set %s to another folder (or to nothing to turn the cache off)", path, exc,
                         again, CACHE_DIR_ENV)
            return None
        _LOG.warning("the capacity cache in %s could not be read (%s): moved to %s, an empty one started", path,
                     exc, aside)
        return store


def _misspelled_variable(environ: Mapping[str, str]) -> str | None:
    """A FLEETPLAN_* variable in ``environ`` one typo away from :data:`CACHE_DIR_ENV` (which is unset), or None."""
    if CACHE_DIR_ENV in environ:
        return None
    names = [n for n in environ if n.startswith("FLEETPLAN_")]
    close = difflib.get_close_matches(CACHE_DIR_ENV, names, n=1, cutoff=0.85)
    return close[0] if close else None


@functools.cache
def _warn_misspelled(name: str, folder: str) -> None:
    _LOG.warning("%s is not a fleetplan variable; did you mean %s? (the capacity cache stays in %s)", name,
                 CACHE_DIR_ENV, folder)


#: Why the cache went off in this process (empty while it is on): a lock wait, a folder that cannot be found, code
#: without sources. It stays off, so the reason is said once.
_disabled: list[str] = []


def _turn_off(why: str) -> None:
    if not _disabled:
        _disabled.append(why)
        _LOG.warning("the capacity cache is off for this process: %s", why)


def _active_store() -> _Store | None:
    """The store to use now, or None (cache off: set empty, or a reason given once by :func:`_turn_off` or
    :func:`_store`)."""
    if _disabled:
        return None
    try:
        folder = cache_dir()
    except RuntimeError as exc:  # no home folder: the default location (or a '~' path) cannot be found
        _turn_off(f"no cache folder ({exc}); set {CACHE_DIR_ENV} to a folder, or to nothing to turn the cache off")
        return None
    if folder is None:
        return None
    if typo := _misspelled_variable(os.environ):
        _warn_misspelled(typo, str(folder))
    try:
        code_version()
    except (_Off, OSError) as exc:
        _turn_off(str(exc))
        return None
    return _store(folder)


def kept(returns: type[T], fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, read from the disk cache when the same call was stored by the same code, else
    computed and stored (module docstring). ``fn`` must be a module-level function of this layer, deterministic in
    its arguments, returning a ``returns``. An entry that does not read back as a ``returns`` whose bytes match the
    SHA-256 stored beside them (a torn write, a changed byte, a foreign entry) is computed again and replaced. A
    store locked by another process for :data:`LOCK_TIMEOUT_S` turns the cache off for this process. Exceptions of
    ``fn`` propagate and are not stored."""
    store = _active_store()
    key = _digest(fn, args, kwargs) if store is not None else None
    if store is None or key is None:
        return fn(*args, **kwargs)
    try:
        blob = store.get(key)
        if isinstance(blob, bytes) and hashlib.sha256(blob[32:]).digest() == blob[:32]:
            value = _ValueUnpickler(io.BytesIO(blob[32:])).load()
            if isinstance(value, returns):
                return value
    except sqlite3.OperationalError as exc:  # a read that waited in vain (a lock in rollback mode)
        _turn_off(f"its store in {store.directory} could not be read ({exc})")
    except Exception:  # noqa: S110 -- an unreadable entry is computed again (below) and replaced
        pass
    value = fn(*args, **kwargs)
    if _disabled:
        return value
    buf = io.BytesIO()
    try:
        _KeyPickler(buf, protocol=5).dump(value)
        payload = buf.getvalue()
        store.set(key, hashlib.sha256(payload).digest() + payload)
    except _Locked:
        _turn_off(f"its store in {store.directory} stayed locked by another process for {LOCK_TIMEOUT_S:g} s")
    except Exception:  # noqa: S110 -- a value that cannot be kept, or a full disk: it is returned all the same
        pass
    return value
