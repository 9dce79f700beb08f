"""The figures README.md and docs/*.md quote, computed by the commands that give them, and compared with the text.

A figure in the Markdown is followed by an HTML comment naming it, which renders as nothing:

    the default plan costs $898.59<!--fig default.cost--> a day

The figure is the number written just before the comment (an optional + sign, digits with thousands commas,
an optional decimal part and an optional %; a - before it is text, as in a range 3.7-3.8%). Each name is
``SOURCE.FIGURE``; a source is one command (or one library call equal to it) that runs in well under a minute, and
its figures are formatted here exactly as the text writes them.

    .venv/bin/python docs/figures.py                    # check every figure: exit 1 listing each that drifted
    .venv/bin/python docs/figures.py --write            # rewrite the drifted figures in place
    .venv/bin/python docs/figures.py --only default     # one source (comma-separated for several)
    .venv/bin/python docs/figures.py --fast             # only the sources tests/test_figures.py runs (seconds)
    .venv/bin/python docs/figures.py --list             # the sources, their commands and figures

CI runs the check on every source (``make figures``); the test suite runs the fast ones. Figures of long benchmarks
(the re-planner's days, fleet-scale solves) are quoted with their command and the date they were measured and are
not checked here: the text says so where it quotes them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from click.testing import CliRunner

from fleetplan.cli.main import main as fleetplan_cli
from fleetplan.costmodels.latency import prefill_time_s
from fleetplan.costmodels.prefixcache import per_replica_and_shared
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.prefix_blocks import MOONCAKE_BLOCK_TOKENS, read_block_ids
from fleetplan.scenario.troughs import load_troughs
from fleetplan.solvers.common import SAFETY_STOP_NOTE
from fleetplan.solvers.troughs import plan_troughs

ROOT = Path(__file__).resolve().parent.parent
#: The Markdown files whose figures are checked.
DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SCENARIOS = ROOT / "datasets" / "scenarios"
#: A tagged figure: the number just before ``<!--fig NAME-->``.
TAG = re.compile(r"(?P<value>\+?\d[\d,]*(?:\.\d+)?%?)?<!--fig (?P<name>[\w.-]+)-->")


def usd(x: float) -> str:
    """Dollars as the text writes them: thousands commas, cents."""
    return f"{x:,.2f}"


def pct(x: float, digits: int = 1) -> str:
    """A share as a percentage with ``digits`` decimals."""
    return f"{x * 100:.{digits}f}%"


def cli(*args: str) -> str:
    """Run ``fleetplan ARGS`` in this process; its stdout (raises RuntimeError with its output when it fails)."""

    r = CliRunner().invoke(fleetplan_cli, list(args))
    if r.exit_code != 0:
        raise RuntimeError(f"fleetplan {' '.join(args)} exited {r.exit_code}: {r.output[-2000:]}")
    return r.output




def plan_json(*args: str) -> dict:
    """``fleetplan plan ARGS --format json``, parsed. Raises RuntimeError for a plan the wall-clock safety stop cut:
    such a plan may differ on another machine, so no figure is checked or written from it (run on a less busy
    machine, or give the source a larger --time-limit)."""
    doc = json.loads(cli("plan", *args, "--format", "json"))
    if SAFETY_STOP_NOTE in (doc.get("message") or ""):
        raise RuntimeError(f"fleetplan plan {' '.join(args)}: the wall-clock safety stop cut this plan (the machine "
                           "is too busy for its work in the time limit), so its figures may differ on another "
                           f"machine and none is checked or written from it: {doc['message'][:300]}")
    return doc


def variant(scenario: str, edit: Callable[[dict], None]) -> str:
    """The path of a copy of the shipped scenario ``scenario`` changed by ``edit`` (a temporary file)."""
    data = yaml.safe_load((SCENARIOS / f"{scenario}.yaml").read_text())
    edit(data)
    path = Path(tempfile.mkdtemp(prefix="fleetplan-figures-")) / f"{scenario}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


@dataclass(frozen=True)
class Source:
    """One command and the figures it gives: ``compute()`` returns {figure name: text}; ``fast`` sources run in the
    test suite (a few seconds each), the others in CI's ``make figures``."""

    command: str
    compute: Callable[[], dict[str, str]]
    fast: bool = False


