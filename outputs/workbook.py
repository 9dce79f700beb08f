"""What-if workbooks (openpyxl): inputs a person can change, line items and totals as live formulas over them.

Sheets:

* ``Assumptions``: every input as a labeled cell (column B) with its unit (C) and source (D): demand, token lengths,
  KV bytes per token, prices per GPU-hour, egress bands (from/to GB per month in E/F), energy figures, pool sizes.
  Pool sizes (replicas, tp) come from the capacity model for the given rate: changing the rate in the sheet does
  not resize the pools (run the command again for that).
* ``Ledger``: traffic (GB per day, formulas), then one row per line item (quantity, unit price, amount per day and
  per month, whether it counts in the total, input-token share, source), then the totals per option, USD per
  request and per million input / output tokens, and the break-even cross-site egress price, all formulas.
* ``Plan`` (plans only): replicas per model, GPU type, site and window with their role (colocated, shared,
  prefill -> decode site, decode); GPU-hours and starts as formulas; a disaggregated plan's KV flows per route and
  window (req/s) with requests, KV GB and prompt GB as formulas. The Ledger has GPU lines per role and, per KV route,
  a 0-USD GB line inside a site or, across sites, band lines of each egress table's monthly volume (formulas).
* ``Scenarios`` (split only): a sweep computed in Python (values, not formulas) with the verdict per cell.
* A bar chart of the total USD per day per option (split) or per line category (plan).

Files are written to a temporary file next to the target and renamed, so no half-written workbook is left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from openpyxl import Workbook
from openpyxl.chart import BarChart, Reference
from openpyxl.styles import Font
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.worksheet import Worksheet

from fleetplan.costmodels.hardware import GPU
from fleetplan.costmodels.ledger import DAYS_PER_MONTH, SECONDS_PER_DAY, Flow, table_key
from fleetplan.costmodels.prices import EgressTable
from fleetplan.costmodels.split import SplitResult, SplitSpec
from fleetplan.datasets.calibration import idle_fraction
from fleetplan.datasets.catalog.gpus import load_gpus
from fleetplan.datasets.ledger import load_assumptions
from fleetplan.fileio import atomic_path
from fleetplan.outputs.ledger import PlanLedger, plan_ledger
from fleetplan.placement.plan import Plan, commitments, evaluate, starts
from fleetplan.placement.problem import Problem

_BOLD = Font(bold=True)
LEDGER_HEADER = ("Option", "Category", "Item", "Site", "Quantity per day", "Unit", "Unit price USD",
                 "Amount USD/day", "Amount USD/month", "In total (1/0)", "Billed USD/day", "Input share",
                 "Source")


def save_atomic(wb: Workbook, path: str | Path) -> Path:
    """Save ``wb`` to ``path`` through a temporary file in the same folder and a rename.

    Raises InputError when the folder does not exist or cannot be written.
    """

    path = Path(path)
    with atomic_path(path, field="path") as tmp:
        wb.save(tmp)
    return path


class _Inputs:
    """Writes labeled input cells on the Assumptions sheet and remembers their absolute references."""

    def __init__(self, ws: Worksheet) -> None:
        self.ws = ws
        self.row = 1
        self.ref: dict[str, str] = {}
        ws.append(("Input", "Value", "Unit", "Source", "Band from GB/month", "Band to GB/month"))
        for c in ws[1]:
            c.font = _BOLD
        ws.column_dimensions["A"].width = 58
        ws.column_dimensions["B"].width = 16
        ws.column_dimensions["C"].width = 16
        ws.column_dimensions["D"].width = 80

    def section(self, title: str) -> None:
        self.row += 2
        self.ws.cell(self.row, 1, title).font = _BOLD

    def add(self, key: str, label: str, value: float | str | None, unit: str, source: str,
            *extra: float | None) -> str:
        self.row += 1
        r = self.row
        self.ws.cell(r, 1, label)
        self.ws.cell(r, 2, value)
        self.ws.cell(r, 3, unit)
        self.ws.cell(r, 4, source)
        for i, v in enumerate(extra):
            self.ws.cell(r, 5 + i, v)
        self.ref[key] = f"Assumptions!$B${r}"
        return self.ref[key]

    def col(self, key: str, col: str) -> str:
        return self.ref[key].replace("$B$", f"${col}$")


class _LedgerSheet:
    """Appends line-item rows with formulas to the Ledger sheet."""

    def __init__(self, ws: Worksheet, days_per_month_ref: str) -> None:
        self.ws = ws
        self.dpm = days_per_month_ref
        self.rows_by_option: dict[str, list[int]] = {}
        self.rows_by_cat: dict[tuple[str, str], list[int]] = {}

    def item(self, option: str, category: str, label: str, site: str, qty: str, unit: str, price: str,
             in_total: str | int, share: str | float, source: str) -> int:
        ws = self.ws
        r = ws.max_row + 1
        vals = (option, category, label, site, qty, unit, price, f"=E{r}*G{r}", f"=H{r}*{self.dpm}",
                in_total if isinstance(in_total, int) else f"={in_total}", f"=H{r}*J{r}",
                share if not isinstance(share, str) else f"={share}", source)
        for c, v in enumerate(vals, start=1):
            ws.cell(r, c, v)
        self.rows_by_option.setdefault(option, []).append(r)
        self.rows_by_cat.setdefault((option, category), []).append(r)
        return r


def _sum(col: str, rows: Sequence[int]) -> str:
    return "(" + "+".join(f"{col}{r}" for r in rows) + ")" if rows else "0"


def _traffic_formula(flow: Flow, a: _Inputs) -> str:
    d = f"{a.ref['rate']}*{a.ref['seconds_per_day']}"
    if flow.kind == "kv":
        return f"={d}*{a.ref['kv_tokens']}*{a.ref['kv_bytes_per_token']}/1000000000"
    if flow.kind == "prompt":
        return f"={d}*{a.ref['input_tokens']}*{a.ref['text_bytes_per_token']}/1000000000"
    return f"={d}*{a.ref['output_tokens']}*{a.ref['text_bytes_per_token']}/1000000000"


def _band_qty(vol_ref: str, lo_ref: str, hi_ref: str | None, dpm: str) -> str:
    top = vol_ref if hi_ref is None else f"MIN({vol_ref},{hi_ref})"
    return f"=MAX(0,{top}-{lo_ref})/{dpm}"


def _energy_qty(a: _Inputs, key: str, gpus: str, per_day_hours: str = "24") -> str:
    tdp, idle, util = a.ref[f"{key}/tdp"], a.ref[f"{key}/idle"], a.ref[f"{key}/util"]
    return (f"={gpus}*({idle}*{tdp}+({tdp}-{idle}*{tdp})*{util})*{per_day_hours}/1000*{a.ref['pue']}")


def build_split_workbook(result: SplitResult, scenarios: Sequence[Mapping[str, object]] | None = None) -> Workbook:
    """Workbook for a :class:`fleetplan.costmodels.split.SplitResult` (module docstring for the sheets).

    ``scenarios``: rows from :func:`fleetplan.costmodels.split.scenario_row` for the Scenarios sheet (None: none).
    """
    wb = Workbook()
    wa = wb.worksheets[0]  # a new workbook holds one worksheet, the active one
    wa.title = "Assumptions"
    a = _Inputs(wa)
    _split_demand_inputs(a, result.spec)
    _split_pool_inputs(a, result)
    _split_egress_inputs(a, result)
    wl = wb.create_sheet("Ledger")
    flow_ref, vol_ref = _split_traffic(wl, a, result)
    led, cross_rows = _split_items(wl, a, result, vol_ref)
    _split_summary(wl, a, result, led, flow_ref, cross_rows)
    if scenarios:
        _scenario_sheet(wb, scenarios)
    return wb


def _split_demand_inputs(a: _Inputs, s: SplitSpec) -> None:
    """Rate, token lengths, KV and text bytes per token, and the energy figures of the split's demand."""
    a.section("Demand (steady rate all day)")
    a.add("rate", "Request rate", s.rate_req_per_s, "req/s", f"trace {s.trace}: requests / span, or given")
    a.add("seconds_per_day", "Seconds per day", SECONDS_PER_DAY, "s", "calendar")
    a.add("dpm", "Days per month", DAYS_PER_MONTH, "days", "365 / 12 (730-hour billing month)")
    a.add("input_tokens", "Prompt tokens per request (mean)", s.mix.input_tokens_mean, "tokens",
          f"trace {s.trace}")
    a.add("output_tokens", "Output tokens per request (mean)", s.mix.output_tokens_mean, "tokens",
          f"trace {s.trace}")
    a.add("kv_bytes_per_token", f"KV-cache bytes per token ({s.model.name}, {s.kv_dtype})", s.kv_bytes_per_token,
          "bytes/token", "2 × layers × KV heads × head dim × bytes per element (model config)")
    win = s.model.sliding_window_tokens
    a.add("kv_tokens", "KV-cached tokens per prompt (formula)",
          f"=MIN({a.ref['input_tokens']},{win})" if win else f"={a.ref['input_tokens']}", "tokens",
          "prompt tokens, capped by the sliding window" if win else "the prompt tokens (no sliding window)")
    la = load_assumptions()
    a.add("text_bytes_per_token", "Text bytes per token (prompts, responses)", s.text_bytes_per_token,
          "bytes/token", la["text_bytes_per_token"].source)
    a.section("Energy (cloud GPU prices include power: billed only when the flag is 1)")
    a.add("usd_per_kwh", "Electricity price", s.usd_per_kwh, "USD/kWh", la["electricity_usd_per_kwh"].source)
    a.add("pue", "Power usage effectiveness", s.pue, "ratio", la["pue"].source)
    a.add("energy_billed", "Energy billed separately (1 = yes, 0 = no)", 1 if s.energy_billed else 0, "flag",
          "choice")


