"""``fleetplan serve``: run the online re-planner service (HTTP API, stored plans, periodic re-planning)."""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import socket
from pathlib import Path

import click

from fleetplan.cli.output import write_text_atomic
from fleetplan.errors import InputError
from fleetplan.export.deployment import DeployFile, check_targets, read_deploy_file, site_target
from fleetplan.fileio import check_destinations
from fleetplan.service.actuate import K8sActuator, kube_clients
from fleetplan.service.app import create_app
from fleetplan.service.runtime import ReplanService, ServiceSettings, fleet_history
from fleetplan.service.store import Store, shown_url, sqlite_path
from fleetplan.solvers.online.config import FORECAST_METHODS, OnlineConfig

DEFAULT_DB = "sqlite:///fleetplan.db"


def _secret(path: str | None, option: str, env: str, what: str) -> str | None:
    """The secret in file ``path`` (first line, stripped), else the environment variable ``env``, else None."""
    if path:
        p = Path(path)
        if not p.is_file():
            raise InputError(f"no such {what} file {p}", source=str(p), field=option)
        lines = p.read_text().strip().splitlines()
        if not lines or not lines[0].strip():
            raise InputError(f"the {what} file is empty", source=str(p), field=option)
        return lines[0].strip()
    return os.environ.get(env) or None


def _token(token_file: str | None) -> str | None:
    return _secret(token_file, "--token-file", "FLEETPLAN_TOKEN", "token")


def _db_url(db_url: str | None, db_file: str | None) -> str:
    """--db, else the URL in --db-file, else FLEETPLAN_DB_URL, else the default SQLite file: a URL with a password
    need never appear on the command line (where the process list shows it)."""
    if db_url and db_file:
        raise InputError("give either --db or --db-file, not both", field="--db-file")
    return db_url or _secret(db_file, "--db-file", "FLEETPLAN_DB_URL", "database URL") or DEFAULT_DB


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
                    dry_run: bool = True, ready_timeout_s: float = 900.0, log_file: str | None = None) -> K8sActuator:
    """A :class:`K8sActuator` for ``service``'s sites (contexts from ``deploy``, clients from the kubeconfig) that
    applies the current plan now and every plan the service commits from now on (in its background thread)."""
    sites = service.problem.sites
    check_targets(sites, deploy)
    clients = kube_clients(sorted({site_target(s, deploy)[0] for s in sites}), kubeconfig)
    actuator = K8sActuator(deploy, clients, dry_run=dry_run, ready_timeout_s=ready_timeout_s, log_file=log_file)
    service.commit_hooks.append(actuator.submit)
    if service.plan_row is not None:
        actuator.submit(service.plan_row)
    return actuator


@click.command("serve")
@click.option("--scenario", default=None, help="Scenario YAML file or shipped name (default: the shipped default).")
@click.option("--db", "db_url", default=None,
              help="SQLAlchemy URL: sqlite:///file.db or postgresql://user@host/db (default: --db-file, else the "
                   "FLEETPLAN_DB_URL environment variable, else sqlite:///fleetplan.db). Put a URL with a password "
                   "in --db-file or FLEETPLAN_DB_URL: the process list shows the command line.")