def _replica(d: dict, model: str, gpu: str, tp: int) -> dict:
    """The plan dict ``d``'s replica row of ``model`` on ``gpu`` at tp ``tp`` (KeyError naming it when absent)."""
    for r in d["replicas"]:
        if r["model"] == model and r["gpu"] == gpu and r["tp"] == tp:
            return r
    raise KeyError(f"the plan has no {model} replicas on {gpu} tp {tp}: the text's figure needs rewording")


def _default() -> dict[str, str]:
    d = plan_json("--suggest-benchmark")
    out = {"cost": usd(d["cost_usd_per_day"]), "gpu_hours": f"{d['gpu_hours_per_day']:,.0f}",
           "gap": pct(d["gap"], 2), "bound": usd(d["lower_bound_usd_per_day"])}
    for name, b in d["baselines"].items():
        out[f"{name}.cost"] = usd(b["cost_usd_per_day"])
        out[f"{name}.gpu_hours"] = f"{b['gpu_hours_per_day']:,.0f}"
        out[f"{name}.ratio"] = f"{b['cost_usd_per_day'] / d['cost_usd_per_day']:.2f}"
    qwen, llama = _replica(d, "Qwen2.5-7B", "A100-SXM4-80GB", 1), _replica(d, "Llama-3.1-70B", "A100-SXM4-80GB", 4)
    out |= {"capacity.qwen_a100": f"{qwen['capacity_req_per_s']:.3f}",
            "capacity.llama70b_a100": f"{llama['capacity_req_per_s']:.3f}",
            "error.a100": pct(llama["capacity_error"]["relative"]),
            "error.llama70b_h100": pct(_replica(d, "Llama-3.1-70B", "H100-SXM-80GB", 4)["capacity_error"]["relative"])}
    for a in d["arrival_process"]:  # each trace's burstiness figures, as docs/uncertainty.md quotes them
        if a["trace"] in ("azure-conv", "azure-code"):
            key = a["trace"].replace("-", "_")
            cv, disp = a["interarrival_cv"], a["index_of_dispersion_60s"]
            out |= {f"{key}.cv": f"{cv:.2f}" if cv < 10 else f"{cv:.1f}",
                    f"{key}.dispersion": f"{disp:.1f}" if disp < 100 else f"{disp:.0f}",
                    f"{key}.peak_factor": f"{a['peak_factor_60s_p95']:.2f}"}
    sb = d["suggested_benchmark"]
    out |= {"suggest.capacity": f"{sb['capacity_req_per_s']:.2f}", "suggest.error": pct(sb["capacity_error"]),
            "suggest.at_risk": usd(sb["usd_per_day_at_risk"]),
            "suggest.at_risk_others": usd(sb["usd_per_day_at_risk_other_options"])}
    return out


def _robust() -> dict[str, str]:
    d = plan_json("--robust")
    plain = d["robust"]["plain_cost_usd_per_day"]
    return {"cost": usd(d["cost_usd_per_day"]), "plain": usd(plain),
            "increase": f"{(d['cost_usd_per_day'] / plain - 1) * 100:+.1f}%"}


def _arrivals() -> dict[str, str]:
    def edit(s: dict) -> None:
        s["options"]["arrivals"] = {"from_trace": "azure-conv"}

    d = plan_json(variant("default", edit))
    return {"cost": usd(d["cost_usd_per_day"])}


