"""Output helpers shared by the commands: atomic file writes (never a half-written file) and a progress spinner."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from fleetplan.errors import InputError


def _check_target(path: Path) -> None:
    if path.is_dir():
        raise InputError(f"{path} is a folder; give a file name", source=str(path))
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise InputError(f"folder {parent} does not exist; create it first", source=str(path))


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path`` in one step, on error it is
    removed, so a reader never sees a half-written file and a failed run leaves the old file untouched."""
    target = Path(path)
    _check_target(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix, dir=target.parent or ".")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


@contextlib.contextmanager
def progress_status(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr that shows the current step and the elapsed time (rich); yields ``say(text)``."""
    if not enabled:
        yield lambda s: None
        return
    from rich.console import Console

    console = Console(stderr=True)
    t0 = time.perf_counter()
    with console.status("starting") as status:
        def say(text: str) -> None:
            status.update(f"{text} ({time.perf_counter() - t0:.0f} s)")

        yield say
