"""The ``fleetplan`` command: a click group whose subcommands are thin layers over the library."""

from __future__ import annotations

import sys

import click

from fleetplan import __version__
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


def _register() -> None:
    import importlib

    for module, name in (("data", "data"), ("plan", "plan"), ("simulate", "simulate"), ("ledger", "ledger"),
                         ("whatif", "whatif"), ("allocate", "allocate"), ("serve", "serve"),
                         ("schema", "schema")):
        try:
            mod = importlib.import_module(f"fleetplan.cli.{module}")
        except ModuleNotFoundError as exc:
            if exc.name == f"fleetplan.cli.{module}":
                continue  # that command is not part of this build yet
            raise
        main.add_command(getattr(mod, name))


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
