"""``fleetplan ledger``: cost ledgers, the prefill-here/decode-there comparison, what-if workbooks and sweeps, and
whether speculative decoding pays for a model's mix (``ledger speculation``, :mod:`fleetplan.scenario.speculation`).

Thin layer over :mod:`fleetplan.scenario.split` (options -> spec), :mod:`fleetplan.costmodels.split` (the
comparison), :mod:`fleetplan.costmodels.ledger` and :mod:`fleetplan.outputs.workbook`. Bad input raises a
fleetplan error (one line, exit code 2); files are written to a temporary file and renamed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from fleetplan.cli.grid import MAX_GRID_CELLS
from fleetplan.cli.options import (
    fanout_options,
    format_option,
    max_cells_option,
    out_option,
    plot_option,
    split_design_options,
    split_options,
    vary_option,
    xlsx_option,
)
from fleetplan.cli.output import claim_outputs, json_safe, rows_csv, stdout_console, table
from fleetplan.cli.params import FiniteRange
from fleetplan.cli.whatif import PLOT_HELP, run_whatif
from fleetplan.costmodels.engine import SPECULATION_METHODS, Speculation
from fleetplan.costmodels.speculative import ACCEPTANCE_GRID_STEP
from fleetplan.costmodels.split import SWEEP_VARIABLES, SplitResult, SplitSpec, compare, scenario_row
from fleetplan.fileio import output_files
from fleetplan.outputs.workbook import build_split_workbook
from fleetplan.scenario.read import load_scenario
from fleetplan.scenario.speculation import BREAK_EVEN_TOLERANCE, SpeculationRow, speculation_whatif, verdict
from fleetplan.scenario.split import make_spec
from fleetplan.solvers.executor import default_workers

if TYPE_CHECKING:
    from rich.table import Table

#: The --format of `ledger split`: what each format prints.
SPLIT_FORMATS_HELP = ("table: line items and options side by side; json: one object (break_even_egress_usd_per_gb "
                      "is null when no egress price makes the split pay, with break_even_egress_note saying so); "
                      "csv: line items.")


def _line_items(result: SplitResult) -> list[dict]:
    """Every option's ledger line items as rows (option, category, label, ..., amount_usd_per_day, in_total)."""
    return [i.row() for o in result.options.values() for i in o.ledger.items]


def _workbook_scenarios(spec: SplitSpec) -> list[dict]:
    """The Scenarios sheet of the split workbook: the comparison at 0, 1/2, 1, 2 and 4 times the route's first
    egress band price and at 1/4, 1 and 4 times the mean prompt."""
    base = spec.kv_table.tiers[0].usd_per_gb
    egress = sorted({round(x, 4) for x in (0.0, base / 2, base, base * 2, base * 4)})
    prompts = [spec.mix.input_tokens_mean * f for f in (0.25, 1.0, 4.0)]
    return [scenario_row(spec, {"egress_usd_per_gb": e, "prompt_tokens": p}) for e in egress for p in prompts]


def _split_json(result: SplitResult) -> dict:
    """The comparison as one JSON-ready object; a negative break-even egress price (no price makes the split pay)
    is null with a note, as the table's "none"."""
    d = result.to_dict()
    be = d["break_even_egress_usd_per_gb"]
    if be is not None and be < 0:  # as the table's "none": no egress price makes the split pay
        d["break_even_egress_usd_per_gb"] = None
        d["break_even_egress_note"] = "none: the split costs more even with free egress"
    elif be == 0:
        d["break_even_egress_note"] = (f"0: with free egress the split costs the same as {result.best_single_site}; "
                                       "more at any price")
    return json_safe(d)


def _items_table(result: SplitResult, rows: list[dict]) -> Table:
    numbers = ("quantity", "unit price USD", "USD/day")
    t = table(f"{result.spec.model.name}: line items per day", ("option", "category", "label", "tier", "quantity",
              "unit", "unit price USD", "USD/day", "in total"), right=lambda c: c in numbers, fold=False)
    for r in rows:
        t.add_row(r["option"], r["category"], r["label"], r["tier"], f"{r['quantity_per_day']:,.2f}", r["unit"],
                  f"{r['unit_price_usd']:.4f}", f"{r['amount_usd_per_day']:,.2f}", "yes" if r["in_total"] else "no")
    return t


