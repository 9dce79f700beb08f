"""What-if workbooks recomputed by two independent spreadsheet engines: the `formulas` package and LibreOffice
(headless; CI installs it, elsewhere its tests are skipped with the reason)."""

import copy
import csv
import dataclasses
import shutil
import subprocess
from pathlib import Path

import openpyxl
import pytest
from openpyxl.utils import get_column_letter

from fleetplan.costmodels.ledger import DAYS_PER_MONTH
from fleetplan.costmodels.prices import EgressTable, EgressTier
from fleetplan.costmodels.split import compare, with_cross_site_egress
from fleetplan.errors import InputError
from fleetplan.outputs.ledger import plan_ledger
from fleetplan.outputs.workbook import write_plan_workbook, write_split_workbook
from fleetplan.placement.plan import evaluate, kv_traffic
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario, scenario_from_raw
from fleetplan.scenario.split import SplitOptions, make_spec
from fleetplan.solvers.disagg import with_flat_kv_egress
from fleetplan.solvers.milp import solve_milp
from fleetplan.solvers.solve import Effort

formulas = pytest.importorskip("formulas")


def _recompute(path):
    """{(sheet, cell): value} of every cell, computed by `formulas` from the file alone."""
    sol = formulas.ExcelModel().loads(str(path)).finish().calculate()
    out = {}
    for k, v in sol.items():
        if "!" not in k or ":" in k.split("!")[1]:
            continue
        sheet, cell = k.split("]", 1)[1].split("!")
        val = getattr(v, "value", v)
        try:
            val = val[0, 0]
        except (TypeError, IndexError):
            pass
        out[(sheet.strip("'").upper(), cell.upper())] = val
    return out


def _row_of(ws, label, col=1):
    for row in ws.iter_rows(min_col=col, max_col=col):
        if row[0].value == label:
            return row[0].row
    raise AssertionError(f"no row {label!r}")


@pytest.fixture(scope="module")
def split_result():
    s = make_spec(SplitOptions(model="llama-3.1-70b", prefill_site="aws:us-east-1", decode_site="aws:us-west-2",
                               rate_req_per_s=2.0, prefill_usd_per_gpu_hour=5.0, decode_usd_per_gpu_hour=10.0))
    return compare(s, prompt_break_even=False)


def test_split_workbook_totals_equal_python_to_the_cent(tmp_path, split_result):
    path = write_split_workbook(tmp_path / "l.xlsx", split_result, [{"egress_usd_per_gb": 0.02, "verdict": "x"}])
    wb = openpyxl.load_workbook(path)
    assert wb.sheetnames == ["Assumptions", "Ledger", "Scenarios"]
    assert wb["Ledger"]._charts
    vals = _recompute(path)
    ws = wb["Ledger"]
    sr = _row_of(ws, "Summary")
    for i, (name, o) in enumerate(split_result.options.items()):
        r = sr + 1 + i
        assert ws.cell(r, 1).value == name
        led = o.ledger
        assert round(vals[("LEDGER", f"B{r}")], 2) == round(led.total_usd_per_day, 2), name
        assert round(vals[("LEDGER", f"C{r}")], 2) == round(led.total_usd_per_month, 2)
        assert round(vals[("LEDGER", f"D{r}")], 2) == round(led.gpu_usd_per_day, 2)
        assert round(vals[("LEDGER", f"E{r}")], 2) == round(led.egress_usd_per_day, 2)
        assert round(vals[("LEDGER", f"F{r}")], 2) == round(led.energy_usd_per_day, 2)
        assert vals[("LEDGER", f"G{r}")] == pytest.approx(led.usd_per_request, abs=5e-7)
        assert round(vals[("LEDGER", f"H{r}")], 2) == round(led.usd_per_1m_input_tokens, 2)
        assert round(vals[("LEDGER", f"I{r}")], 2) == round(led.usd_per_1m_output_tokens, 2)
    be = _row_of(ws, "Break-even cross-site egress USD/GB (flat)")
    assert vals[("LEDGER", f"B{be}")] == pytest.approx(split_result.break_even_egress_usd_per_gb, rel=1e-9)