def _engine() -> dict[str, str]:
    def edit(s: dict) -> None:
        s["options"]["engine"] = {"mode": "prefill-first"}

    d = plan_json(variant("default", edit))
    return {"prefill_first.cost": usd(d["cost_usd_per_day"]),
            "prefill_first.capacity.qwen_a100":
                f"{_replica(d, 'Qwen2.5-7B', 'A100-SXM4-80GB', 1)['capacity_req_per_s']:.3f}",
            "prefill_first.capacity.llama70b_a100":
                f"{_replica(d, 'Llama-3.1-70B', 'A100-SXM4-80GB', 4)['capacity_req_per_s']:.3f}"}


def _purchase() -> dict[str, str]:
    d = plan_json("purchase_example")
    (c,) = d["commitments"]
    return {"cost": usd(d["cost_usd_per_day"]), "committed_gpus": str(c["gpus"]),
            "committed_rate": f"{c['committed_usd_per_gpu_hour']:.2f}", "load": pct(c["load_share"], 0),
            "break_even": pct(c["break_even_utilization"]), "on_demand_rate": f"{c['on_demand_usd_per_gpu_hour']:.2f}"}


def _disagg() -> dict[str, str]:
    wins = plan_json("disagg_wins")

    def colocated(s: dict) -> None:
        s["options"]["disaggregation"]["enabled"] = False

    coloc = plan_json(variant("disagg_wins", colocated))
    verified = plan_json("disagg_wins", "--verify", "--verify-slice", "600")
    loses = plan_json("disagg_egress_loses")
    return {"wins.cost": usd(wins["cost_usd_per_day"]), "colocated.cost": usd(coloc["cost_usd_per_day"]),
            "verified.cost": usd(verified["cost_usd_per_day"]),
            "verified.rounds": str(len(verified["verify"]["rounds"]) - 1),
            "egress.break_even": f"{loses['kv_break_even']['usd_per_gb']:.3g}"}


def _ledger() -> dict[str, str]:
    models = {m["name"]: m for m in json.loads(cli("data", "models", "--format", "json"))}
    kv = models["Llama-3.1-70B"]["kv_bytes_per_token_bf16"]
    prompt_bytes = 8192 * kv  # the README's worked check: an 8,192-token prompt
    return {"kv_bytes_per_token": f"{kv:,}", "prompt_bytes": f"{prompt_bytes:,}",
            "prompt_gb": f"{prompt_bytes / 1e9:.3f}", "prompt_usd": f"{prompt_bytes / 1e9 * 0.02:.4f}"}


def _troughs() -> dict[str, str]:

    p = load_troughs(None)
    r = plan_troughs(p, time_limit_s=30.0)
    return {"borrowed_gpu_hours": f"{sum(r.borrowed_gpus) * p.window_h:g}", "lost_gpu_hours": f"{r.lost_gpu_hours:.2f}",
            "lost_usd": usd(r.lost_work_usd), "saving": usd(r.saving_usd), "baseline": usd(r.baseline_usd),
            "training_gpu_hours": f"{r.training_gpu_hours:.1f}"}