def _split_pool_inputs(a: _Inputs, result: SplitResult) -> None:
    """Per option and pool: replicas, GPUs per replica, price, TDP, idle share, utilization, input-token share."""
    margin = result.spec.margin
    for name, o in result.options.items():
        a.section(f"Option {name}: GPU pools (sizes from the capacity model at the rate above)")
        for p in o.pools:
            k = f"{name}/{p.role}"
            a.add(f"{k}/replicas", f"{name} {p.role} replicas at {p.site}", p.replicas, "replicas",
                  f"capacity model: ceil(rate / ({p.capacity_req_per_s:.4g} req/s × (1 − margin {margin:g})))")
            a.add(f"{k}/tp", f"{name} {p.role} GPUs per replica ({p.gpu})", p.tp, "GPUs",
                  "fewest GPUs meeting the SLO")
            a.add(f"{k}/price", f"{name} {p.role} price per GPU-hour ({p.gpu} at {p.site}, {p.price.pricing_model})",
                  float(p.price.usd_per_gpu_hour), "USD/GPU-hour", p.price.source)
            a.add(f"{k}/tdp", f"{name} {p.role} board power per GPU (TDP)", p.tdp_w or 0, "W", "GPU catalog")
            a.add(f"{k}/idle", f"{name} {p.role} idle power share of TDP", p.idle, "fraction",
                  "datasets/data/calibration/power.csv")
            a.add(f"{k}/util", f"{name} {p.role} utilization", p.utilization, "fraction",
                  "rate / (replicas × capacity)")
            a.add(f"{k}/share", f"{name} {p.role} share of cost attributed to input tokens", p.input_share,
                  "fraction", "prefill 1, decode 0, colocated the prefill share of busy time")


