"""``fleetplan serve``: run the online re-planner service (HTTP API, stored plans, periodic re-planning)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import json
import socket
from pathlib import Path
from typing import Any

import click

from fleetplan.cli.database import db_options, open_store
from fleetplan.cli.database import db_url as db_url_of
from fleetplan.cli.output import claim_outputs, interrupted, write_text_atomic
from fleetplan.errors import InputError
from fleetplan.export.deployment import DeployFile, check_targets, read_deploy_file, site_target
from fleetplan.service.actuate import K8sActuator, kube_clients, node_availability
from fleetplan.service.app import create_app
from fleetplan.service.runtime import ReplanService, fleet_history
from fleetplan.service.settings import ServiceSettings, load_settings
from fleetplan.service.store import shown_url, sqlite_path
from fleetplan.solvers.online.config import FORECAST_METHODS, OnlineConfig


def check_port(host: str, port: int) -> None:
    """Raise InputError unless ``host``:``port`` can be listened on now (bound and released at once, with the
    options uvicorn binds with), so a port in use is reported before the database is opened or written."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise InputError(f"port {port} on {host} is in use (another fleetplan serve?): give another --port "
                                 "or stop the process that listens there", field="--port", value=port) from None
            if exc.errno == errno.EACCES:
                raise InputError(f"not allowed to listen on port {port} (ports below 1024 need privileges): give "
                                 "--port 1024 or above", field="--port", value=port) from None
            reason = exc.strerror or str(exc)
            raise InputError(f"cannot listen on {host}:{port}: {reason}; give an address of this machine (e.g. "
                             "127.0.0.1)", field="--host", value=host) from None


def _remove_sqlite(path: Path | None) -> None:
    """Remove the SQLite database ``path`` and its journal files (a failed start's new database)."""
    if path is None:
        return
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"),
              path.with_name(path.name + "-journal")):
        p.unlink(missing_ok=True)


def attach_actuator(service: ReplanService, deploy: DeployFile, *, kubeconfig: str | None = None,
                    dry_run: bool = True, ready_timeout_s: float = 900.0, log_file: str | None = None,
                    watch_nodes: bool = False) -> K8sActuator:
    """A :class:`K8sActuator` for ``service``'s sites (contexts from ``deploy``, clients from the kubeconfig) that
    applies the current plan now (on the leader) and every plan the service commits from now on (in its background
    thread); a standby applies nothing until it takes over."""
    sites = service.problem.sites
    check_targets(sites, deploy)
    clients = kube_clients(sorted({site_target(s, deploy)[0] for s in sites}), kubeconfig)
    actuator = K8sActuator(deploy, clients, dry_run=dry_run, ready_timeout_s=ready_timeout_s, log_file=log_file)
    service.commit_hooks.append(actuator.submit)  # also called with the current plan when a standby takes over
    if watch_nodes:  # the clusters' ready GPU nodes are the inventory, read before every round
        service.inventory_source = lambda: node_availability(service.problem, deploy, clients)
    if service.plan_row is not None and service.role == "leader":
        actuator.submit(service.plan_row)
    return actuator