def test_editing_an_egress_price_moves_the_total_as_python_predicts(tmp_path, split_result):
    path = write_split_workbook(tmp_path / "l.xlsx", split_result)
    wb = openpyxl.load_workbook(path)
    wa = wb["Assumptions"]
    row = next(r[0].row for r in wa.iter_rows(max_col=1) if str(r[0].value).startswith("egress aws inter_region"))
    assert wa.cell(row, 2).value == 0.02
    wa.cell(row, 2).value = 0.05
    edited = tmp_path / "edited.xlsx"
    wb.save(edited)
    vals = _recompute(edited)
    # Python: the same spec with a flat 0.05 USD/GB cross-site price (pools do not depend on the egress price).
    want = compare(with_cross_site_egress(split_result.spec, 0.05), prompt_break_even=False)
    ws = wb["Ledger"]
    sr = _row_of(ws, "Summary")
    for i, name in enumerate(want.options):
        got = vals[("LEDGER", f"B{sr + 1 + i}")]
        assert round(got, 2) == round(want.options[name].ledger.total_usd_per_day, 2), name
    # The split's total moved by (0.05 − 0.02) × cross-site GB per day.
    before = split_result.options["split"]
    delta = want.options["split"].ledger.total_usd_per_day - before.ledger.total_usd_per_day
    assert delta == pytest.approx(0.03 * before.cross_site_gb_per_day)


def test_plan_workbook_totals_and_edit(tmp_path, tiny_ledger_problem):
    prob, plan = tiny_ledger_problem
    pl = plan_ledger(prob, plan)
    path = write_plan_workbook(tmp_path / "p.xlsx", prob, plan)
    wb = openpyxl.load_workbook(path)
    assert wb.sheetnames == ["Assumptions", "Plan", "Ledger"]
    vals = _recompute(path)
    sr = _row_of(wb["Ledger"], "Summary") + 1
    assert round(vals[("LEDGER", f"B{sr}")], 2) == round(pl.ledger.total_usd_per_day, 2)
    assert round(vals[("LEDGER", f"D{sr}")], 2) == round(pl.ledger.gpu_usd_per_day, 2)
    assert round(vals[("LEDGER", f"E{sr}")], 2) == round(pl.ledger.start_usd_per_day, 2)
    assert round(vals[("LEDGER", f"F{sr}")], 2) == round(pl.ledger.egress_usd_per_day, 2)
    # Edit: the east pool's price 2 -> 3 USD/GPU-hour: +1 × 2 GPU-hours per 2-hour horizon = +$24/day.
    wa = wb["Assumptions"]
    row = next(r[0].row for r in wa.iter_rows(max_col=1)
               if str(r[0].value).startswith("H100-SXM-80GB at aws:us-east-1"))
    wa.cell(row, 2).value = 3.0
    wb.save(tmp_path / "p2.xlsx")
    vals2 = _recompute(tmp_path / "p2.xlsx")
    assert round(vals2[("LEDGER", f"B{sr}")] - vals[("LEDGER", f"B{sr}")], 2) == 24.0


def _libreoffice(path, tmp_path):
    """{(sheet, cell): value} of every non-empty cell, recomputed by LibreOffice headless (a second, independent
    spreadsheet engine); skips with the reason when LibreOffice is not installed."""
    exe = shutil.which("soffice") or shutil.which("libreoffice")
    if not exe:
        pytest.skip("LibreOffice is not installed (Debian: libreoffice-calc-nogui): the headless recompute needs "
                    "`soffice` on PATH")
    out = tmp_path / f"lo-{Path(path).stem}"
    out.mkdir()
    # CSV filter options: comma, double quote, UTF-8, from line 1, ..., raw values (not as shown), every sheet (-1).
    subprocess.run([exe, "--headless", "-env:UserInstallation=file://" + str(tmp_path / "lo-profile"),
                    "--convert-to", "csv:Text - txt - csv (StarCalc):44,34,76,1,,0,false,true,false,false,false,-1",
                    "--outdir", str(out), str(path)], check=True, timeout=180, capture_output=True)
    vals = {}
    for f in out.glob("*.csv"):
        sheet = f.stem.split("-", 1)[1].upper()
        for r, row in enumerate(csv.reader(f.read_text(encoding="utf-8").splitlines()), start=1):
            for c, v in enumerate(row, start=1):
                if v != "":
                    try:
                        vals[(sheet, f"{get_column_letter(c)}{r}")] = float(v)
                    except ValueError:
                        vals[(sheet, f"{get_column_letter(c)}{r}")] = v
    return vals