def _split_egress_inputs(a: _Inputs, result: SplitResult) -> None:
    """The bands (from/to GB per month, USD per GB) of every egress table the options' flows use."""
    tables: dict[tuple[str, str, str], EgressTable] = {}
    for o in result.options.values():
        for f in o.flows:
            tables.setdefault(table_key(f.table), f.table)
    a.section("Egress prices (USD per GB moved inside each monthly volume band)")
    for key, t in tables.items():
        for j, band in enumerate(t.tiers):
            a.add(f"eg/{key}/{j}", f"egress {key[0]} {key[1]} ({key[2]}) band {j + 1}", band.usd_per_gb, "USD/GB",
                  t.source, band.from_gb, band.to_gb)


def _split_traffic(wl: Worksheet, a: _Inputs, result: SplitResult
                   ) -> tuple[dict[tuple[str, int], str], dict[tuple[str, tuple], tuple[str, str]]]:
    """The Ledger's traffic rows: GB per day per flow, then per option and egress table the monthly volume and its
    input share (formulas). Returns ({(option, flow index): GB cell}, {(option, table): (volume, share cells)})."""
    wl.append(("Traffic", "", "Flow", "Route", "GB per day"))
    for head in wl[1]:
        head.font = _BOLD
    flow_ref: dict[tuple[str, int], str] = {}
    for name, o in result.options.items():
        for i, f in enumerate(o.flows):
            r = wl.max_row + 1
            for c, v in enumerate((name, "traffic", f"{f.kind}: {f.src} -> {f.dst}", f"{f.table.cloud} "
                                   f"{f.route_class}", _traffic_formula(f, a)), start=1):
                wl.cell(r, c, v)
            flow_ref[(name, i)] = f"$E${r}"
    vol_ref: dict[tuple[str, tuple], tuple[str, str]] = {}
    for name, o in result.options.items():
        groups: dict[tuple, list[int]] = {}
        for i, f in enumerate(o.flows):
            groups.setdefault(table_key(f.table), []).append(i)
        for key, idx in groups.items():
            r = wl.max_row + 1
            gb = [flow_ref[(name, i)] for i in idx]
            ins = [flow_ref[(name, i)] for i in idx if o.flows[i].input_share > 0]
            for c, v in enumerate((name, "monthly volume", f"{key[0]} {key[1]} ({key[2]})", "GB per month",
                                   "=(" + "+".join(gb) + f")*{a.ref['dpm']}",
                                   f"=IF(E{r}>0,({'+'.join(ins) if ins else '0'})/({'+'.join(gb)}),0)"), start=1):
                wl.cell(r, c, v)
            vol_ref[(name, key)] = (f"$E${r}", f"$F${r}")
    wl.cell(wl.max_row, 7, "(F: input share of the volume)")
    return flow_ref, vol_ref


def _split_items(wl: Worksheet, a: _Inputs, result: SplitResult,
                 vol_ref: dict[tuple[str, tuple], tuple[str, str]]) -> tuple[_LedgerSheet, dict[str, list[int]]]:
    """The line items per option: GPU-hours per pool, egress band by band per table, energy per pool. Returns the
    sheet's rows and {option: rows of its cross-site-only (KV and prompt) egress lines}."""
    la = load_assumptions()
    wl.append(())
    hr = wl.max_row + 1
    for c, h in enumerate(LEDGER_HEADER, start=1):
        wl.cell(hr, c, h).font = _BOLD
    led = _LedgerSheet(wl, a.ref["dpm"])
    cross_rows: dict[str, list[int]] = {}
    for name, o in result.options.items():
        for p in o.pools:
            k = f"{name}/{p.role}"
            led.item(name, "gpu", f"{p.role} GPU-hours ({p.gpu})", p.site,
                     f"={a.ref[k + '/replicas']}*{a.ref[k + '/tp']}*24", "GPU-hour", f"={a.ref[k + '/price']}", 1,
                     a.ref[k + "/share"], p.price.source)
        flows_by_table: dict[tuple[str, str, str], list[Flow]] = {}
        for f in o.flows:
            flows_by_table.setdefault(table_key(f.table), []).append(f)
        for key, fl in flows_by_table.items():
            rows = _split_egress_items(led, a, name, key, fl, vol_ref[(name, key)])
            if all(f.kind in ("kv", "prompt") for f in fl):
                cross_rows.setdefault(name, []).extend(rows)
        for p in o.pools:
            k = f"{name}/{p.role}"
            gpus = f"{a.ref[k + '/replicas']}*{a.ref[k + '/tp']}"
            led.item(name, "energy", f"{p.role} GPU energy", p.site, _energy_qty(a, k, gpus), "kWh",
                     f"={a.ref['usd_per_kwh']}", a.ref["energy_billed"], a.ref[k + "/share"],
                     la["electricity_usd_per_kwh"].source)
    return led, cross_rows


def _split_egress_items(led: _LedgerSheet, a: _Inputs, name: str, key: tuple[str, str, str], fl: list[Flow],
                        vol: tuple[str, str]) -> list[int]:
    """One line per band of the egress table ``key`` for the flows ``fl`` of option ``name`` (``vol``: the cells
    of their monthly volume and its input share); returns the lines' rows."""
    t = fl[0].table
    volume, share = vol
    kinds = "+".join(sorted({f.kind for f in fl}))
    rows = []
    for j, band in enumerate(t.tiers):
        rk = f"eg/{key}/{j}"
        hi = None if band.to_gb is None else a.col(rk, "F")
        rows.append(led.item(name, "egress", f"{kinds} egress {key[0]} {key[1]} band {j + 1}", fl[0].src,
                             _band_qty(volume, a.col(rk, "E"), hi, a.ref["dpm"]), "GB", f"={a.ref[rk]}", 1, share,
                             t.source))
    return rows


