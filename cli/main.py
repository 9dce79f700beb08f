"""The ``fleetplan`` command: a click group whose subcommands are thin layers over the library."""

from __future__ import annotations

import sys

import click

from fleetplan import __version__
from fleetplan.cli.allocate import allocate
from fleetplan.cli.calibrate import calibrate
from fleetplan.cli.data import data
from fleetplan.cli.export import export
from fleetplan.cli.ledger import ledger
from fleetplan.cli.plan import plan
from fleetplan.cli.prefixcache import prefix_cache
from fleetplan.cli.schema import schema
from fleetplan.cli.serve import export_history, serve
from fleetplan.cli.simulate import simulate
from fleetplan.cli.sweep import sweep
from fleetplan.cli.troughs import troughs
from fleetplan.cli.whatif import whatif
from fleetplan.errors import FleetplanError


class FleetplanGroup(click.Group):
    """A click group that turns any :class:`FleetplanError` into a one-line message and exit code 2."""

    def invoke(self, ctx: click.Context):  # noqa: D102
        try:
            return super().invoke(ctx)
        except FleetplanError as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=FleetplanGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fleetplan")
def main() -> None:
    """Plan LLM-serving GPU fleets: replicas per model, GPU type, site and time window, at the lowest cost
    that meets the TTFT/TPOT SLOs, network egress included."""


for _command in (data, plan, simulate, ledger, whatif, sweep, allocate, serve, export_history, schema, calibrate,
                 export, troughs, prefix_cache):
    main.add_command(_command)

if __name__ == "__main__":  # pragma: no cover
    main()
