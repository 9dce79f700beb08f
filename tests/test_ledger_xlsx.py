"""What-if workbooks recomputed by an independent formula engine (the `formulas` package; LibreOffice if installed)."""

import shutil
import subprocess

import openpyxl
import pytest

from fleetplan.costmodels.split import compare, with_cross_site_egress
from fleetplan.placement.ledger import plan_ledger
from fleetplan.placement.split import SplitOptions, make_spec
from fleetplan.placement.workbook import write_plan_workbook, write_split_workbook

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


def test_libreoffice_recompute(tmp_path, split_result):
    exe = shutil.which("soffice") or shutil.which("libreoffice")
    if not exe:
        pytest.skip("LibreOffice is not installed: the headless recompute variant needs `soffice` on PATH")
    path = write_split_workbook(tmp_path / "l.xlsx", split_result)
    subprocess.run([exe, "--headless", "--convert-to", "csv:Text - txt - csv (StarCalc):44,34,76,1,,0,false,true,"
                    "false,false,false,2", "--outdir", str(tmp_path), str(path)], check=True, timeout=120)
    text = (tmp_path / "l-Ledger.csv").read_text()
    want = round(split_result.options["split"].ledger.total_usd_per_day, 2)
    assert any(f"{want:.2f}" in line or str(want) in line for line in text.splitlines())


def test_unwritable_folder_leaves_nothing(tmp_path, split_result):
    from fleetplan.errors import InputError

    with pytest.raises(InputError):
        write_split_workbook(tmp_path / "missing" / "l.xlsx", split_result)
    assert not (tmp_path / "missing").exists()