#: The flags of `fleetplan serve`: (flag, settings key ('online.KEY' for the policy), click type). Help texts are the
#: record's field descriptions; defaults are the record's (a flag not given leaves the key to the environment or
#: the config file).
SERVE_FLAGS: list[tuple[str, str, Any]] = [
    ("--scenario", "scenario", str), ("--plan", "plan_file", click.Path(dir_okay=False)),
    ("--db", "db_url", str), ("--db-file", "db_url_file", click.Path(dir_okay=False)),
    ("--db-timeout", "db_timeout_s", float), ("--host", "host", str), ("--port", "port", int),
    ("--interval", "interval_s", float), ("--resolve-every", "resolve_every_s", float),
    ("--resolve-time-limit", "resolve_time_limit_s", float),
    ("--migration-budget", "online.migration_budget", int),
    ("--target-utilization", "online.target_utilization", float),
    ("--day-curve-weight", "online.day_curve_weight", float),
    ("--floor-on-latest/--no-floor-on-latest", "online.floor_on_latest", bool),
    ("--ewma-alpha", "online.ewma_alpha", float), ("--min-saving", "online.resolve_min_saving_usd", float),
    ("--cooldown", "online.cooldown_s", float),
    ("--migration-cost-hours", "online.migration_cost_replica_hours", float),
    ("--forecast", "online.forecast_method", click.Choice(FORECAST_METHODS)),
    ("--tenant-ttl", "online.tenant_ttl_s", float), ("--max-tenants", "online.max_tenants_per_model", int),
    ("--max-body-bytes", "max_body_bytes", int), ("--prometheus", "prometheus_url", str),
    ("--prometheus-window", "prometheus_window_s", float), ("--rate-ceiling-factor", "rate_ceiling_factor", float),
    ("--fleet-ceiling-factor", "fleet_ceiling_factor", float), ("--max-clock-skew", "max_clock_skew_s", float),
    ("--max-observation-age", "max_observation_age_s", float), ("--max-pending-writes", "max_pending_writes", int),
    ("--lease-ttl", "lease_ttl_s", float), ("--observation-retention", "observation_retention_s", float),
    ("--plan-retention", "plan_retention_s", float), ("--max-plans", "max_plans", int),
    ("--token-file", "token_file", click.Path(dir_okay=False)),
    ("--read-token-file", "read_token_file", click.Path(dir_okay=False)),
    ("--insecure-no-auth", "insecure_no_auth", "flag"), ("--actuate", "actuate", click.Choice(["k8s"])),
    ("--dry-run/--no-dry-run", "dry_run", bool), ("--deploy", "deploy_file", click.Path(dir_okay=False)),
    ("--kubeconfig", "kubeconfig", click.Path(dir_okay=False)), ("--actuate-log", "actuate_log", click.Path(
        dir_okay=False)), ("--ready-timeout", "ready_timeout_s", float),
    ("--watch-nodes/--no-watch-nodes", "watch_nodes", bool),
    ("--log-level", "log_level", click.Choice(["critical", "error", "warning", "info", "debug"])),
]

_FILE_KEYS = {"token_file": "file whose first line is the bearer token of the write endpoints",
              "read_token_file": "file whose first line is a read-only token that may see per-tenant rates",
              "db_url_file": "file whose first line is the database URL"}
_ENV_OF = {"token_file": "FLEETPLAN_TOKEN", "read_token_file": "FLEETPLAN_READ_TOKEN",
           "db_url_file": "FLEETPLAN_DB_URL"}


def _help(key: str) -> str:
    """A flag's help: the record's description, its default, and the environment variable and config key."""
    if key in _FILE_KEYS:
        return f"{_FILE_KEYS[key][0].upper()}{_FILE_KEYS[key][1:]} (else ${_ENV_OF[key]}; config key {key})."
    if key.startswith("online."):
        name = key.split(".", 1)[1]
        f = next(f for f in dataclasses.fields(OnlineConfig) if f.name == name)
        text = f"Re-planner policy: OnlineConfig.{name} (see its docstring)"
        default, env = f.default, f"FLEETPLAN_ONLINE__{name.upper()}"
    else:
        field = ServiceSettings.model_fields[key]
        text = (field.description or key)
        default, env = field.default, f"FLEETPLAN_{key.upper()}"
    shown = "" if default is None or isinstance(default, bool) and key in ("insecure_no_auth",) else \
        f"; default {default}"
    return f"{text[:1].upper()}{text[1:]}{shown} (env {env}; config key {key})."


def _serve_options(f):
    for flag, key, kind in reversed(SERVE_FLAGS):
        name = "_" + key.replace(".", "__")
        if kind == "flag":
            f = click.option(flag, name, is_flag=True, default=None, help=_help(key))(f)
        elif kind is bool:
            f = click.option(flag, name, default=None, help=_help(key))(f)
        else:
            f = click.option(flag, name, type=kind, default=None, help=_help(key))(f)
    return click.option("--config", "config_file", default=None, type=click.Path(dir_okay=False),
                        help="YAML file of settings (keys as in `fleetplan serve --help`'s 'config key'; flags and "
                             "FLEETPLAN_* variables win over it; env FLEETPLAN_CONFIG).")(f)


def settings_from_flags(config_file: str | None, given: dict[str, Any]) -> ServiceSettings:
    """The record from the command's flags (``given``: {'_key' or '_online__key': value}, None when not given),
    the environment and the config file. A bad value is an InputError naming the flag it came from."""
    flags = {k[1:].replace("__", "."): v for k, v in given.items()}
    try:
        return load_settings(flags, config_file=config_file)
    except InputError as exc:
        flag = next((fl.split("/")[0] for fl, key, _ in SERVE_FLAGS if exc.source == "flags"
                     and exc.field is not None and key == exc.field), None)
        if flag is not None:
            raise InputError(exc.message, field=flag, value=exc.value) from None
        raise