def _split_summary(wl: Worksheet, a: _Inputs, result: SplitResult, led: _LedgerSheet,
                   flow_ref: dict[tuple[str, int], str], cross_rows: dict[str, list[int]]) -> None:
    """Totals per option (per day and month, by category, per request and per million tokens, cross-site egress),
    the break-even cross-site egress price and the split's savings (formulas), the verdict, widths and a chart."""
    wl.append(())
    sr = wl.max_row + 1
    heads = ("Summary", "Total USD/day", "Total USD/month", "GPU USD/day", "Egress USD/day", "Energy USD/day",
             "USD per request", "USD per 1M input tokens", "USD per 1M output tokens", "Cross-site egress USD/day")
    for c, h in enumerate(heads, start=1):
        wl.cell(sr, c, h).font = _BOLD
    total_ref = {}
    for i, name in enumerate(result.options):
        total_ref[name] = r = sr + 1 + i
        _split_total_row(wl, a, led, name, r, cross_rows.get(name, []))
    r = sr + 1 + len(result.options)
    if "split" in total_ref and cross_rows.get("split"):
        rs, rc, rd = total_ref["split"], total_ref["colocated"], total_ref["disaggregated"]
        cross_gb = "+".join(flow_ref[("split", i)] for i, f in enumerate(result.options["split"].flows)
                            if f.kind in ("kv", "prompt"))
        wl.cell(r + 1, 1, "Break-even cross-site egress USD/GB (flat)").font = _BOLD
        wl.cell(r + 1, 2, f"=(MIN(B{rc},B{rd})-(B{rs}-J{rs}))/({cross_gb})")
        wl.cell(r + 2, 1, "Split saves USD/day (best single site minus split)").font = _BOLD
        wl.cell(r + 2, 2, f"=MIN(B{rc},B{rd})-B{rs}")
    wl.cell(r + 3, 1, "Verdict (Python, at the inputs as written)").font = _BOLD
    wl.cell(r + 3, 2, result.verdict)
    for col, w in zip("ABCDEFGHIJKLM", (16, 10, 44, 16, 16, 10, 14, 16, 16, 12, 16, 10, 60), strict=True):
        wl.column_dimensions[col].width = w
    chart = BarChart()
    chart.title = "Total cost by option (USD/day)"
    chart.y_axis.title = "USD/day"
    chart.add_data(Reference(wl, min_col=2, min_row=sr, max_row=sr + len(result.options)), titles_from_data=True)
    chart.set_categories(Reference(wl, min_col=1, min_row=sr + 1, max_row=sr + len(result.options)))
    wl.add_chart(chart, f"O{sr}")
    wl.freeze_panes = "A2"


def _split_total_row(wl: Worksheet, a: _Inputs, led: _LedgerSheet, name: str, r: int, cross: list[int]) -> None:
    """Row ``r`` of the summary: option ``name``'s totals as formulas over its line items."""
    rows = led.rows_by_option[name]
    req = f"({a.ref['rate']}*{a.ref['seconds_per_day']})"
    inp = "(" + "+".join(f"K{x}*L{x}" for x in rows) + ")"
    cells = (name, f"={_sum('K', rows)}", f"=B{r}*{a.ref['dpm']}",
             f"={_sum('K', led.rows_by_cat.get((name, 'gpu'), []))}",
             f"={_sum('K', led.rows_by_cat.get((name, 'egress'), []))}",
             f"={_sum('H', led.rows_by_cat.get((name, 'energy'), []))}", f"=B{r}/{req}",
             f"={inp}/({req}*{a.ref['input_tokens']})*1000000",
             f"=(B{r}-{inp})/({req}*{a.ref['output_tokens']})*1000000", f"={_sum('K', cross)}")
    for c, v in enumerate(cells, start=1):
        wl.cell(r, c, v)


def _scenario_sheet(wb: Workbook, rows: Sequence[Mapping[str, object]]) -> None:
    ws = wb.create_sheet("Scenarios")
    ws.cell(1, 1, "Sweep computed in Python (values, not formulas): each row re-sizes the pools with the "
                  "capacity model for its inputs.")
    cols = list(rows[0])
    for c, h in enumerate(cols, start=1):
        ws.cell(2, c, h).font = _BOLD
        ws.column_dimensions[get_column_letter(c)].width = max(14, len(h) + 2)
    for i, row in enumerate(rows, start=3):
        for c, h in enumerate(cols, start=1):
            ws.cell(i, c, row[h])


def write_split_workbook(path: str | Path, result: SplitResult,
                         scenarios: Sequence[Mapping[str, object]] | None = None) -> Path:
    """Write :func:`build_split_workbook` to ``path`` atomically. Raises InputError when it cannot be written."""
    return save_atomic(build_split_workbook(result, scenarios), path)


# ---- plans ----------------------------------------------------------------------------------------------------

def build_plan_workbook(problem: Problem, plan: Plan, *, gpus: dict[str, GPU] | None = None,
                        energy_billed: bool = False, usd_per_kwh: float | None = None,
                        pue: float | None = None) -> Workbook:
    """Workbook for a plan: Assumptions (prices, rates, start costs, energy), Plan (replicas per model, GPU type,
    site and window; GPU-hours and starts as formulas), Ledger (per-day lines and totals as formulas) and a chart.

    ``gpus``, ``energy_billed``, ``usd_per_kwh`` and ``pue`` go to :func:`fleetplan.outputs.ledger.plan_ledger`.
    The totals equal the plan ledger's (and so :func:`fleetplan.placement.plan.evaluate`'s, per day).
    """

    pl = plan_ledger(problem, plan, gpus=gpus, energy_billed=energy_billed, usd_per_kwh=usd_per_kwh, pue=pue)
    book = _PlanBook(problem, plan, pl)
    book.assume_horizon_and_demand()
    book.assume_prices()
    book.assume_energy(energy_billed, pue, load_gpus() if gpus is None else gpus)
    book.assume_starts()
    book.assume_kv_routes()
    book.assume_served_away()
    book.plan_sheet()
    book.ledger_sheet()
    return book.wb