def test_libreoffice_recomputes_both_workbooks_as_python_does(tmp_path, split_result, tiny_ledger_problem):
    path = write_split_workbook(tmp_path / "l.xlsx", split_result)
    lo, ws = _libreoffice(path, tmp_path), openpyxl.load_workbook(path)["Ledger"]
    sr = _row_of(ws, "Summary")
    for i, (name, o) in enumerate(split_result.options.items()):
        r = sr + 1 + i
        assert round(lo[("LEDGER", f"B{r}")], 2) == round(o.ledger.total_usd_per_day, 2), name
        assert round(lo[("LEDGER", f"C{r}")], 2) == round(o.ledger.total_usd_per_month, 2), name
        assert lo[("LEDGER", f"G{r}")] == pytest.approx(o.ledger.usd_per_request, abs=5e-7)
    prob, plan = tiny_ledger_problem
    pl = plan_ledger(prob, plan)
    path = write_plan_workbook(tmp_path / "p.xlsx", prob, plan)
    lo, ws = _libreoffice(path, tmp_path), openpyxl.load_workbook(path)["Ledger"]
    r = _row_of(ws, "Summary") + 1
    assert round(lo[("LEDGER", f"B{r}")], 2) == round(pl.ledger.total_usd_per_day, 2)
    assert round(lo[("LEDGER", f"C{r}")], 2) == round(pl.ledger.total_usd_per_month, 2)
    assert lo[("LEDGER", f"H{r}")] == pytest.approx(pl.ledger.usd_per_request, rel=1e-9)


def test_month_factor_and_requests_are_formulas_over_the_assumptions(tmp_path, tiny_ledger_problem):
    prob, plan = tiny_ledger_problem
    pl = plan_ledger(prob, plan)
    path = write_plan_workbook(tmp_path / "p.xlsx", prob, plan)
    wb = openpyxl.load_workbook(path)
    wa = wb["Assumptions"]
    dpm = _row_of(wa, "Days per month")
    wa.cell(dpm, 2).value = 30.0
    # Double every model's requests: USD per request halves.
    for m in prob.models:
        row = _row_of(wa, f"{m.name} requests over the horizon")
        wa.cell(row, 2).value = 2 * wa.cell(row, 2).value
    wb.save(tmp_path / "p2.xlsx")
    vals = _recompute(tmp_path / "p2.xlsx")
    r = _row_of(wb["Ledger"], "Summary") + 1
    # Month = day total × 30 (was × 365/12); per request = day total / (2 × requests per day).
    assert vals[("LEDGER", f"C{r}")] == pytest.approx(pl.ledger.total_usd_per_day * 30.0, rel=1e-12)
    assert vals[("LEDGER", f"H{r}")] == pytest.approx(pl.ledger.usd_per_request / 2, rel=1e-12)
    # Every line item's month amount follows the edited factor too.
    wl = wb["Ledger"]
    item_rows = [c.row for c in wl["A"][1:] if c.value == "plan" and c.row < r - 1]
    assert item_rows and all(vals[("LEDGER", f"I{x}")] == pytest.approx(vals[("LEDGER", f"H{x}")] * 30.0)
                             for x in item_rows)


def test_unwritable_folder_leaves_nothing(tmp_path, split_result):

    with pytest.raises(InputError):
        write_split_workbook(tmp_path / "missing" / "l.xlsx", split_result)
    assert not (tmp_path / "missing").exists()


