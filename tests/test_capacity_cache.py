"""Sized replicas kept on disk (fleetplan.costmodels.capacity_cache): a hit is the value the code computes, to the
bit; a changed input or changed code misses; inputs the digest cannot see are never kept; a foreign or broken store
is never trusted."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import io
import logging
import os
import pickle
import py_compile
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fleetplan.costmodels.capacity as capacity
import fleetplan.costmodels.capacity_cache as cc
from fleetplan.costmodels.capacity import replica_capacity
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import load_calibration

H100 = GPU("H100-SXM-80GB", 80e9, 3350e9, 989.4e12, 1978.9e12, 900e9, 128e9, 700)
CAL = load_calibration(H100)
L8B = Model("Llama-3.1-8B", 32, 4096, 32, 8, 128, 8.03e9, 8.03e9)
MIX = TokenMix(input_tokens_mean=1000, input_tokens_p95=3000, output_tokens_mean=200, output_tokens_p95=600)
SLO_ = SLO(ttft_s=2.0, tpot_s=0.05)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh cache folder, and no capacity remembered in this process (so a second call must go to disk)."""
    monkeypatch.setenv(cc.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
    monkeypatch.setattr(cc, "_disabled", [])
    cc._store.cache_clear()
    yield tmp_path / "cache"
    cc._store.cache_clear()


def _no_sizing(*a, **k):
    raise AssertionError("sized again: the disk cache was not used")


def _size(**kw):
    return replica_capacity(L8B, H100, MIX, SLO_, calib=CAL, **kw)


def test_a_second_process_reads_the_value_the_first_computed(store, monkeypatch):
    # Another interpreter (its own hash seed) sizes the replica and stores it; this one must find it under the same
    # digest (a key that pickled differently per process would never hit) and get the same value to the bit.
    code = ("from fleetplan.costmodels.capacity import replica_capacity\n"
            "from test_capacity_cache import L8B, H100, MIX, SLO_, CAL\n"
            "print(repr(replica_capacity(L8B, H100, MIX, SLO_, calib=CAL)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent, env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout.strip()
    monkeypatch.setattr(capacity, "_replica_capacity", _no_sizing)
    hit = _size()
    assert repr(hit) == out
    monkeypatch.undo()  # the computation itself, for the independent check: what the code gives without a cache
    monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
    monkeypatch.setenv(cc.CACHE_DIR_ENV, "")
    assert _size() == hit
    assert hit.req_per_s > 0


def test_a_changed_input_or_changed_code_is_sized_again(store, monkeypatch):
    first = _size()
    monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
    monkeypatch.setattr(capacity, "_replica_capacity", _no_sizing)
    assert _size() == first  # from disk
    monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
    with pytest.raises(AssertionError, match="sized again"):
        _size(tp=2)  # another input: another digest
    with pytest.raises(AssertionError, match="sized again"):
        replica_capacity(L8B, dataclasses.replace(H100, hbm_bandwidth_bytes_per_s=3000e9), MIX, SLO_, calib=CAL)
    monkeypatch.setattr(cc, "code_version", lambda: "another version of the cost models")
    with pytest.raises(AssertionError, match="sized again"):
        _size()


def _version_of(root: Path) -> str:
    """code_version() of a copy of capacity_cache.py loaded from ``root``/costmodels (its digest reads the files
    beside it)."""
    spec = importlib.util.spec_from_file_location("copied_capacity_cache", root / "costmodels" / "capacity_cache.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.code_version()


def test_the_code_version_changes_with_any_cost_model_module_or_the_errors(tmp_path):
    # Everything this layer may import from fleetplan (the import-layer contract): a module left out could change a
    # capacity without changing the digest. A copy of the package's costmodels/ and errors.py, edited one file at a
    # time; a module of another layer does not count.
    src = Path(capacity.__file__).resolve().parent
    shutil.copytree(src, tmp_path / "costmodels", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(src.parent / "errors.py", tmp_path / "errors.py")
    (tmp_path / "scenario").mkdir()
    (tmp_path / "scenario" / "build.py").write_text("X = 1\n")
    seen = {_version_of(tmp_path)}
    for edited in ("costmodels/latency.py", "costmodels/queueing.py", "costmodels/capacity.py", "errors.py"):
        with open(tmp_path / edited, "a") as f:
            f.write("\n# edited\n")
        seen.add(_version_of(tmp_path))
    assert len(seen) == 5
    (tmp_path / "scenario" / "build.py").write_text("X = 2\n")
    assert _version_of(tmp_path) in seen


def _double(x):
    return 2 * x


def test_an_input_the_digest_cannot_see_is_never_kept(store):
    # A function of another module (here: this test's) behaves as its code says, which code_version does not cover:
    # no digest, so nothing is stored and nothing is read.
    assert cc._digest(cc.kept, (_double,), {}) is None
    assert cc._digest(cc.kept, (lambda: 1,), {}) is None
    assert cc._digest(cc.kept, (1.5, "x", (2, 3)), {"mix": MIX}) is not None
    calls = []

    def counted(f):
        calls.append(f)
        return f(3)

    assert cc.kept(int, counted, _double) == 6 and cc.kept(int, counted, _double) == 6
    assert len(calls) == 2


class _Exec:
    """Unpickles to exec(CODE): what a foreign entry would hide."""

    def __init__(self, code: str):
        self.code = code

    def __reduce__(self):
        return (exec, (self.code,))


class _System:
    def __reduce__(self):
        return (os.system, ("echo owned",))


def _stored_key():
    return cc._digest(capacity._best_capacity, (L8B, H100, MIX, SLO_), dict(
        tp=1, pp=1, weight_dtype="bf16", kv_dtype="bf16", kv_budget_bytes=None, memory_utilization=0.9, link=None,
        calib=CAL, residents=1, kv_block_tokens=16, engine=capacity.DEFAULT_ENGINE, host_tier=None))


def _sealed(obj) -> bytes:
    """An entry as kept() writes it (the payload's SHA-256, then the payload): only the checks after the checksum
    stand between it and the plan."""
    payload = pickle.dumps(obj, protocol=5)
    return hashlib.sha256(payload).digest() + payload


@pytest.mark.parametrize("foreign", ["exec", "system", "float", "torn"])
def test_a_foreign_or_broken_entry_is_neither_run_nor_served(store, monkeypatch, tmp_path, foreign):
    # An entry that would run code when loaded (exec, os.system: with a valid checksum), one of the wrong type (a
    # float where a capacity belongs) or a torn one (a changed byte) is sized again and replaced by the true value;
    # nothing runs. (The store holds bytes only: diskcache, used first, unpickled rows marked as pickles itself.)
    first = _size()
    key = _stored_key()
    s = cc._store(store)
    assert s is not None and key in s
    flag = tmp_path / "ran"
    bad = {"exec": lambda: _sealed(_Exec(f"open({str(flag)!r}, 'w').close()")),
           "system": lambda: _sealed(_System()),
           "float": lambda: _sealed(5.0),
           "torn": lambda: (lambda b: b[:-3] + bytes([b[-3] ^ 1]) + b[-2:])(s.get(key))}
    s.set(key, bad[foreign]())
    monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
    assert _size() == first
    assert not flag.exists()
    blob = s.get(key)
    assert isinstance(blob, bytes) and cc._ValueUnpickler(io.BytesIO(blob[32:])).load() == first


def test_the_value_unpickler_loads_the_cost_models_classes_only():
    ok = pickle.dumps(_size(), protocol=5)
    assert cc._ValueUnpickler(io.BytesIO(ok)).load() == _size()
    for foreign in (pickle.dumps(_Exec("1")), pickle.dumps(_System()), pickle.dumps(getattr),
                    pickle.dumps(Path("x")), pickle.dumps(np.load)):
        with pytest.raises(cc._Outside):
            cc._ValueUnpickler(io.BytesIO(foreign)).load()


def test_an_unreadable_store_is_moved_aside_and_started_again(store, monkeypatch, caplog):
    # A cache.db that is not a database (a torn copy, garbage) turned the cache off for good, with a warning on
    # every command naming the wrong fix: it is moved aside once and an empty store started.
    first = _size()
    cc._store.cache_clear()
    (store / "capacity" / "cache.db").write_bytes(b"not a database at all" * 2000)
    for extra in ("cache.db-wal", "cache.db-shm"):
        (store / "capacity" / extra).unlink(missing_ok=True)
    monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
    with caplog.at_level(logging.WARNING, logger="fleetplan"):
        assert _size() == first
    warned = [r.getMessage() for r in caplog.records if "could not be read" in r.getMessage()]
    assert len(warned) == 1 and "capacity.unreadable" in warned[0]
    assert (store / "capacity.unreadable" / "cache.db").exists()
    monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
    monkeypatch.setattr(capacity, "_replica_capacity", _no_sizing)
    assert _size() == first  # the new store holds it


def test_a_misspelled_cache_variable_is_named(store, monkeypatch, caplog):
    monkeypatch.delenv(cc.CACHE_DIR_ENV)
    monkeypatch.setenv("FLEETPLAN_CACHE_DIRR", str(store))
    monkeypatch.setenv("HOME", str(store.parent / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    cc._warn_misspelled.cache_clear()
    with caplog.at_level(logging.WARNING, logger="fleetplan"):
        _size()
    warned = [r.getMessage() for r in caplog.records if "did you mean" in r.getMessage()]
    assert len(warned) == 1 and "FLEETPLAN_CACHE_DIRR" in warned[0] and "FLEETPLAN_CACHE_DIR?" in warned[0]
    cc._warn_misspelled.cache_clear()


def test_an_empty_folder_name_turns_the_cache_off_and_an_unusable_folder_says_so(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
    monkeypatch.setenv(cc.CACHE_DIR_ENV, "")
    assert cc.cache_dir() is None
    first = _size()
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(cc.CACHE_DIR_ENV, str(blocker))
    cc._store.cache_clear()
    monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
    with caplog.at_level(logging.WARNING, logger="fleetplan"):
        assert _size() == first  # computed all the same
        monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
        _size()
    cc._store.cache_clear()
    warned = [r.getMessage() for r in caplog.records if "capacity cache is off" in r.getMessage()]
    assert len(warned) == 1 and str(blocker) in warned[0] and cc.CACHE_DIR_ENV in warned[0]


def test_no_home_folder_turns_the_cache_off_not_the_plan(store, monkeypatch, caplog):
    # A process with no home folder (an arbitrary uid without a passwd entry, `env -i`) died with a traceback from
    # the cache's folder lookup, though the plan does not need the cache: '~nosuchuser/...' fails the same way.
    monkeypatch.setenv(cc.CACHE_DIR_ENV, "~nosuchuser_of_this_machine/c")
    with caplog.at_level(logging.WARNING, logger="fleetplan"):
        first = _size()
        monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
        assert _size() == first
    warned = [r.getMessage() for r in caplog.records if "capacity cache is off" in r.getMessage()]
    assert len(warned) == 1 and "no cache folder" in warned[0] and cc.CACHE_DIR_ENV in warned[0]


def test_a_store_locked_by_another_process_turns_the_cache_off_after_one_short_wait(store, monkeypatch, caplog):
    # A process holding the store's write lock (a sqlite3 shell in a transaction) made every miss wait diskcache's
    # 60 s: a 1.5-s plan took 182 s. Now one wait of LOCK_TIMEOUT_S (shortened here), then the cache is off
    # for the process with one warning, and the capacity is computed as without a cache.
    monkeypatch.setattr(cc, "LOCK_TIMEOUT_S", 0.05)
    first = _size()
    locker = sqlite3.connect(store / "capacity" / "cache.db", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
        with caplog.at_level(logging.WARNING, logger="fleetplan"):
            other = _size(tp=2)
            third = _size(tp=4)
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    warned = [r.getMessage() for r in caplog.records if "capacity cache is off" in r.getMessage()]
    assert len(warned) == 1 and "locked by another process" in warned[0]
    monkeypatch.setenv(cc.CACHE_DIR_ENV, "")
    monkeypatch.setattr(capacity, "_CAPACITY_CACHE", {})
    assert (other, third) == (_size(tp=2), _size(tp=4)) and first == _size()


def test_an_install_without_the_cost_models_sources_keeps_no_cache(tmp_path):
    # Bytecode alone (a frozen or slimmed install): the digest cannot cover a module whose source is absent, so the
    # cache is off (it crashed every plan when errors.py was missing, and would have covered no code had the
    # costmodels/*.py alone been missing).
    src = Path(capacity.__file__).resolve().parent
    shutil.copytree(src, tmp_path / "costmodels", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(src.parent / "errors.py", tmp_path / "errors.py")
    assert _version_of(tmp_path)
    py_compile.compile(str(tmp_path / "costmodels" / "latency.py"), cfile=str(tmp_path / "costmodels" / "latency.pyc"))
    (tmp_path / "costmodels" / "latency.py").unlink()
    with pytest.raises(Exception, match="sources are not installed beside their bytecode .latency."):
        _version_of(tmp_path)


def test_the_store_keeps_at_most_max_entries_dropping_the_oldest(tmp_path, monkeypatch):
    monkeypatch.setattr(cc, "MAX_ENTRIES", 3)
    s = cc._Store(tmp_path / "capacity")
    for k in "abcde":
        s.set(k, k.encode())
    s.set("b", b"b again")  # replaced: now the newest
    s._bound()
    assert [k for k in "abcde" if k in s] == ["b", "d", "e"] and s.get("b") == b"b again"
