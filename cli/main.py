"""The ``fleetplan`` command: a click group whose subcommands are thin layers over the library."""

from __future__ import annotations

import difflib
import importlib
import json
import sys

import click

from fleetplan import __version__
from fleetplan.cli.output import error_object, interrupted, wants_json
from fleetplan.errors import FleetplanError

#: Each subcommand by name: (module of this layer, attribute, its line in ``fleetplan --help``). Loaded on first use
#: (click's documented lazy subcommand pattern), so ``fleetplan plan`` does not import the service stack, openpyxl or
#: the simulator, and ``fleetplan --help`` imports none of them (1.5 CPU-s when it loaded every command). The line is
#: the command's short help once loaded too (:meth:`FleetplanGroup.get_command`), so the two cannot differ.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "allocate": ("fleetplan.cli.allocate", "allocate", "Allocate a shared GPU pool to tenants per time window."),
    "calibrate": ("fleetplan.cli.calibrate", "calibrate", "Fit the roofline's constants to measured latencies."),
    "data": ("fleetplan.cli.data", "data", "List the shipped data catalogs."),
    "diff": ("fleetplan.cli.diff", "diff", "What changes between two plans, or a plan and the fleet."),
    "export": ("fleetplan.cli.export", "export", "Turn a plan file into what a cluster or a node runs."),
    "export-history": ("fleetplan.cli.serve", "export_history",
                       "A day of the service's plans as `simulate --fleet` steps."),
    "kv-tiers": ("fleetplan.cli.kvtiers", "kv_tiers", "A replica's capacity with host DRAM and NVMe KV tiers."),
    "ledger": ("fleetplan.cli.ledger", "ledger", "Cost ledgers: GPU-hours, egress and energy per day."),
    "plan": ("fleetplan.cli.plan", "plan", "Plan replicas per model, GPU, site and window."),
    "prefix-cache": ("fleetplan.cli.prefixcache", "prefix_cache", "Prefix-cache hit rates per replica and shared."),
    "schema": ("fleetplan.cli.schema", "schema", "Print the JSON Schema of an input file."),
    "serve": ("fleetplan.cli.serve", "serve", "Serve a live plan over HTTP and re-plan it as load moves."),
    "simulate": ("fleetplan.cli.simulate", "simulate", "Replay a plan file: TTFT/TPOT, SLO attainment, goodput."),
    "sweep": ("fleetplan.cli.sweep", "sweep", "Plan a scenario for every cell of a --vary grid."),
    "troughs": ("fleetplan.cli.troughs", "troughs", "Lend a training job's GPUs to inference in its troughs."),
    "whatif": ("fleetplan.cli.whatif", "whatif", "Sweep a prefill/decode split design's costs and SLO."),
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
        module, attr, short = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module), attr)
        command.short_help = short
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands' lines of ``--help`` from :data:`COMMANDS`, importing none of them."""
        rows = [(name, COMMANDS[name][2] if name in COMMANDS else self.commands[name].get_short_help_str())
                for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(self, ctx: click.Context, args: list[str]):  # noqa: D102
        try:
            name, cmd, rest = super().resolve_command(ctx, args)
        except click.UsageError as exc:  # 'fleetplan plna': say which command was meant, as options do
            close = difflib.get_close_matches(args[0], self.list_commands(ctx), n=1) if args else []
            if close and "No such command" in exc.message:
                raise click.UsageError(f"{exc.message} Did you mean '{close[0]}'?", exc.ctx) from None
            raise
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
