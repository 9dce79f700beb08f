"""File input and output shared by every layer: atomic writes, YAML input, and checked input models.

Output, never a half-written file: :func:`atomic_path` yields a temporary path beside the target; on success it
replaces the target in one step (with the permissions of the file it replaces, else those an ordinary new file
gets, i.e. 0666 less the umask), on any error it removes the temporary file and leaves an existing target untouched.

Input: :func:`read_yaml` / :func:`parse_yaml` read YAML with :class:`UniqueKeyLoader` (a repeated key is an error,
naming the key, the line and the file; a binary or non-UTF-8 file is a one-line error). :class:`InputModel` is the
base of every pydantic model of an input file (unknown keys refused, no silent type coercion) and
:func:`validate_input` checks a mapping against one, turning pydantic's ValidationError into one
:class:`~fleetplan.errors.InputError` that names the file, the field path as written (``models[2].slo.ttft_p95_s``),
the value and the fix, with "did you mean" for an unknown key.
"""

from __future__ import annotations

import contextlib
import datetime
import difflib
import fcntl
import functools
import hashlib
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails, PydanticUndefined

from fleetplan.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_destination(path: str | Path, *, field: str | None = None) -> Path:
    """``path`` as a Path, after checking that a new regular file may take its place.

    Raises InputError (naming ``field`` when given) when ``path`` is a folder, a symbolic link (written through only
    when asked: give the link's target instead), a device, pipe or other non-regular file (never replaced), or when
    its folder does not exist or cannot be written (tried with a temporary file, removed at once).
    """
    target = Path(path)
    if target.is_symlink():
        raise InputError(f"{target} is a symbolic link (to {os.readlink(target)}); it is not replaced: give the "
                         "file it points to, or another path", source=str(target), field=field)
    if target.is_dir():
        raise InputError(f"{target} is a folder; give a file name", source=str(target), field=field)
    if target.exists() and not target.is_file():
        raise InputError(f"{target} is not a regular file (a device, pipe or socket); it is never replaced: give "
                         "a file path", source=str(target), field=field)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"folder {parent} does not exist; create it or choose another path", source=str(target),
                         field=field)
    os.unlink(_temporary_beside(target, field))  # a real probe: permissions, read-only or pseudo file systems
    return target


#: The file type each output option writes, by option name: its path must end so (an xlsx under a .csv name
#: would open as garbage).
OUTPUT_SUFFIXES: dict[str, tuple[str, ...]] = {"--xlsx": (".xlsx",), "--plot": (".png",), "--csv-out": (".csv",)}


def check_destinations(paths: Mapping[str, str | Path | None], *, inputs: Sequence[str | Path | None] = (),
                       suffixes: Mapping[str, tuple[str, ...]] | None = None) -> None:
    """:func:`check_destination` for every given path of ``paths`` ({option name: path or None}), before any work
    starts, so a long run never ends in an unwritable output. Two options naming the same file are an error too, and
    so is an output that names one of the command's ``inputs`` (it would replace the file being read), and an
    option of :data:`OUTPUT_SUFFIXES`, or of ``suffixes`` ({option name: allowed suffixes}, for an option whose
    file type depends on the command, e.g. an ``--out`` that writes CSV), whose path has another suffix."""
    seen: dict[Path, str] = {}
    read = {Path(p).resolve() for p in inputs if p is not None and Path(p).exists()}
    for name, p in paths.items():
        if p is None:
            continue
        target = check_destination(p, field=name)
        key = target.resolve()
        if key in read:
            raise InputError(f"{name} {target} is the file this command reads; give the output another path",
                             source=str(target), field=name)
        if key in seen:
            raise InputError(f"{seen[key]} and {name} name the same file {target}; give each output its own path",
                             source=str(target), field=name)
        seen[key] = name
    for name, p in paths.items():  # after the checks above, which say more (a folder, a device, one file twice)
        want = {**OUTPUT_SUFFIXES, **(suffixes or {})}.get(name)
        if p is not None and want and Path(p).suffix.lower() not in want:
            raise InputError(f"{name} writes a {want[0]} file but {p} ends in {Path(p).suffix or 'no suffix'!r}; "
                             f"name it {Path(p).with_suffix(want[0]).name}", source=str(p), field=name, value=str(p))