def _options_table(result: SplitResult) -> Table:
    t = table("Options side by side", ("option", "sites", "GPUs", "USD/day", "USD/month", "GPU USD/day",
              "egress USD/day", "USD/request", "USD/1M in", "USD/1M out", "TTFT added s", "TTFT p95 s", "SLO"),
              fold=False)
    for name, o in result.options.items():
        led = o.ledger
        t.add_row(name, ", ".join(f"{p.role}@{p.site}" for p in o.pools),
                  " + ".join(f"{p.replicas}×{p.tp}" for p in o.pools), f"{led.total_usd_per_day:,.2f}",
                  f"{led.total_usd_per_month:,.0f}", f"{led.gpu_usd_per_day:,.2f}", f"{led.egress_usd_per_day:,.2f}",
                  f"{led.usd_per_request:.5f}", f"{led.usd_per_1m_input_tokens:.3f}",
                  f"{led.usd_per_1m_output_tokens:.3f}", f"{o.ttft_added_s:.3f}", f"{o.ttft_p95_s:.3f}",
                  "ok" if o.slo_ok else "FAILS")
    return t


def _break_even_text(result: SplitResult) -> str:
    be = result.break_even_egress_usd_per_gb
    if be is None:
        return f"n/a ({result.break_even_egress_note})" if result.break_even_egress_note else "n/a"
    if be < 0:
        return "none (the split costs more even with free egress)"
    if be == 0:
        return f"none (with free egress the split costs the same as {result.best_single_site}; more at any price)"
    return f"{be:.5f} USD/GB"


def _print_split(result: SplitResult, fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(_split_json(result), indent=2))
        return
    rows = _line_items(result)
    if fmt == "csv":
        click.echo(rows_csv(rows), nl=False)
        return
    con = stdout_console(160)
    con.print(_items_table(result, rows))
    con.print(_options_table(result))
    con.print(f"Break-even cross-site egress: {_break_even_text(result)}; "
              f"prompt length: {result.break_even_note}")
    for o in result.options.values():
        if o.note:
            con.print(f"{o.name}: {o.note}")
        elif o.sizing:
            con.print(f"Sizing: {o.sizing}")
    con.print(f"Verdict: {result.verdict}")


@click.group("ledger")
def ledger() -> None:
    """Cost ledgers: line items per day and month (GPU-hours, egress by route class and tier, energy)."""


@ledger.command("split")
@split_design_options()
@format_option(detail=SPLIT_FORMATS_HELP)
@xlsx_option("the three options")
@click.option("--csv-out", type=click.Path(dir_okay=False), default=None, help="Also write the line items as CSV.")
@click.option("--no-prompt-break-even", is_flag=True, help="Skip the (slower) prompt-length break-even search.")
def split_cmd(fmt: str, xlsx: str | None, csv_out: str | None, no_prompt_break_even: bool, **kw) -> None:
    """Compare colocated, disaggregated in one site, and prefill-here/decode-there on the same demand."""

    outputs = {"--xlsx": xlsx, "--csv-out": csv_out}
    claim_outputs(outputs)  # checked and locked before the work
    spec = make_spec(split_options(kw))
    result = compare(spec, prompt_break_even=not no_prompt_break_even)
    with output_files(outputs) as tmp:  # all of them or none
        if xlsx:
            build_split_workbook(result, _workbook_scenarios(spec)).save(tmp["--xlsx"])
        if csv_out:
            tmp["--csv-out"].write_text(rows_csv(_line_items(result)))
    _print_split(result, fmt)


@ledger.command("whatif")
@split_design_options()
@vary_option(SWEEP_VARIABLES)
@fanout_options("the cells", workers=default_workers())
@format_option()
@out_option("the table as CSV")
@plot_option(PLOT_HELP)
@max_cells_option(MAX_GRID_CELLS)
def whatif_cmd(vary: tuple[str, ...], workers: int, executor: str, ray_address: str | None, fmt: str, out: str | None,
               plot: str | None, max_cells: int, **kw) -> None:
    """Evaluate a grid of scenarios (in parallel processes, or on Ray) and print the verdict per cell."""
    run_whatif(split_options(kw), vary, workers, fmt, out, plot, max_cells, executor=executor,
               ray_address=ray_address)


def _break_even_cells(r: SpeculationRow) -> tuple[str, str]:
    """(pays at acceptance, break-even) cells of a row: the ranges of alpha where speculation pays, and the lowest
    alpha from which it pays at every higher rate, or why there is none."""
    a = r.acceptance
    if a is None:
        return "-", "not searched"
    if a.break_even is not None:
        return a.ranges_text(), f"{a.break_even:.3f}"
    return a.ranges_text(), ("none (pays at no rate)" if not a.pays_at
                             else "none (not at every higher rate)")