class _PlanBook:
    """The plan workbook as it is built, sheet by sheet in the order of the methods' calls in
    :func:`build_plan_workbook` (each appends rows, so the order is the layout): the problem's lookups, the
    Assumptions cells (:class:`_Inputs`) and the Plan sheet's references the Ledger's formulas use."""

    def __init__(self, problem: Problem, plan: Plan, pl: PlanLedger) -> None:
        self.problem, self.plan, self.pl = problem, plan, pl
        self.la = load_assumptions()
        self.pools = problem.pool_by_id
        self.opts = problem.option_by_key
        self.pd_opts = problem.pd_option_by_key
        self.routes = problem.kv_route_by_key
        self.wb = Workbook()
        wa = self.wb.worksheets[0]  # a new workbook holds one worksheet, the active one
        wa.title = "Assumptions"
        self.a = _Inputs(wa)
        items = pl.ledger.items
        self.energy = {i.pool: i for i in items if i.category == "energy"}
        self.pools_used = sorted({i.pool for i in items if i.category == "gpu" and i.unit == "GPU-hour"})
        self.committed = {pid: c for pid, c in sorted(commitments(problem, plan).items()) if c}
        self.kv_tables: dict[tuple[str, str, str], EgressTable] = {}
        # Plan sheet: columns A-G describe a row, then one column per window, then GPU-hours, starts, role, key.
        self.W = W = problem.n_windows
        self.first_w, self.last_w = get_column_letter(8), get_column_letter(7 + W)
        self.gh_col, self.st_col = get_column_letter(8 + W), get_column_letter(9 + W)
        self.key_col = get_column_letter(11 + W)
        self.start_ref: dict[object, str] = {}
        self.flow_rows: dict[tuple[str, str, str], int] = {}
        self.n_plan = 0

    # -- Assumptions ------------------------------------------------------------------------------------------

    def assume_horizon_and_demand(self) -> None:
        a, problem = self.a, self.problem
        a.section("Horizon")
        a.add("window_h", "Window length", problem.window_hours, "hours", "problem")
        a.add("day_factor", "Days in the horizon", self.pl.day_factor, "days", "n_windows × window hours / 24")
        a.add("dpm", "Days per month", DAYS_PER_MONTH, "days", "365 / 12 (730-hour billing month)")
        a.section("Demand")
        for m in problem.models:
            a.add(f"requests/{m.name}", f"{m.name} requests over the horizon", sum(m.demand_req_per_s)
                  * problem.window_length_s, "requests", "problem demand: Σ over windows of rate × window length")

    def assume_prices(self) -> None:
        """The price per GPU-hour of every pool a GPU line uses, and the committed GPUs and rate of each
        commitment."""
        a = self.a
        a.section("GPU prices per pool")
        for pid in self.pools_used:
            p = self.pools[pid]
            named = f" [{p.name}]" if p.name else ""
            a.add(f"price/{pid}", f"{p.gpu} at {p.site}{named} ({p.pricing_model})", p.usd_per_gpu_hour,
                  "USD/GPU-hour", p.price_source or "problem pool price")
        for pid, c in self.committed.items():
            p = self.pools[pid]
            a.add(f"commit/{pid}", f"{p.label} GPUs committed (paid every hour)", c, "GPUs", "plan commitment")
            a.add(f"commit_price/{pid}", f"{p.label} committed rate ({p.pricing_model})",
                  p.committed_usd_per_gpu_hour, "USD/committed GPU-hour", p.price_source or "problem pool price")

    def assume_energy(self, energy_billed: bool, pue: float | None, gpus: dict[str, GPU]) -> None:
        """Electricity price, PUE, whether energy is billed, and per pool with an energy line its GPU's TDP, idle
        share and the plan's mean utilization."""
        a, la, energy = self.a, self.la, self.energy
        a.section("Energy (cloud GPU prices include power: billed only when the flag is 1)")
        a.add("usd_per_kwh", "Electricity price", energy[next(iter(energy))].unit_price_usd if energy else
              la["electricity_usd_per_kwh"].value, "USD/kWh", la["electricity_usd_per_kwh"].source)
        a.add("pue", "Power usage effectiveness", pue or la["pue"].value, "ratio", la["pue"].source)
        a.add("energy_billed", "Energy billed separately (1 = yes, 0 = no)", 1 if energy_billed else 0,
              "flag", "choice")
        util = evaluate(self.problem, self.plan).mean_utilization
        for pid in energy:
            g = gpus[self.pools[pid].gpu]
            a.add(f"{pid}/tdp", f"{pid} board power per GPU (TDP)", g.tdp_w, "W", "GPU catalog")
            a.add(f"{pid}/idle", f"{pid} idle power share of TDP", idle_fraction(g.name), "fraction",
                  "datasets/data/calibration/power.csv")
            a.add(f"{pid}/util", f"{pid} utilization", util, "fraction", "plan mean utilization (evaluate)")

    def assume_starts(self) -> None:
        """The start cost of every replica option (colocated, then prefill/decode) that has one."""
        a, plan = self.a, self.plan
        a.section("Replica start costs")
        for key in sorted(plan.replicas):
            if self.opts[key].start_cost_usd > 0:
                a.add(f"start/{key}", f"start {key[0]} on {key[1]} tp{key[2]} pp{key[3]}",
                      self.opts[key].start_cost_usd, "USD/start", "problem option")
        for pkey in sorted(plan.pd_replicas):
            o = self.pd_opts[pkey]
            if o.start_cost_usd > 0:
                a.add(f"start/{pkey}", f"start {o.role} {o.model} on {o.pool} tp{o.tp}", o.start_cost_usd,
                      "USD/start", "problem option")

    def assume_kv_routes(self) -> None:
        """KV-cache and prompt bytes per request of every KV route the plan uses, and the egress bands of the
        tables that price them."""
        a, plan = self.a, self.plan
        if plan.kv_flows_req_per_s:
            a.section("KV routes of the prefill/decode pools (bytes per request)")
            for rkey in sorted(plan.kv_flows_req_per_s):
                rt = self.routes[rkey]
                a.add(f"kvb/{rkey}", f"KV-cache bytes per request {rt.model} {rt.prefill_site} -> {rt.decode_site}",
                      rt.kv_bytes_per_request, "bytes", "KV-cached tokens of a mean prompt × KV bytes per token")
                a.add(f"pb/{rkey}", f"prompt text bytes per request {rt.model} {rt.decode_site} -> "
                      f"{rt.prefill_site}", rt.prompt_bytes_per_request, "bytes",
                      "mean prompt tokens × text bytes per token")
                for t in (rt.kv_table, rt.prompt_table):
                    if t is not None:
                        self.kv_tables.setdefault(table_key(t), t)
        if self.kv_tables:
            a.section("KV and prompt egress prices across sites (USD per GB inside each monthly volume band)")
            for tk, t in self.kv_tables.items():
                for j, band in enumerate(t.tiers):
                    a.add(f"eg/{tk}/{j}", f"egress {tk[0]} {tk[1]} ({tk[2]}) band {j + 1}", band.usd_per_gb,
                          "USD/GB", t.source, band.from_gb, band.to_gb)

    def assume_served_away(self) -> None:
        """GB of requests served away from their origin per (origin, site), and the egress price of each."""
        a = self.a
        a.section("Traffic served away from its origin (routed from the plan's capacity)")
        for (src, dst), gb in sorted(self.pl.egress_gb.items()):
            a.add(f"gb/{src}/{dst}", f"GB over the horizon {src} -> {dst}", gb, "GB", "plan routing (origin first)")
            a.add(f"rate/{src}/{dst}", f"egress price {src} -> {dst}", self.problem.egress_rate(src, dst), "USD/GB",
                  "problem egress table")

    # -- Plan -------------------------------------------------------------------------------------------------

    def _replica_row(self, wp: Worksheet, vals: list, role: str, kind: str, counts_start: bool) -> int:
        """One row of the Plan sheet: ``vals`` (columns A-G and the counts per window), GPU-hours and starts as
        formulas (starts counted around the day when ``counts_start``), the role, and the key 'pool kind' the
        Ledger's SUMIFs select on."""
        W = self.W
        r = wp.max_row + 1
        for c, v in enumerate(vals, start=1):
            wp.cell(r, c, v)
        wp.cell(r, 8 + W, f"=SUM({self.first_w}{r}:{self.last_w}{r})*G{r}*{self.a.ref['window_h']}")
        if W > 1 and counts_start:
            terms = [f"MAX(0,{get_column_letter(8 + w)}{r}-{get_column_letter(8 + (w - 1) % W)}{r})"
                     for w in range(W)]
            wp.cell(r, 9 + W, "=" + "+".join(terms))
        else:
            wp.cell(r, 9 + W, 0)
        wp.cell(r, 10 + W, role)
        wp.cell(r, 11 + W, f"{vals[3]} {kind}")
        return r

    def plan_sheet(self) -> None:
        """Replicas per model, GPU type, site and window with their role (colocated, prefill -> decode site,
        decode, shared), then the KV flows of a disaggregated plan."""
        plan, pools, W = self.plan, self.pools, self.W
        wp = self.wb.create_sheet("Plan")
        wp.append(["Model", "Site", "GPU", "Pool", "tp", "pp", "GPUs per replica"] + [f"w{w}" for w in range(W)]
                  + ["GPU-hours", "Starts", "Role", "Pool and role"])
        for c in wp[1]:
            c.font = _BOLD
        for key in sorted(plan.replicas):
            o = self.opts[key]
            p = pools[o.pool]
            r = self._replica_row(wp, [key[0], p.site, p.gpu, o.pool, o.tp, o.pp, o.gpus] + list(plan.replicas[key]),
                                  "colocated", "colocated", True)
            self.start_ref[key] = f"Plan!${self.st_col}${r}"
        for pkey in sorted(plan.pd_replicas):  # prefill and decode pools, with their role
            o = self.pd_opts[pkey]
            p = pools[o.pool]
            role = f"prefill -> {o.decode_site}" if o.role == "prefill" else "decode"
            r = self._replica_row(wp, [o.model, p.site, p.gpu, o.pool, o.tp, 1, o.gpus] + list(plan.pd_replicas[pkey]),
                                  role, o.role, True)
            self.start_ref[pkey] = f"Plan!${self.st_col}${r}"
        for shared in plan.shared:
            p = pools[shared.pool]
            self._replica_row(wp, ["shared: " + "+".join(shared.models), p.site, p.gpu, shared.pool, 1, 1, 1]
                              + [1] * W, "shared", "shared", False)
        self.n_plan = wp.max_row
        if plan.kv_flows_req_per_s:
            self._kv_flow_rows(wp)

    def _kv_flow_rows(self, wp: Worksheet) -> None:
        """Under the replicas: req/s per KV route and window, with requests, KV GB and prompt GB as formulas."""
        W, a = self.W, self.a
        wp.append(())
        hr = wp.max_row + 1
        kv_head = ["KV flow (req/s)", "Prefill site", "Decode site", "Link", "Route class", "", ""] + [
            f"w{w}" for w in range(W)] + ["Requests", "KV GB", "Prompt GB"]
        for c, h in enumerate(kv_head, start=1):
            wp.cell(hr, c, h).font = _BOLD
        for rkey in sorted(self.plan.kv_flows_req_per_s):
            rt = self.routes[rkey]
            r = wp.max_row + 1
            vals = [rt.model, rt.prefill_site, rt.decode_site, rt.link, rt.route_class or "same site", "", ""] + list(
                self.plan.kv_flows_req_per_s[rkey])
            for c, v in enumerate(vals, start=1):
                wp.cell(r, c, v)
            wp.cell(r, 8 + W, f"=SUM({self.first_w}{r}:{self.last_w}{r})*{a.ref['window_h']}*3600")
            wp.cell(r, 9 + W, f"={self.gh_col}{r}*{a.ref[f'kvb/{rkey}']}/1000000000")
            wp.cell(r, 10 + W, f"={self.gh_col}{r}*{a.ref[f'pb/{rkey}']}/1000000000")
            self.flow_rows[rkey] = r

    # -- Ledger -----------------------------------------------------------------------------------------------

    def ledger_sheet(self) -> None:
        """The line items per day as formulas over the Assumptions and the Plan sheet, the totals and a chart."""
        wl = self.wb.create_sheet("Ledger")
        for c, h in enumerate(LEDGER_HEADER, start=1):
            wl.cell(1, c, h).font = _BOLD
        ls = _LedgerSheet(wl, self.a.ref["dpm"])
        gh_of = self._ledger_gpu(ls)
        self._ledger_commitments(ls)
        self._ledger_starts(ls)
        self._ledger_kv(ls)
        self._ledger_served_away(ls)
        self._ledger_energy(ls, gh_of)
        self._ledger_summary(wl, ls)

    def _gh_sum(self, pid: str, kinds: tuple[str, ...]) -> str:
        """GPU-hours over the horizon of the Plan rows of pool ``pid`` with a kind among ``kinds`` (SUMIFs)."""
        n, key_col, gh_col = self.n_plan, self.key_col, self.gh_col
        return "(" + "+".join(f"SUMIF(Plan!${key_col}$2:${key_col}${n},\"{pid} {k}\",Plan!${gh_col}$2:"
                              f"${gh_col}${n})" for k in kinds) + ")"

    def _ledger_gpu(self, ls: _LedgerSheet) -> dict[str, str]:
        """GPU-hour lines per pool (colocated and shared; prefill and decode on lines of their own); returns
        {pool: its GPU-hours over the horizon, a formula} for the energy lines."""
        plan, pools, a, n, gh_col = self.plan, self.pools, self.a, self.n_plan, self.gh_col
        dfac = a.ref["day_factor"]
        gh_of = {}
        pd_kinds = {(pools[k[2]].id, k[1]) for k in plan.pd_replicas}
        for pid in self.pools_used:
            p = pools[pid]
            gh_of[pid] = f"SUMIF(Plan!$D$2:$D${n},\"{pid}\",Plan!${gh_col}$2:${gh_col}${n})"
            named = f" [{p.name}]" if p.name else ""
            source = p.price_source or "problem pool price"
            if any(k[1] == pid for k in plan.replicas) or any(g.pool == pid for g in plan.shared):
                ls.item("plan", "gpu", f"GPU-hours {p.gpu}{named}", p.site,
                        f"={self._gh_sum(pid, ('colocated', 'shared'))}/{dfac}", "GPU-hour",
                        f"={a.ref['price/' + pid]}", 1, 0.0, source)
            for role in ("prefill", "decode"):
                if (pid, role) in pd_kinds:
                    ls.item("plan", "gpu", f"{role} GPU-hours {p.gpu}{named}", p.site,
                            f"={self._gh_sum(pid, (role,))}/{dfac}", "GPU-hour", f"={a.ref['price/' + pid]}", 1,
                            1.0 if role == "prefill" else 0.0, source)
        return gh_of

    def _ledger_commitments(self, ls: _LedgerSheet) -> None:
        a = self.a
        for pid in self.committed:
            p = self.pools[pid]
            ls.item("plan", "gpu", f"committed GPUs {p.gpu} [{pid}]", p.site, f"={a.ref['commit/' + pid]}*24",
                    "committed GPU-hour", f"={a.ref['commit_price/' + pid]}", 1, 0.0,
                    p.price_source or "problem pool price")

    def _ledger_starts(self, ls: _LedgerSheet) -> None:
        """Replica starts per option with a start cost: the Plan sheet's starts over the days of the horizon."""
        a, plan, pools = self.a, self.plan, self.pools
        dfac = a.ref["day_factor"]
        for key in sorted(plan.replicas):
            if f"start/{key}" in a.ref and self.pl.starts.get(key):
                ls.item("plan", "start", f"starts {key[0]} on {key[1]} tp{key[2]} pp{key[3]}", pools[key[1]].site,
                        f"={self.start_ref[key]}/{dfac}", "start", f"={a.ref['start/' + str(key)]}", 1, 0.0,
                        "problem option")
        for pkey in sorted(plan.pd_replicas):
            o = self.pd_opts[pkey]
            if f"start/{pkey}" in a.ref and starts(plan.pd_replicas[pkey]):
                ls.item("plan", "start", f"{o.role} starts {o.model} on {o.pool} tp{o.tp}", pools[o.pool].site,
                        f"={self.start_ref[pkey]}/{dfac}", "start", f"={a.ref['start/' + str(pkey)]}", 1, 0.0,
                        "problem option")

    def _ledger_kv(self, ls: _LedgerSheet) -> None:
        """KV caches (prefill -> decode) and prompts (decode -> prefill) of the disaggregated routes: inside a site
        a 0-USD line of its GB; across sites each egress table's monthly volume (a formula over the Plan sheet's
        flows, on the Assumptions sheet) priced band by band, as the clouds bill it."""
        a, W = self.a, self.W
        dfac = a.ref["day_factor"]
        gb_col = {"kv": get_column_letter(9 + W), "prompt": get_column_letter(10 + W)}
        volume: dict[tuple[str, str, str], list[str]] = {}
        for rkey, r in sorted(self.flow_rows.items()):
            rt = self.routes[rkey]
            for kind, table in (("kv", rt.kv_table), ("prompt", rt.prompt_table)):
                src, dst = (rt.prefill_site, rt.decode_site) if kind == "kv" else (rt.decode_site, rt.prefill_site)
                gb_ref = f"Plan!${gb_col[kind]}${r}"
                if table is None:
                    ls.item("plan", "egress", f"{kind} {rt.model} {src} -> {dst} over {rt.link} (no egress)", src,
                            f"={gb_ref}/{dfac}", "GB", "=0", 1, 1.0, "inside one site")
                else:
                    volume.setdefault(table_key(table), []).append(gb_ref)
        if volume:
            a.section("KV and prompt egress volumes (formulas over the Plan sheet's KV flows)")
        for tk, gbs in volume.items():
            t = self.kv_tables[tk]
            vol = a.add(f"vol/{tk}", f"KV and prompt egress per month, {tk[0]} {tk[1]} ({tk[2]})",
                        f"=({'+'.join(gbs)})*{a.ref['dpm']}/{dfac}", "GB/month",
                        "formula: the routes' GB over the horizon (Plan sheet) × days per month / days in the horizon")
            for j, band in enumerate(t.tiers):
                rk = f"eg/{tk}/{j}"
                hi = None if band.to_gb is None else a.col(rk, "F")
                ls.item("plan", "egress", f"kv+prompt egress {tk[0]} {tk[1]} band {j + 1}", tk[0],
                        _band_qty(vol, a.col(rk, "E"), hi, a.ref["dpm"]), "GB", f"={a.ref[rk]}", 1, 1.0, t.source)

    def _ledger_served_away(self, ls: _LedgerSheet) -> None:
        a = self.a
        dfac = a.ref["day_factor"]
        for (src, dst) in sorted(self.pl.egress_gb):
            ls.item("plan", "egress", f"requests served away {src} -> {dst}", dst,
                    f"={a.ref[f'gb/{src}/{dst}']}/{dfac}", "GB", f"={a.ref[f'rate/{src}/{dst}']}", 1, 0.0,
                    "problem egress table")

    def _ledger_energy(self, ls: _LedgerSheet, gh_of: dict[str, str]) -> None:
        a = self.a
        dfac = a.ref["day_factor"]
        for pid in self.energy:
            ls.item("plan", "energy", f"energy {pid}", self.pools[pid].site,
                    _energy_qty(a, pid, f"{gh_of[pid]}/{dfac}", per_day_hours="1"), "kWh",
                    f"={a.ref['usd_per_kwh']}", a.ref["energy_billed"], 0.0, self.la["electricity_usd_per_kwh"].source)

    def _ledger_summary(self, wl: Worksheet, ls: _LedgerSheet) -> None:
        """Totals per day and month, by category, USD per request; a bar chart of the categories; column widths."""
        a = self.a
        rows = ls.rows_by_option.get("plan", [])
        sr = wl.max_row + 2
        heads = ("Summary", "Total USD/day", "Total USD/month", "GPU USD/day", "Start USD/day", "Egress USD/day",
                 "Energy USD/day", "USD per request")
        for c, h in enumerate(heads, start=1):
            wl.cell(sr, c, h).font = _BOLD
        r = sr + 1
        wl.cell(r, 1, "plan")
        wl.cell(r, 2, f"={_sum('K', rows)}")
        wl.cell(r, 3, f"=B{r}*{a.ref['dpm']}")
        for col, cat in (("D", "gpu"), ("E", "start"), ("F", "egress")):
            wl[f"{col}{r}"] = f"={_sum('K', ls.rows_by_cat.get(('plan', cat), []))}"
        wl.cell(r, 7, f"={_sum('H', ls.rows_by_cat.get(('plan', 'energy'), []))}")
        requests = "+".join(a.ref[f"requests/{m.name}"] for m in self.problem.models)
        wl.cell(r, 8, f"=B{r}/(({requests})/{a.ref['day_factor']})" if self.pl.ledger.requests_per_day > 0 else "")
        chart = BarChart()
        chart.title = "Plan cost per day by category (USD)"
        chart.add_data(Reference(wl, min_col=4, max_col=7, min_row=sr, max_row=r), titles_from_data=True)
        wl.add_chart(chart, f"J{sr}")
        for col, w in zip("ABCDEFGHIJKLM", (10, 10, 44, 16, 16, 10, 14, 16, 16, 12, 16, 10, 60), strict=True):
            wl.column_dimensions[col].width = w


def write_plan_workbook(path: str | Path, problem: Problem, plan: Plan, *, gpus: dict[str, GPU] | None = None,
                        energy_billed: bool = False, usd_per_kwh: float | None = None,
                        pue: float | None = None) -> Path:
    """Write :func:`build_plan_workbook` to ``path`` atomically (temporary file + rename).

    Raises InputError when the folder does not exist or cannot be written, or for a plan that names no option.
    """
    return save_atomic(build_plan_workbook(problem, plan, gpus=gpus, energy_billed=energy_billed,
                                           usd_per_kwh=usd_per_kwh, pue=pue), path)


__all__ = ["LEDGER_HEADER", "build_plan_workbook", "build_split_workbook", "save_atomic", "write_plan_workbook",
           "write_split_workbook"]