def _temporary_beside(target: Path, field: str | None) -> Path:
    parent = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix or ".tmp", dir=parent)
    except OSError as exc:
        raise InputError(f"cannot write in {parent}: {exc.strerror or exc}", source=str(target), field=field) \
            from None
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())
    return Path(tmp)


@contextlib.contextmanager
def atomic_path(path: str | Path, *, field: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` that replaces ``path`` when the block ends without error.

    Raises InputError (naming ``field`` when given) for a destination :func:`check_destination` refuses, or when
    the file cannot be written.
    """
    with output_files({field or "path": path}) as tmp:
        yield tmp[field or "path"]


@contextlib.contextmanager
def output_files(paths: Mapping[str, str | Path | None], *,
                 suffixes: Mapping[str, tuple[str, ...]] | None = None) -> Iterator[dict[str, Path]]:
    """Write several output files all or none.

    Checks every given destination first (:func:`check_destinations`, with its ``suffixes``), yields {option name:
    temporary path beside its destination} for the paths that are not None; when the block ends without error every
    temporary file replaces its destination, keeping an existing destination's permissions (if one move fails, the
    destinations already replaced get their old content back); on any error every temporary file is removed and no
    destination changes. Raises InputError naming the option.
    """
    check_destinations(paths, suffixes=suffixes)
    targets = {name: Path(p) for name, p in paths.items() if p is not None}
    tmps: dict[str, Path] = {}
    backups: list[tuple[Path, Path | None]] = []  # (target, backup of its old content or None if it was new)
    made: list[Path] = []  # backup files, removed at the end (those put back are gone already)
    try:
        for name, target in targets.items():
            tmps[name] = _temporary_beside(target, name)
        try:
            yield dict(tmps)
        except OSError as exc:  # the writer failed (a full disk, a vanished folder): nothing is replaced
            where = ", ".join(str(t) for t in targets.values())
            raise InputError(f"cannot write {where}: {exc.strerror or exc}", source=where,
                             field=", ".join(targets)) from None
        for name, target in targets.items():
            try:
                backup = None
                if target.exists():
                    # the replacement keeps the replaced file's permissions (a 0600 file stays 0600)
                    os.chmod(tmps[name], stat.S_IMODE(target.stat().st_mode))
                    backup = _temporary_beside(target, name)
                    made.append(backup)
                    os.replace(target, backup)
                backups.append((target, backup))
                os.replace(tmps[name], target)
            except OSError as exc:
                raise InputError(f"cannot write {target}: {exc.strerror or exc}", source=str(target),
                                 field=name) from None
    except BaseException:
        for target, backup in reversed(backups):  # put the old files back
            with contextlib.suppress(OSError):
                if backup is not None:
                    os.replace(backup, target)
                else:
                    os.unlink(target)
        raise
    finally:
        for p in [*tmps.values(), *made]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)


@contextlib.contextmanager
def claimed_outputs(paths: Mapping[str, str | Path | None], *,
                    suffixes: Mapping[str, tuple[str, ...]] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on every given destination of ``paths`` ({option name: path or None}) for the block,
    so two runs writing the same file cannot both succeed (the second is refused at once, not after its work).

    The lock is an advisory ``flock`` on a hidden file ``.<name>.lock`` beside the destination, removed at the end.
    Raises InputError naming the option when another run holds the lock, or when :func:`check_destinations` (with
    its ``suffixes``) refuses the destinations.
    """
    check_destinations(paths, suffixes=suffixes)  # all of them, suffixes included, before any lock or any work
    held: list[tuple[int, Path]] = []
    try:
        for name, p in paths.items():
            if p is None:
                continue
            target = Path(p)
            lock = target.parent / f".{target.name}.lock"
            while True:
                fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o666 & ~_umask())
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise InputError(f"{name} {target} is being written by another run right now (lock {lock.name} "
                                     "is held); wait for it to finish or give another path", source=str(target),
                                     field=name, value=str(p)) from None
                # The holder before us removes the lock file when done: a lock taken on the removed file locks
                # nothing a later run can see, so take it again on the file now at that path.
                try:
                    same = os.stat(lock).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    break
                os.close(fd)
            held.append((fd, lock))
        yield
    finally:
        for fd, lock in reversed(held):
            with contextlib.suppress(OSError):
                os.unlink(lock)
            os.close(fd)


def check_output_folder(path: str | Path, *, field: str | None = None) -> Path:
    """``path`` as a Path, after checking that it may hold a command's output files.

    One rule for every output: fleetplan creates a file, or a folder it fills itself (``export k8s --out``,
    ``simulate --plots``) with its sub-folders, but never a missing parent folder: a misspelt parent is an error
    (naming ``field``) rather than a new tree somewhere unexpected. Raises InputError when ``path`` is a file, or
    its parent folder does not exist.
    """
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise InputError(f"{root} is a file; give a folder", source=str(root), field=field)
    parent = root.parent if str(root.parent) else Path(".")
    if not root.exists() and not parent.is_dir():
        raise InputError(f"folder {parent} does not exist; create it or choose another path (fleetplan creates "
                         f"only the output folder itself, {root.name})", source=str(root), field=field)
    return root


#: Name of the index a file-set output (:func:`write_file_set`) writes into its folder.
FILE_SET_INDEX = "fleetplan-files.json"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_file_set_index(root: Path, field: str | None) -> dict[str, str]:
    """{relative path: sha256} of the files an earlier :func:`write_file_set` wrote into ``root`` ({} if none)."""
    index = root / FILE_SET_INDEX
    if not index.exists():
        return {}
    fix = f"it is not an index fleetplan wrote; move {index} away and export again"
    try:
        data = loads_unique(index.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        raise InputError(f"cannot read {FILE_SET_INDEX}: {fix}", source=str(index), field=field) from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise InputError(f"{FILE_SET_INDEX} has no 'files' mapping: {fix}", source=str(index), field=field)
    base = root.resolve()
    for rel in files:
        if Path(rel).is_absolute() or not (root / rel).resolve().is_relative_to(base) or rel == FILE_SET_INDEX:
            raise InputError(f"{FILE_SET_INDEX} lists {rel!r}, outside the folder: {fix}", source=str(index),
                             field=field)
    return files


def write_file_set(root: str | Path, files: Mapping[str, str], *, field: str | None = None,
                   written_by: str = "fleetplan", prune: bool = False, prune_flag: str = "--prune") -> list[str]:
    """Write ``files`` ({path relative to ``root``: text}) into the folder ``root`` as one set, all or none, and
    return the files of an earlier set that the new one removed (relative paths).

    Beside the files it writes an index, :data:`FILE_SET_INDEX` ({"written_by", "files": {path: sha256}}), by which
    a later call recognises its own files. The files of the earlier set that the new set does not produce (a plan
    with fewer windows or models, one window into a whole day's folder) are removed only when ``prune`` is True
    (the user asked with ``prune_flag``), once the new set is in place, so the folder never mixes two exports;
    without it the call is refused before anything is written. Only files the index lists are ever replaced or
    removed; the user's other files are left alone. Refused (InputError naming ``field``, nothing written):
    ``root`` fails :func:`check_output_folder`; a file the new set would replace exists but no index lists it (the
    user's file); a file of the earlier set was edited since (its checksum differs from the index's) and the new set
    would overwrite it with other text or drop it (move it away first); the earlier set has files the new one does
    not produce and ``prune`` is False; an unreadable index.
    """
    folder = check_output_folder(root, field=field)
    old = _read_file_set_index(folder, field) if folder.exists() else {}
    for rel in files:
        p = folder / rel
        if p.exists() and rel not in old:
            raise InputError(f"{p} exists and was not written by an earlier export into {folder} (no "
                             f"{FILE_SET_INDEX} lists it); it is not replaced: move it away or export into an empty "
                             "folder", source=str(p), field=field)
    for rel, text in files.items():  # replacing an edited file would lose the edit as removing it would
        p = folder / rel
        if rel in old and p.is_file() and _sha256(p) not in (old[rel], text_sha256(text)):
            raise InputError(f"{p} is from an earlier export and was edited since; the new export would overwrite "
                             "it: move it out of the folder (or delete it) and export again", source=str(p),
                             field=field)
    stale = [rel for rel in old if rel not in files and (folder / rel).exists()]
    if stale and not prune:
        shown = ", ".join(stale[:5]) + (f" and {len(stale) - 5} more" if len(stale) > 5 else "")
        raise InputError(f"the folder holds {len(stale)} file{'s' if len(stale) != 1 else ''} of an earlier export "
                         f"that this export does not produce ({shown}); nothing was written or removed: export "
                         f"into another folder, or add {prune_flag} to remove them (the folder then holds this "
                         "export only)", source=str(folder), field=field, value=len(stale))
    for rel in stale:
        if (folder / rel).is_file() and _sha256(folder / rel) != old[rel]:
            raise InputError(f"{folder / rel} is from an earlier export, was edited since, and the new export does "
                             "not produce it: move it out of the folder (or delete it) and export again",
                             source=str(folder / rel), field=field)
    made: list[Path] = []
    inner = {p for rel in files for p in (folder / rel).parents if p != folder and p.is_relative_to(folder)}
    index = {"written_by": written_by, "files": {rel: text_sha256(text) for rel, text in files.items()}}
    try:
        for d in [folder, *sorted(inner, key=lambda p: len(p.parts))]:  # parents first
            if not d.exists():
                d.mkdir()
                made.append(d)
        with output_files({**{rel: folder / rel for rel in files},
                           FILE_SET_INDEX: folder / FILE_SET_INDEX}) as tmps:
            for rel, text in files.items():
                tmps[rel].write_text(text, newline="")
            tmps[FILE_SET_INDEX].write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    except BaseException as exc:
        for d in reversed(made):
            with contextlib.suppress(OSError):
                d.rmdir()
        if isinstance(exc, OSError) and not isinstance(exc, InputError):
            # a folder the user may not write (/sys, a read-only mount): the option's error, nothing left behind
            raise InputError(f"cannot write in {folder}: {exc.strerror or exc}; choose another folder",
                             source=str(folder), field=field) from None
        raise
    for rel in stale:
        p = folder / rel
        p.unlink()
        for parent in p.parents:  # folders the earlier set made, now empty
            if parent == folder or not parent.is_relative_to(folder):
                break
            with contextlib.suppress(OSError):
                parent.rmdir()
    return stale


def text_sha256(text: str) -> str:
    """sha256 hex digest of ``text`` as UTF-8 (what :func:`write_file_set` records per file)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_text_atomic(path: str | Path, text: str, *, field: str | None = None) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path, field=field) as tmp:
        tmp.write_text(text, newline="")


# ------------------------------------------------------------------------------------------------- YAML input


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping of a YAML file gives the same key twice (PyYAML would silently keep the last one)."""

    def __init__(self, key: object, line: int, first_line: int) -> None:
        self.key, self.line, self.first_line = key, line, first_line
        super().__init__(problem=f"duplicate key {key!r}")


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a repeated key in one mapping and reads YAML 1.2 floats.

    A repeated key raises :class:`DuplicateKeyError` naming the key and both lines (with the plain loader the last
    one wins silently: ``min_replicas: 1`` then ``min_replicas: 4`` quadruples a cost). Merge keys (``<<: *anchor``)
    may still be overridden by the mapping's own keys, as YAML intends. Numbers such as ``1e9`` and ``1.0e9``, which
    YAML 1.1 reads as strings (its floats need a dot and a signed exponent), are read as floats.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:  # noqa: D102
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base constructor reports it
                continue
            if first is not None:
                raise DuplicateKeyError(key, line, first)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_YAML12_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                              |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                              |\.[0-9_]+(?:[eE][-+]?[0-9]+)?)$""", re.X)
UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789."))


# What a YAML 1.1 loader (PyYAML's SafeLoader) reads as a float unquoted: a dot, and a sign in any exponent. Text of
# that shape in a mapping it produced was quoted on purpose ("0.11", a version) and stays text.
_YAML11_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
                              |\.[0-9_]+(?:[eE][-+][0-9]+)?)$""", re.X)


def yaml12_numbers(data: Any) -> Any:
    """``data`` (nested dicts and lists) with the strings a YAML 1.1 loader left unread but YAML 1.2 reads as floats
    (an exponent without a dot or a sign: ``"1.0e9"``, ``"1e9"``) turned into floats.

    For mappings read earlier by a YAML 1.1 loader and kept, e.g. the scenario embedded in an older plan file. Text
    that YAML 1.1 would have read as a float unquoted (``"0.11"``, ``"2025.12"``, ``"1.0e+9"``) was quoted on
    purpose and stays text.
    """
    if isinstance(data, dict):
        return {k: yaml12_numbers(v) for k, v in data.items()}
    if isinstance(data, list):
        return [yaml12_numbers(v) for v in data]
    if isinstance(data, str) and _YAML12_FLOAT.match(data) and not _YAML11_FLOAT.match(data):
        return float(data.replace("_", ""))
    return data


def parse_yaml(text: str, *, source: str) -> Any:
    """The document in ``text`` read with :class:`UniqueKeyLoader` (safe: plain data only).

    Raises InputError naming ``source`` and the line for a repeated key or for text that is not valid YAML.
    """
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except DuplicateKeyError as exc:
        raise InputError(f"line {exc.line}: key {exc.key!r} is given twice in one mapping (first on line "
                         f"{exc.first_line}); YAML would silently keep the last value: keep one of them",
                         source=source, field=str(exc.key), value=exc.key) from None
    except InputError:
        raise
    except ValueError as exc:
        # YAML's own readers of typed scalars: an unquoted date-shaped value that is no date (2025-13-45,
        # 2025-02-30) raises ValueError, not a YAMLError
        raise InputError(f"a value YAML could not read ({exc}): write a date as YYYY-MM-DD (e.g. 2025-05-31), or "
                         "quote the value if it is not meant as a date", source=source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"not valid YAML{at}: {problem}", source=source) from None


def read_text_file(path: str | Path, *, what: str = "file") -> str:
    """The text of the UTF-8 file at ``path``.

    Raises InputError (one line, naming the file) when it is missing, a folder, unreadable, or not UTF-8 text
    (e.g. a binary file).
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p} is a folder; give a {what}", source=str(p))
    if not p.is_file():
        raise InputError(f"no such {what} {p}", source=str(p))
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}", source=str(p)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not a UTF-8 text file (byte {exc.start} is 0x{data[exc.start]:02x}; is it binary?); "
                         f"give a {what} saved as UTF-8 text", source=str(p)) from None


def read_yaml(path: str | Path, *, what: str = "YAML file") -> Any:
    """The YAML document in the file at ``path`` (see :func:`read_text_file` and :func:`parse_yaml`)."""
    return parse_yaml(read_text_file(path, what=what), source=str(path))


# ------------------------------------------------------------------------------------------------- JSON input


class DuplicateJsonKey(ValueError):
    """A JSON object gives the same key twice (Python's reader would silently keep the last value).

    Attributes:
        path: where: the keys and list indices from the document's root to the repeated key, the key last.
    """

    def __init__(self, path: list[str | int]) -> None:
        self.path = path
        super().__init__(f"key {path[-1]!r} is given twice in one JSON object")


class _Pairs(list):
    """A JSON object as the list of its (key, value) pairs, in order (json's ``object_pairs_hook``)."""


def json_path(path: Sequence[str | int]) -> str:
    """A location in a JSON document as a field path: ['steps', 0, 'replicas'] -> 'steps[0].replicas'."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def loads_unique(text: str | bytes) -> Any:
    """``json.loads(text)`` that refuses a key given twice in one object (:class:`DuplicateJsonKey` naming where);
    other errors are json's (``ValueError``, ``RecursionError``)."""
    doc = json.loads(text, object_pairs_hook=_Pairs)
    root: list[Any] = [doc]
    stack: list[tuple[Any, Any, Any, list[str | int]]] = [(doc, root, 0, [])]
    while stack:  # iterative, so a deep document does not exhaust the recursion json itself allowed
        node, parent, slot, path = stack.pop()
        if isinstance(node, _Pairs):
            out: dict[str, Any] = {}
            for k, v in node:
                if k in out:
                    raise DuplicateJsonKey([*path, k])
                out[k] = v
            parent[slot] = out
            stack.extend((v, out, k, [*path, k]) for k, v in out.items())
        elif isinstance(node, list):
            stack.extend((v, node, i, [*path, i]) for i, v in enumerate(node))
    return root[0]


def parse_json(text: str | bytes, *, source: str, what: str = "JSON file", row: int | None = None) -> Any:
    """The JSON document in ``text`` (a whole file, or line ``row`` of a JSON-lines file). Raises InputError naming
    ``source`` (and the line) for text that is not JSON or a key given twice in one object (naming the key and its
    field path: JSON readers disagree on which value wins, Python's keeps the last one silently)."""
    try:
        return loads_unique(text)
    except DuplicateJsonKey as exc:
        raise InputError(f"key {exc.path[-1]!r} is given twice in one JSON object; a JSON reader would silently "
                         "keep the last value: keep one of them", source=source, row=row,
                         field=json_path(exc.path), value=exc.path[-1]) from None
    except json.JSONDecodeError as exc:
        at = f"column {exc.colno}" if row is not None else f"line {exc.lineno}, column {exc.colno}"
        raise InputError(f"not JSON: {exc.msg} ({at}); give a {what}", source=source,
                         row=row if row is not None else exc.lineno) from None
    except RecursionError:
        raise InputError(f"JSON nested too deeply to read; give a {what}", source=source, row=row) from None
    except ValueError:  # a whole number past Python's 4300-digit limit (not a JSONDecodeError)
        raise InputError(f"a number has more than 4300 digits; give a {what}", source=source, row=row) from None


def read_json(path: str | Path, *, what: str = "JSON file") -> Any:
    """The JSON document in the file at ``path`` (see :func:`read_text_file` and :func:`parse_json`)."""
    return parse_json(read_text_file(path, what=what), source=str(path), what=what)


# --------------------------------------------------------------------------------------------- checked input


class InputModel(BaseModel):
    """Base of every pydantic model of an input file.

    Unknown keys are errors (``extra="forbid"``), values are not coerced across types (strict: no ``"4"`` or
    ``true`` for 4, no 4.5 for a whole number; an int is accepted for a float), NaN and infinity are refused.
    Field descriptions become the JSON Schema's descriptions; a field's ``x-fix`` (see :func:`input_field`) is the
    fix an error message gives.
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def input_field(default: Any = PydanticUndefined, *, description: str, fix: str | None = None, **kw: Any) -> Any:
    """``pydantic.Field`` with a description (required) and an optional ``fix``: the advice an error about this
    field ends with (e.g. "give seconds, e.g. 0.5 for 500 ms"); it is kept in the JSON Schema as ``x-fix``."""
    if fix is not None:
        kw["json_schema_extra"] = {"x-fix": fix}
    return Field(default, description=description, **kw)


_TYPE_WORDS = {
    "int_type": "must be a whole number", "float_type": "must be a number", "string_type": "must be text",
    "list_type": "must be a list", "dict_type": "must be a mapping (key: value)",
    "model_type": "must be a mapping (key: value)", "model_attributes_type": "must be a mapping (key: value)",
    "bool_type": "must be true or false", "finite_number": "must be a finite number",
    "string_too_short": "must not be empty",
}


@functools.lru_cache(maxsize=64)
def _adapter(kind: Any) -> tuple[TypeAdapter, dict]:
    adapter = TypeAdapter(kind)
    return adapter, adapter.json_schema()


def _branches(schema: dict, root: dict) -> list[dict]:
    """The alternatives of ``schema`` with references resolved; keys of the referring schema (a field's
    description, its x-fix) are kept on every alternative."""
    outer = {k: v for k, v in schema.items() if k not in ("$ref", "anyOf", "oneOf", "allOf")}
    if "$ref" in schema:
        inner = root.get("$defs", {}).get(schema["$ref"].rsplit("/", 1)[-1], {})
        return [{**b, **outer} for b in _branches(inner, root)]
    alts = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
    if alts:
        return [{**b, **outer} for a in alts for b in _branches(a, root)]
    return [schema]


def _schema_at(root: dict, parts: list) -> list[dict]:
    """The (alternative) sub-schemas of ``root`` at data path ``parts``."""
    cur = _branches(root, root)
    for part in parts:
        nxt: list[dict] = []
        for s in cur:
            if isinstance(part, int) and isinstance(s.get("items"), dict):
                nxt += _branches(s["items"], root)
            elif isinstance(part, str) and part in s.get("properties", {}):
                nxt += _branches(s["properties"][part], root)
            elif isinstance(part, str) and isinstance(s.get("additionalProperties"), dict):
                nxt += _branches(s["additionalProperties"], root)
        cur = nxt
    return cur


def _path_text(parts: list) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _show(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        # a huge whole number by its size, not its digits (repr of one past 4300 digits even raises)
        return f"{'-' if value < 0 else ''}about 10^{int(abs(value).bit_length() * math.log10(2))}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _num(x: Any) -> str:
    return f"{x:g}" if isinstance(x, int | float) and not isinstance(x, bool) else str(x)


def _walk(loc: tuple, data: Any, labels: Mapping[str, str]) -> tuple[list, list[str], int | None]:
    """(data path of ``loc`` as the user wrote it, context labels such as 'tenant chat', index in ``loc`` of the
    first step that is not in the data (a union member's tag), or None)."""
    parts: list = []
    context: list[str] = []
    tag_at = None
    cur = data
    for i, p in enumerate(loc):
        if isinstance(p, int) and isinstance(cur, list) and 0 <= p < len(cur):
            item = cur[p]
            key = parts[-1] if parts and isinstance(parts[-1], str) else None
            if key is not None and key in labels and isinstance(item, dict) and "name" in item:
                context.append(f"{labels[key]} {item['name']}")
            parts.append(p)
            cur = item
        elif isinstance(p, str) and isinstance(cur, dict) and p in cur:
            parts.append(p)
            cur = cur[p]
        elif isinstance(p, str) and isinstance(cur, dict) and i == len(loc) - 1:
            parts.append(p)  # a missing key
        elif tag_at is None:
            tag_at = i
    return parts, context, tag_at


def _unknown_key_message(parts: list, root: dict) -> str:
    """An unknown key at data path ``parts``: a '_ms' key whose '_s' twin exists says to give seconds there, else
    the closest known key (or the known keys)."""
    key = str(parts[-1]) if parts else "?"
    known = sorted({k for s in _schema_at(root, parts[:-1]) for k in s.get("properties", {})})
    if key.endswith("_ms") and key[:-3] + "_s" in known:
        base = key[:-3] + "_s"
        return (f"key '{key}' is in milliseconds; give seconds under '{base}' (e.g. {base}: 0.5 for 500 ms)")
    where = f"'{_path_text(parts[:-1])}'" if len(parts) > 1 else "the top level"
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
    return f"unknown key '{key}' in {where}; {hint}"


#: pydantic's bound error types -> (its ctx key, words for the side of the bound the value is on).
_BOUNDS = {"greater_than_equal": ("ge", "below the minimum"), "greater_than": ("gt", "not above"),
           "less_than_equal": ("le", "above the maximum"), "less_than": ("lt", "not below")}


def _bound_message(kind: str, ctx: Mapping, value: Any, here: list[dict], tail: str) -> str:
    """A value outside a bound (``kind`` one of :data:`_BOUNDS`): an exclusive bound as 'must be below/above', an
    inclusive one with the field's range when the schema ``here`` gives both ends."""
    key, words = _BOUNDS[kind]
    side = f"{words} {_num(ctx.get(key))}"
    s = next((s for s in here if "minimum" in s or "maximum" in s or "exclusiveMinimum" in s
              or "exclusiveMaximum" in s), {})
    lo = s.get("minimum", s.get("exclusiveMinimum"))
    hi = s.get("maximum", s.get("exclusiveMaximum"))
    if kind in ("less_than", "greater_than"):  # an exclusive bound: "outside 0..1, not below 1" read oddly
        word = "below" if kind == "less_than" else "above"
        return f"must be {word} {_num(ctx.get(key))}; got {_show(value)}{tail}"
    if lo is not None and hi is not None:
        return f"{_show(value)} is outside {_num(lo)}..{_num(hi)}, {side}{tail}"
    return f"{_show(value)} is {side}{tail}"


def _field_words(root: dict, parts: list, here: list[dict]) -> tuple[str, str]:
    """(the field's fix, its description) from the schema ``here`` at ``parts``; an item of a list without words
    of its own takes the list's (e.g. rates[1] -> rates)."""
    near = here if any(s.get("x-fix") or s.get("description") for s in here) or not parts or not isinstance(
        parts[-1], int) else _schema_at(root, parts[:-1])
    fix = next((s["x-fix"] for s in near if s.get("x-fix")), "")
    # a model's own schema carries its class docstring (reStructuredText for the API docs), no words for a user
    what = next((s["description"] for s in near if s.get("description") and "properties" not in s), "")
    return fix, what


def _message(err: Mapping, parts: list, root: dict, *, whole: bool = True) -> str:
    """What is wrong with the value of one pydantic error ``err`` at data path ``parts`` of the schema ``root``,
    ending with the field's fix (or its description); ``whole``: the data validated is a whole file (not the value
    of one key of it)."""
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    here = _schema_at(root, parts)
    fix, what = _field_words(root, parts, here)
    tail = f"; {fix}" if fix else (f" ({what})" if what else "")
    if kind == "extra_forbidden":
        return _unknown_key_message(parts, root)
    if kind == "missing":
        key = parts[-1] if parts else "?"
        return f"'{key}' is missing{f' ({what})' if what else ''}"
    if kind in _BOUNDS:
        return _bound_message(kind, ctx, value, here, tail)
    if kind == "too_short":
        n = ctx.get("min_length", 1)
        return f"must hold at least {n} item{'s' if n != 1 else ''}{tail}"
    if kind == "too_long":
        n = ctx.get("max_length")
        return f"must hold at most {n} item{'s' if n != 1 else ''}{tail}"
    if kind == "literal_error":
        return f"{_show(value)} is not one of {ctx.get('expected')}{tail}"
    if kind in ("value_error", "assertion_error"):
        msg = str(err.get("msg", ""))
        for lead in ("Value error, ", "Assertion failed, "):
            msg = msg.removeprefix(lead)
        return msg
    if kind == "string_type" and isinstance(value, (datetime.date, datetime.time)):
        return (f"YAML read {value.isoformat()} as a date, not text: quote it ('{value.isoformat()}')"
                + (f" ({what})" if what else ""))
    type_words = _TYPE_WORDS.get(kind)
    if whole and not parts and kind in ("dict_type", "model_type", "model_attributes_type"):
        shown = "a list" if isinstance(value, list) else "empty" if value is None else f"the value {_show(value)}"
        return (f"the file's top level is {shown}, not a mapping: write its keys as 'key: value' lines at the top "
                "level")
    if type_words:
        return f"{_show(value)} {type_words}{tail}"
    msg = str(err.get("msg", kind))
    return f"{_show(value)}: {msg[:1].lower() + msg[1:]}{tail}"


def input_error(exc: ValidationError, kind: Any, data: Any, *, source: str, labels: Mapping[str, str] | None = None,
                prefix: str = "", context: str = "") -> InputError:
    """One :class:`InputError` for pydantic's ``exc`` (raised validating ``data`` against ``kind``).

    The message names ``source``, the field path as the user wrote it (``prefix`` + e.g. ``models[2].slo.ttft_p95_s``),
    the entries on the way by name (``labels`` maps a list key to a word: {"tenants": "tenant"} gives 'tenant
    chat'; ``context`` is put first), the value, what is wrong (the allowed range, "did you mean" the closest known
    key for an unknown key) and the field's fix. Only the first problem is described; the count of the others is
    given.
    """
    _, root = _adapter(kind)
    labels = labels or {}
    seen: set = set()
    described: list[tuple[ErrorDetails, list, list[str]]] = []
    # An unknown key first: it is often the misspelling of a key reported missing.
    errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
    for err in errors:
        parts, ctx, tag_at = _walk(tuple(err["loc"]), data, labels)
        # A value that fails every member of a union yields one error per member: they are one problem.
        key = (tuple(_walk(tuple(err["loc"][:tag_at]), data, labels)[0]), "union") if tag_at is not None else (
            tuple(parts), err["type"])
        if key in seen:
            continue
        seen.add(key)
        described.append((err, parts, ctx))
    err, parts, ctx = described[0]
    words = [w for w in [context, *ctx] if w]
    msg = _message(err, parts, root, whole=not prefix)
    more = len(described) - 1
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''} in this input)"
    path = _path_text(([prefix] if prefix else []) + parts)
    value = None if err["type"] in ("missing", "value_error") else err.get("input")
    return InputError(f"{', '.join(words)}: {msg}" if words else msg, source=source, field=path or None, value=value)


def validate_input(kind: Any, data: Any, *, source: str, labels: Mapping[str, str] | None = None, prefix: str = "",
                   context: str = "") -> Any:
    """``data`` validated as ``kind`` (an :class:`InputModel` or a type such as ``list[Model]``); raises the
    :class:`InputError` of :func:`input_error` (one line, no traceback for the user)."""
    adapter, _ = _adapter(kind)
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        raise input_error(exc, kind, data, source=source, labels=labels, prefix=prefix, context=context) from None