def _usd(x: float) -> str:
    return f"{x:,.2f}" if x != float("inf") else "-"


def _speculation_table(model: str, spec: Speculation, rows: list[SpeculationRow]) -> Table:
    t = table(f"{model}: capacity per replica without and with speculation ({spec.method}"
              + (f" {spec.draft_model}" if spec.draft_model else "") + f", k {spec.num_speculative_tokens}, "
              f"acceptance {spec.acceptance_rate:g}: {spec.tokens_per_step:.4f} tokens per step)",
              ("option", "USD/h", "req/s", "req/s spec", "ratio", "USD/1M req", "USD/1M req spec", "pays",
               "pays at acceptance", "break-even acceptance"),
              right=lambda c: c not in ("option", "pays", "pays at acceptance"), fold=False)
    for r in rows:
        t.add_row(f"{r.pool} tp {r.tp}", f"{r.usd_per_replica_hour:,.2f}", f"{r.base_req_per_s:.3f}",
                  f"{r.spec_req_per_s:.3f}", f"{r.ratio:.3f}" if r.ratio == r.ratio else "-",
                  _usd(r.base_usd_per_million_requests), _usd(r.spec_usd_per_million_requests),
                  "yes" if r.pays else "no", *_break_even_cells(r))
    return t


@ledger.command("speculation")
@click.argument("scenario", required=False)
@click.option("--model", required=True, help="The scenario's model to size (its SLO, token mix and engine).")
@click.option("--acceptance-rate", type=FiniteRange(0.0, 1.0), required=True,
              help="Share of drafted tokens the target accepts (measured for this draft, target and workload).")
@click.option("--num-speculative-tokens", "-k", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Tokens drafted per step.")
@click.option("--method", type=click.Choice(list(SPECULATION_METHODS)), default="draft_model", show_default=True,
              help="draft_model: a smaller model on the replica's GPUs; ngram: prompt lookup (no GPU work).")
@click.option("--draft-model", default=None, help="The draft model's catalog name (method draft_model).")
@click.option("--no-break-even", is_flag=True,
              help="Skip the search of where speculation pays over the acceptance rate (and its break-even rate).")
@format_option(("table", "json"))
def speculation_cmd(scenario: str | None, model: str, acceptance_rate: float, num_speculative_tokens: int,
                    method: str, draft_model: str | None, no_break_even: bool, fmt: str) -> None:
    """Does speculative decoding pay for a model's mix? Each dedicated option of MODEL in SCENARIO (the shipped
    default when omitted) sized without and with speculation, its cost per request, the ranges of the acceptance
    rate where speculation gives more capacity per dollar, and the break-even acceptance rate (the lowest rate from
    which it pays at every higher rate)."""
    spec = Speculation(acceptance_rate=acceptance_rate, num_speculative_tokens=num_speculative_tokens,
                       method=method, draft_model=draft_model)
    sc = load_scenario(scenario)
    mi, rows = speculation_whatif(sc, model, spec, break_even=not no_break_even)
    text = verdict(rows)
    if fmt == "json":
        click.echo(json.dumps(json_safe({"model": mi.model.name, "speculative": spec.as_dict(),
                                         "options": [r.to_dict() for r in rows], "verdict": text}), indent=2))
        return
    con = stdout_console(170)
    con.print(_speculation_table(mi.model.name, spec, rows))
    for r in rows:
        for side, note in (("without", r.base_note), ("with", r.spec_note)):
            if note:
                con.print(f"{r.pool} tp {r.tp} {side} speculation: {note}")
    con.print(f"Verdict: {text}")
    if not no_break_even:
        con.print(f"pays: at acceptance {spec.acceptance_rate:g}; pays at acceptance: the ranges of the acceptance "
                  f"rate where speculation gives more capacity (sampled every {ACCEPTANCE_GRID_STEP:g} and at "
                  f"{spec.acceptance_rate:g}, ends within {BREAK_EVEN_TOLERANCE:g}); break-even: the lowest rate from "
                  "which it pays at every higher rate (capacity with speculation need not grow with the rate).")
    con.print("Both sides on the calibrated roofline (measured profiles left aside); the draft runs on the "
              "replica's GPUs, so capacity per dollar moves with capacity.")
