"""Atomic file output shared by every command and writer: never a half-written file.

:func:`atomic_path` yields a temporary path beside the target; on success it replaces the target in one step (with
the permissions an ordinary new file gets, i.e. 0666 less the umask), on any error it removes the temporary file and
leaves an existing target untouched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from fleetplan.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | Path, *, field: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` that replaces ``path`` when the block ends without error.

    Raises InputError (naming ``field`` when given) when ``path`` is a folder, its folder does not exist, or it
    cannot be written.
    """
    target = Path(path)
    if target.is_dir():
        raise InputError(f"{target} is a folder; give a file name", source=str(target), field=field)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"folder {parent} does not exist; create it or choose another path", source=str(target),
                         field=field)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix or ".tmp", dir=parent)
    except OSError as exc:
        raise InputError(f"cannot write in {parent}: {exc.strerror or exc}", source=str(target), field=field) \
            from None
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    except OSError as exc:
        raise InputError(f"cannot write {target}: {exc.strerror or exc}", source=str(target), field=field) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_text_atomic(path: str | Path, text: str, *, field: str | None = None) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path, field=field) as tmp:
        tmp.write_text(text, newline="")