@pytest.fixture(scope="module")
def split_plan():
    # disagg_egress_loses on one day at a steady 10 req/s, with the cross-site KV egress free so the plan prefills
    # in us-east-2 and decodes in us-east-1; then billed at a tiered table (100 GB/month free, 0.09 USD/GB, 0.05
    # above 1e6 GB/month) for the KV and the prompt bytes, so the workbook's band formulas have volume to price.
    raw = copy.deepcopy(load_scenario("disagg_egress_loses").raw)
    raw["options"]["window_length_s"] = 86400
    raw["models"][0]["demand"] = {"rates": [10.0]}
    problem = build_problem(scenario_from_raw(raw))
    plan = solve_milp(with_flat_kv_egress(problem, 0.0), time_limit_s=30, max_nodes=Effort().exact_nodes("highs"))
    tiers = (EgressTier(0.0, 100.0, 0.0), EgressTier(100.0, 1e6, 0.09), EgressTier(1e6, None, 0.05))
    table = EgressTable("aws", "inter_region", "test tiers", tiers)
    tiered = dataclasses.replace(problem, kv_routes=tuple(
        dataclasses.replace(r, kv_table=table, prompt_table=table) if r.cross_site else r
        for r in problem.kv_routes))
    plan = dataclasses.replace(plan, objective_usd=None)
    assert validate(tiered, plan).ok and any(k[1] != k[2] for k in plan.kv_flows_req_per_s)
    return tiered, plan


def test_plan_workbook_shows_prefill_decode_pools_and_prices_kv_egress_live(tmp_path, split_plan):
    prob, plan = split_plan
    pl = plan_ledger(prob, plan)
    path = write_plan_workbook(tmp_path / "pd.xlsx", prob, plan)
    wb = openpyxl.load_workbook(path)
    wp = wb["Plan"]
    roles = {c.value for c in wp[get_column_letter(10 + prob.n_windows)][1:] if c.value}
    assert {"decode", "prefill -> aws:us-east-1"} <= roles
    vals = _recompute(path)
    sr = _row_of(wb["Ledger"], "Summary") + 1
    ev = evaluate(prob, plan)
    per_day = 24.0 / prob.horizon_hours
    assert ev.kv_egress_usd > 0
    assert round(vals[("LEDGER", f"B{sr}")], 2) == round(pl.ledger.total_usd_per_day, 2)
    assert round(vals[("LEDGER", f"D{sr}")], 2) == round(ev.gpu_usd * per_day, 2)
    assert round(vals[("LEDGER", f"F{sr}")], 2) == round(ev.egress_usd * per_day, 2)
    # Edit: the last band, 0.05 USD/GB, to 0.06. The monthly volume V (KV + prompt GB of the cross-site routes,
    # ~1e7 GB) lies in it, so the day's egress grows by (V − 1e6) × 0.01 / days per month.
    month_gb = sum(pl_gb for (key, _kind), pl_gb in kv_traffic(prob, plan).gb.items() if key[1] != key[2]) \
        * DAYS_PER_MONTH / (prob.horizon_hours / 24)
    assert month_gb > 1e6
    wa = wb["Assumptions"]
    band = next(r[0].row for r in wa.iter_rows(max_col=1) if str(r[0].value).startswith("egress aws inter_region")
                and str(r[0].value).endswith("band 3"))
    assert wa.cell(band, 2).value == 0.05
    wa.cell(band, 2).value = 0.06
    wb.save(tmp_path / "pd2.xlsx")
    vals2 = _recompute(tmp_path / "pd2.xlsx")
    assert vals2[("LEDGER", f"F{sr}")] - vals[("LEDGER", f"F{sr}")] == pytest.approx(
        (month_gb - 1e6) * 0.01 / DAYS_PER_MONTH, rel=1e-9)
    lo = _libreoffice(path, tmp_path)
    assert round(lo[("LEDGER", f"B{sr}")], 2) == round(pl.ledger.total_usd_per_day, 2)
