"""The service database options of the commands that read what ``fleetplan serve`` stored (``export-history``,
``diff PLAN --db``): ``--db`` and ``--db-file``, declared once, and opening the database read-only in spirit (a
SQLite file that does not exist is named, not created empty)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from fleetplan.errors import InputError
from fleetplan.service.settings import load_settings
from fleetplan.service.store import Store, shown_url, sqlite_path


def db_options(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--db`` (keyword ``db_url``) and ``--db-file`` (keyword ``db_file``); ``what`` ends the help of --db."""
    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        f = click.option("--db-file", default=None, help="File whose first line is the database URL.")(f)
        return click.option("--db", "db_url", default=None,
                            help="The service's database URL (as for `fleetplan serve --db`)" + what)(f)
    return deco


def db_url(db_url: str | None, db_file: str | None) -> str:
    """--db, else the URL in --db-file, else FLEETPLAN_DB_URL, else the default SQLite file (as for serve). Raises
    InputError when both options are given."""
    flags = {"db_url": db_url, "db_url_file": db_file}
    if db_url and db_file:
        raise InputError("give either --db or --db-file, not both", field="--db-file")
    return load_settings(flags, environ={k: v for k, v in os.environ.items() if k in (
        "FLEETPLAN_DB_URL", "FLEETPLAN_DB_URL_FILE")} | {"FLEETPLAN_INSECURE_NO_AUTH": "true"}).db_url


def open_store(url: str) -> Store:
    """The service's store at ``url``, for reading. Raises InputError naming --db when ``url`` is a SQLite file
    that does not exist (opening it would create an empty database and report 'no stored plan')."""
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        raise InputError(f"no database file {path}; give the --db (or --db-file) that `fleetplan serve` writes to",
                         field="--db", value=shown_url(url))
    return Store(url)