@click.command("serve")
@_serve_options
def serve(config_file: str | None, **given: Any) -> None:
    """Serve a live plan over HTTP and re-plan it every --interval seconds as observations arrive.

    Settings come from flags, then FLEETPLAN_* environment variables, then --config FILE, then defaults
    (docs/service.md, "Settings"). Write endpoints need `Authorization: Bearer <token>` (FLEETPLAN_TOKEN or
    --token-file) unless started with --insecure-no-auth. Several services on one database elect one leader; the
    others serve reads. The database's schema is upgraded on start. OpenAPI documentation at
    http://HOST:PORT/docs.
    """
    import logging

    settings = settings_from_flags(config_file, given)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.insecure_no_auth:
        click.echo("warning: write endpoints accept requests without a token (--insecure-no-auth)", err=True)
    deploy = read_deploy_file(settings.deploy_file) if settings.actuate else None
    if settings.plan_file is not None and not Path(settings.plan_file).is_file():
        # before the database is migrated and the lease taken: a misspelt plan file costs nothing
        raise InputError(f"no plan file {settings.plan_file}; give the file `fleetplan plan --out` wrote",
                         field="--plan", value=settings.plan_file)
    # A URL that is not one is the user's mistake whatever the port: said before the port check (which a running
    # `fleetplan serve` would answer first).
    new_db = sqlite_path(settings.db_url)
    check_port(settings.host, settings.port)
    # A start that fails (a plan file that does not fit, an unreachable cluster) leaves no new database behind.
    if new_db is not None and new_db.exists():
        new_db = None
    app = None
    try:
        app = create_app(settings)
        if settings.actuate == "k8s" and deploy is not None:
            attach_actuator(app.state.service, deploy, kubeconfig=settings.kubeconfig, dry_run=settings.dry_run,
                            ready_timeout_s=settings.ready_timeout_s, log_file=settings.actuate_log,
                            watch_nodes=settings.watch_nodes)
            doing = "dry run: recording, not patching" if settings.dry_run else "patching replicas"
            click.echo(f"acting on Kubernetes ({doing}; the leader only)", err=True)
    except BaseException:
        if app is not None:
            app.state.service.close()
        _remove_sqlite(new_db)
        raise
    svc = app.state.service
    plan = svc.plan_row["id"] if svc.plan_row else "none yet"
    click.echo(f"fleetplan serve: http://{settings.host}:{settings.port}/docs ({svc.role}; plan {plan}, "
               f"{'resumed' if svc.resumed else 'new'}; database {shown_url(settings.db_url)}, schema revision "
               f"{svc.store.revision})", err=True)
    run_until_stopped(app, host=settings.host, port=settings.port, log_level=settings.log_level)


def _stopped(signum, _frame) -> None:
    raise SystemExit(0)


def run_until_stopped(app, **uvicorn_kw) -> None:
    """Serve ``app`` with uvicorn until SIGTERM or SIGINT, then shut down gracefully: a requested stop (Kubernetes
    sends SIGTERM) is not a failure, status 0. uvicorn re-raises the signal it stopped for once it has shut down
    (exit 143 for SIGTERM); the handler it restores then, this one, exits 0 instead. SIGINT (Ctrl-C) ends as every
    command's does, with status 130 (:func:`fleetplan.cli.main.interrupted`)."""
    import signal

    import uvicorn

    previous = signal.signal(signal.SIGTERM, _stopped)
    # uvicorn.run swallows the KeyboardInterrupt of the SIGINT it re-raises (exit 0); with a handler of our own
    # (which also keeps asyncio's from replacing Python's) that SIGINT ends as every command's Ctrl-C does
    previous_int = signal.signal(signal.SIGINT, interrupted)
    try:
        uvicorn.run(app, **uvicorn_kw)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


@click.command("export-history")
@db_options("; default: --db-file, else FLEETPLAN_DB_URL, else sqlite:///fleetplan.db.")
@click.option("--day", required=True, help="The UTC day to export, YYYY-MM-DD.")
@click.option("--out", "out_file", default="-", show_default=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the steps here ('-': standard output).")
def export_history(db_url, db_file, day, out_file) -> None:
    """Export the service's stored plans of one day as `fleetplan simulate PLAN --fleet` steps (JSON)."""
    try:
        start = dt.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        raise InputError(f"--day {day!r} is not a date: give YYYY-MM-DD", field="--day", value=day) from None
    claim_outputs({"--out": None if out_file == "-" else out_file})
    store = open_store(db_url_of(db_url, db_file))
    try:
        text = json.dumps(fleet_history(store, start), indent=1)
    finally:
        store.close()
    if out_file == "-":
        click.echo(text)
    else:
        write_text_atomic(out_file, text + "\n")
        click.echo(f"wrote {out_file}", err=True)