@click.option("--db-file", default=None, help="File whose first line is the database URL.")
@click.option("--db-timeout", "db_timeout_s", default=30.0, show_default=True, type=click.FloatRange(0.1, 600),
              help="Longest wait for a database lock or connection before a write fails with 503, seconds.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535))
@click.option("--interval", "interval_s", default=300.0, show_default=True, type=click.FloatRange(0),
              help="Seconds between re-plan rounds (0: only on POST /v1/replan).")
@click.option("--resolve-every", "resolve_every_s", default=3600.0, show_default=True, type=click.FloatRange(0),
              help="Seconds between full MILP re-solves in the background (0: none).")
@click.option("--resolve-time-limit", "resolve_time_limit_s", default=30.0, show_default=True,
              type=click.FloatRange(1, 3600), help="Time limit of one re-solve, seconds.")
@click.option("--migration-budget", default=8, show_default=True, type=click.IntRange(0),
              help="Most replica starts + stops per round.")
@click.option("--target-utilization", default=0.8, show_default=True, type=click.FloatRange(0.05, 1.0),
              help="Replicas are removed only if the survivors then run at most this busy.")
@click.option("--day-curve-weight", default=0.5, show_default=True, type=click.FloatRange(0, 1),
              help="With --forecast blend (and before two days are observed): forecast = weight x day curve + "
                   "(1 - weight) x recent average, then raised to the newest observed rate (see --floor-on-latest).")
@click.option("--floor-on-latest/--no-floor-on-latest", default=OnlineConfig().floor_on_latest, show_default=True,
              help="Never forecast below the newest observed rate of a model (its live tenants' sum; an observation "
                   f"older than {OnlineConfig().latest_max_age_s / 60:g} min no longer counts), whatever the method "
                   "and --day-curve-weight: a burst is met within one round. Off is cheaper and misses more SLOs "
                   "(measured by benchmarks/bench_replanner.py).")
@click.option("--ewma-alpha", default=0.3, show_default=True, type=click.FloatRange(0.01, 1.0),
              help="Weight of the newest observation in the recent average.")
@click.option("--min-saving", "min_saving_usd", default=1.0, show_default=True, type=click.FloatRange(0),
              help="A re-solve is adopted only if it saves more than this (USD), after its migrations.")
@click.option("--cooldown", "cooldown_s", default=1800.0, show_default=True, type=click.FloatRange(0),
              help="Scale-down stabilization window, seconds: removals use the highest forecast of this long.")
@click.option("--migration-cost-hours", "migration_cost_replica_hours", default=0.25, show_default=True,
              type=click.FloatRange(0), help="Operational cost of one replica start or stop when a re-solve is "
              "weighed, in hours of that replica's price (drain, cache warm-up, risk).")
@click.option("--forecast", "forecast_method", default=OnlineConfig().forecast_method, show_default=True,
              type=click.Choice(FORECAST_METHODS), help="Forecast method: the day-curve/EWMA 'blend', or a "
              "statsforecast model fitted on the observed history (needs the 'forecast' extra; the blend until two "
              "days are observed). Measured by benchmarks/bench_forecast.py.")
@click.option("--plan", "plan_file", default=None, type=click.Path(dir_okay=False),
              help="Start from this offline plan (fleetplan plan --out) when the database holds no plan yet.")
@click.option("--max-body-bytes", default=1_000_000, show_default=True, type=click.IntRange(1024),
              help="Largest request body accepted.")
@click.option("--prometheus", "prometheus_url", default=None,
              help="Prometheus base URL to pull vLLM metrics from at every round and on POST /v1/replan.")
@click.option("--prometheus-window", "prometheus_window_s", default=None, type=click.FloatRange(1, 86400),
              help="Seconds of metrics one pull covers (default: --interval, or 300 when that is 0).")
@click.option("--rate-ceiling-factor", default=10.0, show_default=True, type=click.FloatRange(min=1.0),
              help="Refuse an observed rate above this multiple of the whole fleet's capacity for its model.")
@click.option("--max-clock-skew", "max_clock_skew_s", default=300.0, show_default=True, type=click.FloatRange(0),
              help="Refuse observations dated more than this many seconds ahead of the service's clock.")
@click.option("--tenant-ttl", "tenant_ttl_s", default=900.0, show_default=True, type=click.FloatRange(0),
              help="Seconds after which a silent tenant label stops counting in the forecast.")
@click.option("--max-tenants", default=100, show_default=True, type=click.IntRange(1),
              help="Most live tenant labels per model (a new label beyond it gets 422).")
@click.option("--token-file", default=None, help="File holding the bearer token for write endpoints "
              "(default: the FLEETPLAN_TOKEN environment variable).")
@click.option("--read-token-file", default=None, help="File holding a read-only token that may see per-tenant "
              "rates (default: the FLEETPLAN_READ_TOKEN environment variable; none: only the write token may).")
@click.option("--insecure-no-auth", is_flag=True, help="Accept writes without a token (explicit opt-in).")
@click.option("--actuate", type=click.Choice(["k8s"]), default=None,
              help="Apply each adopted plan to Kubernetes: patch the replicas of the workloads `fleetplan export k8s` "
                   "wrote (starts first, stops once they are ready).")
@click.option("--dry-run/--no-dry-run", "dry_run", default=True, show_default=True,
              help="With --actuate: only record what would change (give --no-dry-run to patch).")
@click.option("--deploy", "deploy_file", default=None, type=click.Path(dir_okay=False),
              help="With --actuate: deployment file mapping sites to kubectl contexts and namespaces.")
@click.option("--kubeconfig", default=None, type=click.Path(dir_okay=False),
              help="With --actuate: kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
@click.option("--actuate-log", default=None, type=click.Path(dir_okay=False),
              help="With --actuate: append every change (JSON lines) to this file.")
@click.option("--ready-timeout", "ready_timeout_s", default=900.0, show_default=True,
              type=click.FloatRange(1, 86400),
              help="With --actuate: longest wait for started replicas to be ready before stops are deferred, seconds.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
def serve(scenario, db_url, db_file, db_timeout_s, host, port, interval_s, resolve_every_s, resolve_time_limit_s,
          migration_budget, target_utilization, day_curve_weight, floor_on_latest, ewma_alpha, min_saving_usd,
          cooldown_s, migration_cost_replica_hours, forecast_method, plan_file, max_body_bytes,
          prometheus_url, prometheus_window_s, rate_ceiling_factor, max_clock_skew_s, tenant_ttl_s, max_tenants,
          token_file, read_token_file, insecure_no_auth, actuate, dry_run, deploy_file, kubeconfig, actuate_log,
          ready_timeout_s, log_level) -> None:
    """Serve a live plan over HTTP and re-plan it every --interval seconds as observations arrive.

    Write endpoints need `Authorization: Bearer <token>` (FLEETPLAN_TOKEN or --token-file) unless started with
    --insecure-no-auth. OpenAPI documentation at http://HOST:PORT/docs.
    """
    import logging


    token = _token(token_file)
    read_token = _secret(read_token_file, "--read-token-file", "FLEETPLAN_READ_TOKEN", "read token")
    if token and insecure_no_auth:
        raise InputError("give either a token or --insecure-no-auth, not both", field="--insecure-no-auth")
    db_url = _db_url(db_url, db_file)
    online = OnlineConfig(ewma_alpha=ewma_alpha, day_curve_weight=day_curve_weight, floor_on_latest=floor_on_latest,
                          target_utilization=target_utilization, migration_budget=migration_budget,
                          resolve_min_saving_usd=min_saving_usd, tenant_ttl_s=tenant_ttl_s,
                          max_tenants_per_model=max_tenants, cooldown_s=cooldown_s,
                          migration_cost_replica_hours=migration_cost_replica_hours,
                          forecast_method=forecast_method)
    settings = ServiceSettings(scenario=scenario, db_url=db_url, token=token, insecure_no_auth=insecure_no_auth,
                               interval_s=interval_s, resolve_every_s=resolve_every_s,
                               resolve_time_limit_s=resolve_time_limit_s, max_body_bytes=max_body_bytes,
                               prometheus_url=prometheus_url, prometheus_window_s=prometheus_window_s,
                               read_token=read_token, db_timeout_s=db_timeout_s,
                               rate_ceiling_factor=rate_ceiling_factor, max_clock_skew_s=max_clock_skew_s,
                               online=online, plan_file=plan_file)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if insecure_no_auth:
        click.echo("warning: write endpoints accept requests without a token (--insecure-no-auth)", err=True)
    if actuate is None and (deploy_file or kubeconfig or actuate_log):
        raise InputError("--deploy, --kubeconfig and --actuate-log go with --actuate k8s", field="--actuate")
    deploy = read_deploy_file(deploy_file) if actuate else None
    check_port(host, port)
    # A start that fails (a plan file that does not fit, an unreachable cluster) leaves no new database behind.
    new_db = sqlite_path(db_url)
    if new_db is not None and new_db.exists():
        new_db = None
    app = None
    try:
        app = create_app(settings)
        if actuate == "k8s" and deploy is not None:
            attach_actuator(app.state.service, deploy, kubeconfig=kubeconfig, dry_run=dry_run,
                            ready_timeout_s=ready_timeout_s, log_file=actuate_log)
            doing = "dry run: recording, not patching" if dry_run else "patching replicas"
            click.echo(f"acting on Kubernetes ({doing})", err=True)
    except BaseException:
        if app is not None:
            app.state.service.close()
        _remove_sqlite(new_db)
        raise
    click.echo(f"fleetplan serve: http://{host}:{port}/docs (plan {app.state.service.plan_row['id']}, "
               f"{'resumed' if app.state.service.resumed else 'new'}; database {shown_url(db_url)})", err=True)
    run_until_stopped(app, host=host, port=port, log_level=log_level)


def _stopped(signum, _frame) -> None:
    raise SystemExit(0)


def run_until_stopped(app, **uvicorn_kw) -> None:
    """Serve ``app`` with uvicorn until SIGTERM or SIGINT, then shut down gracefully and exit with status 0: a
    requested stop (Kubernetes sends SIGTERM) is not a failure. uvicorn re-raises the signal it stopped for once it
    has shut down (exit 143 for SIGTERM); the handler it restores then, this one, exits 0 instead."""
    import signal

    import uvicorn

    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        uvicorn.run(app, **uvicorn_kw)
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.command("export-history")
@click.option("--db", "db_url", default=None, help="The service's database URL (as for `fleetplan serve --db`; "
              "default: --db-file, else FLEETPLAN_DB_URL, else sqlite:///fleetplan.db).")
@click.option("--db-file", default=None, help="File whose first line is the database URL.")
@click.option("--day", required=True, help="The UTC day to export, YYYY-MM-DD.")
@click.option("--out", "out_file", default="-", show_default=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the steps here ('-': standard output).")
def export_history(db_url, db_file, day, out_file) -> None:
    """Export the service's stored plans of one day as `fleetplan simulate PLAN --fleet` steps (JSON)."""
    try:
        start = dt.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        raise InputError(f"--day {day!r} is not a date: give YYYY-MM-DD", field="--day", value=day) from None
    check_destinations({"--out": None if out_file == "-" else out_file})
    store = Store(_db_url(db_url, db_file))
    try:
        text = json.dumps(fleet_history(store, start), indent=1)
    finally:
        store.close()
    if out_file == "-":
        click.echo(text)
    else:
        write_text_atomic(out_file, text + "\n")
        click.echo(f"wrote {out_file}", err=True)
