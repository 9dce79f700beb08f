"""The ``fleetplan`` command: a click group whose subcommands are thin layers over the library."""

from __future__ import annotations

import importlib
import json
import sys

import click

from fleetplan import __version__
from fleetplan.cli.output import error_object, interrupted, wants_json
from fleetplan.errors import FleetplanError

#: Each subcommand by name: (module of this layer, attribute). Loaded on first use (click's documented lazy
#: subcommand pattern), so ``fleetplan plan`` does not import the service stack, openpyxl or the simulator.
COMMANDS: dict[str, tuple[str, str]] = {
    "data": ("fleetplan.cli.data", "data"), "plan": ("fleetplan.cli.plan", "plan"),
    "simulate": ("fleetplan.cli.simulate", "simulate"), "ledger": ("fleetplan.cli.ledger", "ledger"),
    "whatif": ("fleetplan.cli.whatif", "whatif"), "sweep": ("fleetplan.cli.sweep", "sweep"),
    "allocate": ("fleetplan.cli.allocate", "allocate"), "serve": ("fleetplan.cli.serve", "serve"),
    "export-history": ("fleetplan.cli.serve", "export_history"), "schema": ("fleetplan.cli.schema", "schema"),
    "calibrate": ("fleetplan.cli.calibrate", "calibrate"), "export": ("fleetplan.cli.export", "export"),
    "diff": ("fleetplan.cli.diff", "diff"),
    "troughs": ("fleetplan.cli.troughs", "troughs"), "prefix-cache": ("fleetplan.cli.prefixcache", "prefix_cache"),
    "kv-tiers": ("fleetplan.cli.kvtiers", "kv_tiers"),
}


class FleetplanGroup(click.Group):
    """A click group that turns any :class:`FleetplanError` into a one-line message and exit code 2, Ctrl-C into
    exit code 130 (:func:`fleetplan.cli.output.interrupted`), and imports a subcommand's module
    (:data:`COMMANDS`) only when that subcommand is run or listed."""

    def list_commands(self, ctx: click.Context) -> list[str]:  # noqa: D102
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:  # noqa: D102
        if cmd_name in self.commands or cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        module, attr = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module), attr)
        self.add_command(command, cmd_name)
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]):  # noqa: D102
        name, cmd, rest = super().resolve_command(ctx, args)
        ctx.meta["fleetplan.invoked"] = (cmd, list(rest))  # for the JSON error object (:func:`_json_error`)
        return name, cmd, rest

    def invoke(self, ctx: click.Context):  # noqa: D102
        try:
            return super().invoke(ctx)
        except FleetplanError as exc:
            _json_error(ctx, exc)
            click.echo(f"Error: {exc}", err=True)
            sys.exit(2)
        except click.UsageError as exc:  # click prints it on stderr and exits 2
            _json_error(ctx, exc)
            raise
        except KeyboardInterrupt:  # click would print "Aborted!" and exit 1
            interrupted()


def _json_error(ctx: click.Context, exc: Exception) -> None:
    """When the command that failed was asked for JSON output (``-o json``, ``--format json``), print the error as
    one JSON object on stdout (:func:`fleetplan.cli.output.error_object`), so ``| jq`` sees an error, not nothing;
    the one-line message still goes to stderr and the exit code stays 2."""
    cmd, args = ctx.meta.get("fleetplan.invoked", (None, []))
    while isinstance(cmd, click.Group) and args:  # a command of a group (export k8s): its name, then its arguments
        sub = cmd.get_command(ctx, args[0])
        cmd, args = sub, args[1:]
    if cmd is not None and not isinstance(cmd, click.Group) and wants_json(cmd, args):
        click.echo(json.dumps(error_object(exc), indent=1, default=str))


@click.group(cls=FleetplanGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fleetplan")
def main() -> None:
    """Plan LLM-serving GPU fleets: replicas per model, GPU type, site and time window, at the lowest cost
    that meets the TTFT/TPOT SLOs, network egress included."""


if __name__ == "__main__":  # pragma: no cover
    main()
