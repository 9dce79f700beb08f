"""``fleetplan serve``: run the online re-planner service (HTTP API, stored plans, periodic re-planning)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from fleetplan.errors import InputError
from fleetplan.service.app import create_app
from fleetplan.service.runtime import ServiceSettings
from fleetplan.solvers.online import OnlineConfig


def _token(token_file: str | None) -> str | None:
    if token_file:
        p = Path(token_file)
        if not p.is_file():
            raise InputError(f"no such token file {p}", source=str(p), field="--token-file")
        tok = p.read_text().strip()
        if not tok:
            raise InputError("the token file is empty", source=str(p), field="--token-file")
        return tok
    return os.environ.get("FLEETPLAN_TOKEN") or None


@click.command("serve")
@click.option("--scenario", default=None, help="Scenario YAML file or shipped name (default: the shipped default).")
@click.option("--db", "db_url", default="sqlite:///fleetplan.db", show_default=True,
              help="SQLAlchemy URL: sqlite:///file.db or postgresql://user@host/db.")
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
              help="Forecast = weight x day curve + (1 - weight) x recent average.")
@click.option("--ewma-alpha", default=0.3, show_default=True, type=click.FloatRange(0.01, 1.0),
              help="Weight of the newest observation in the recent average.")
@click.option("--min-saving", "min_saving_usd", default=1.0, show_default=True, type=click.FloatRange(0),
              help="A re-solve is adopted only if it saves more than this (USD), after its migrations.")
@click.option("--max-body-bytes", default=1_000_000, show_default=True, type=click.IntRange(1024),
              help="Largest request body accepted.")
@click.option("--prometheus", "prometheus_url", default=None,
              help="Prometheus base URL to pull vLLM metrics from at every round.")
@click.option("--token-file", default=None, help="File holding the bearer token for write endpoints "
              "(default: the FLEETPLAN_TOKEN environment variable).")
@click.option("--insecure-no-auth", is_flag=True, help="Accept writes without a token (explicit opt-in).")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
def serve(scenario, db_url, host, port, interval_s, resolve_every_s, resolve_time_limit_s, migration_budget,
          target_utilization, day_curve_weight, ewma_alpha, min_saving_usd, max_body_bytes, prometheus_url,
          token_file, insecure_no_auth, log_level) -> None:
    """Serve a live plan over HTTP and re-plan it every --interval seconds as observations arrive.

    Write endpoints need `Authorization: Bearer <token>` (FLEETPLAN_TOKEN or --token-file) unless started with
    --insecure-no-auth. OpenAPI documentation at http://HOST:PORT/docs.
    """
    import logging

    import uvicorn


    token = _token(token_file)
    if token and insecure_no_auth:
        raise InputError("give either a token or --insecure-no-auth, not both", field="--insecure-no-auth")
    online = OnlineConfig(ewma_alpha=ewma_alpha, day_curve_weight=day_curve_weight,
                          target_utilization=target_utilization, migration_budget=migration_budget,
                          resolve_min_saving_usd=min_saving_usd)
    settings = ServiceSettings(scenario=scenario, db_url=db_url, token=token, insecure_no_auth=insecure_no_auth,
                               interval_s=interval_s, resolve_every_s=resolve_every_s,
                               resolve_time_limit_s=resolve_time_limit_s, max_body_bytes=max_body_bytes,
                               prometheus_url=prometheus_url, online=online)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if insecure_no_auth:
        click.echo("warning: write endpoints accept requests without a token (--insecure-no-auth)", err=True)
    app = create_app(settings)
    click.echo(f"fleetplan serve: http://{host}:{port}/docs (plan {app.state.service.plan_row['id']}, "
               f"{'resumed' if app.state.service.resumed else 'new'}; database {db_url})", err=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