def _prefix_cache() -> dict[str, str]:
    # the same calls as `fleetplan prefix-cache` with its defaults (cli/prefixcache.py)

    m, g = get_model("Llama-3.1-8B"), get_gpu("H100-SXM-80GB")
    block_bytes = MOONCAKE_BLOCK_TOKENS * m.kv_bytes_per_token("bf16")
    cap = max(1, int(20.0 * 1e9 // block_bytes))
    reqs = read_block_ids("mooncake-conversation", limit=3000)
    out = {}
    per = []
    for r in (1, 2, 4, 8):
        p, s = per_replica_and_shared(reqs, r, cap)
        per.append(p)
        if r > 1:
            out[f"shared.{r}"] = pct(s)
    out |= {"per_replica.low": f"{min(per) * 100:.1f}", "per_replica.high": pct(max(per)),
            "block_mb": f"{block_bytes / 1e6:.1f}"}
    t_block = prefill_time_s(m, g, MOONCAKE_BLOCK_TOKENS, calib=load_calibration(g))
    out["break_even_gb_per_s"] = f"{block_bytes / t_block / 1e9:.1f}"
    return out


#: What the README's small scenario says of its rates and its H100 row, which _small_plan replaces.
README_RATES = "rates: [1.0, 4.0, 12.0]"
README_H100 = "gpus_per_node: 8}"


def readme_small() -> str:
    """The README's small scenario: its one YAML block (one home for it; a copy here drifted apart in principle).
    Raises RuntimeError when the README has not exactly one, or lost the rates or the H100 row this script fills
    in."""
    blocks = (ROOT / "README.md").read_text(encoding="utf-8").split("```yaml\n")[1:]
    if len(blocks) != 1:
        raise RuntimeError(f"README.md has {len(blocks)} YAML blocks; the small scenario is expected as the only one")
    text = blocks[0].split("```")[0]
    for part in (README_RATES, README_H100):
        if part not in text:
            raise RuntimeError(f"README.md's small scenario no longer says {part!r}; update docs/figures.py")
    return text


def _small_plan(rates: str, price: str = "") -> dict:
    path = Path(tempfile.mkdtemp(prefix="fleetplan-figures-")) / "small.yaml"
    path.write_text(readme_small().replace(README_RATES, f"rates: {rates}")
                    .replace(README_H100, README_H100[:-1] + price + "}"))
    return plan_json(str(path), "--no-baselines")


def _small() -> dict[str, str]:
    # docs/planning.md: the small scenario with 16 req/s in its last hour keeps a one-model shared GPU all day; and
    # usd_per_gpu_hour 700 on its H100 row against the catalog's price
    (g,) = _small_plan("[1.0, 4.0, 16.0]")["shared_gpus"]
    (pool,) = _small_plan("[1.0, 4.0, 12.0]")["pools"]
    catalog = pool["usd_per_gpu_hour"]
    return {"shared.load_low": f"{min(g['load_share']):.0%}", "shared.load_high": f"{max(g['load_share']):.0%}",
            "h100_usd_per_gpu_hour": f"{catalog:.4g}", "price_700_ratio": f"{700 / catalog:.3g}"}


SOURCES: dict[str, Source] = {
    "small": Source("fleetplan plan SMALL --no-baselines --format json (README.md's small scenario, rates "
                    "[1, 4, 16], and as given)", _small, fast=True),
    "default": Source("fleetplan plan --suggest-benchmark --format json", _default),
    "robust": Source("fleetplan plan --robust --format json", _robust),
    "arrivals": Source("fleetplan plan DEFAULT+arrivals --format json (default.yaml with options.arrivals: "
                       "{from_trace: azure-conv})", _arrivals),
    "engine": Source("fleetplan plan DEFAULT+engine --format json (default.yaml with options.engine: "
                     "{mode: prefill-first})", _engine),
    "purchase": Source("fleetplan plan purchase_example --format json", _purchase),
    "disagg": Source("fleetplan plan disagg_wins [--verify --verify-slice 600] and disagg_egress_loses, and "
                     "disagg_wins with disaggregation.enabled: false, --format json", _disagg, fast=True),
    "ledger": Source("fleetplan data models --format json (Llama-3.1-70B's KV bytes per token)", _ledger, fast=True),
    "troughs": Source("fleetplan troughs", _troughs, fast=True),
    "prefix": Source("fleetplan prefix-cache", _prefix_cache),
}


@dataclass(frozen=True)
class Tag:
    """One tagged figure: file, line (1-based), name, the text's value (None: a tag with no number before it)."""

    path: Path
    line: int
    name: str
    value: str | None


def tags(text: str, path: Path) -> list[Tag]:
    """Every figure tag of ``text`` (the Markdown of ``path``)."""
    return [Tag(path, text.count("\n", 0, m.start()) + 1, m.group("name"), m.group("value"))
            for m in TAG.finditer(text)]


def drifts(documents: dict[Path, str], figures: dict[str, str], sources: set[str]) -> list[str]:
    """One message per tag of ``documents`` ({path: text}) from one of ``sources`` whose figure is not the computed
    one in ``figures`` ({'source.figure': text}), or whose name is unknown: which figure, where, both values and
    the command that regenerates it. An empty list when every figure holds."""
    out = []
    for path, text in documents.items():
        for t in tags(text, path):
            src = t.name.split(".", 1)[0]
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{t.line}"
            if src not in SOURCES:
                out.append(f"{where}: figure {t.name}: unknown source {src!r} (known: {', '.join(SOURCES)})")
            elif src not in sources:
                continue
            elif t.name not in figures:
                out.append(f"{where}: figure {t.name}: the source {src!r} gives no such figure (it gives "
                           f"{', '.join(sorted(k for k in figures if k.startswith(src + '.')))})")
            elif t.value != figures[t.name]:
                out.append(f"{where}: figure {t.name} reads {t.value} but `{SOURCES[src].command}` gives "
                           f"{figures[t.name]}; regenerate: .venv/bin/python docs/figures.py --write --only {src}")
    return out


def rewrite(text: str, figures: dict[str, str]) -> str:
    """``text`` with every tagged figure that ``figures`` holds replaced by its computed value."""
    def sub(m: re.Match[str]) -> str:
        return figures.get(m.group("name"), m.group("value") or "") + f"<!--fig {m.group('name')}-->"

    return TAG.sub(sub, text)


def compute(names: list[str]) -> dict[str, str]:
    """{'source.figure': text} of the sources ``names``."""
    out: dict[str, str] = {}
    for name in names:
        out |= {f"{name}.{k}": v for k, v in SOURCES[name].compute().items()}
    return out


def documents() -> dict[Path, str]:
    """{path: text} of every checked Markdown file."""
    return {p: p.read_text() for p in DOCUMENTS}


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); 0 when every figure holds (or was written), 1 otherwise."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the drifted figures in place")
    ap.add_argument("--only", default="", help="comma-separated sources (default: all)")
    ap.add_argument("--fast", action="store_true", help="only the fast sources (those the test suite checks)")
    ap.add_argument("--list", action="store_true", help="list the sources, their commands and tags")
    a = ap.parse_args(argv)
    names = [n for n in a.only.split(",") if n] or [n for n, s in SOURCES.items() if s.fast or not a.fast]
    if unknown := [n for n in names if n not in SOURCES]:
        ap.error(f"unknown source(s) {', '.join(unknown)}; known: {', '.join(SOURCES)}")
    docs = documents()
    if a.list:
        used = [t for p, text in docs.items() for t in tags(text, p)]
        for n, s in SOURCES.items():
            print(f"{n}{' (fast)' if s.fast else ''}: {s.command}")
            for t in used:
                if t.name.split(".", 1)[0] == n:
                    print(f"  {t.name} = {t.value}  ({t.path.relative_to(ROOT)}:{t.line})")
        return 0
    try:
        figures = compute(names)
    except RuntimeError as e:  # a command failed or a plan was cut by its safety stop: nothing is checked or written
        print(f"figures: {e}", file=sys.stderr)
        return 1
    problems = drifts(docs, figures, set(names))
    if a.write:
        for path, text in docs.items():
            if (new := rewrite(text, figures)) != text:
                path.write_text(new)
                print(f"wrote {path.relative_to(ROOT)}")
        problems = [p for p in drifts(documents(), figures, set(names)) if " reads " not in p]
    for p in problems:
        print(p)
    checked = sum(1 for p, text in docs.items() for t in tags(text, p) if t.name.split(".", 1)[0] in names)
    print(f"{checked} figures from {len(names)} source(s) checked; {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
