"""``fleetplan export k8s|vllm``: manifests valid against the Kubernetes and CRD schemas, golden files for the default
plan, the KEDA schedule replayed minute by minute, launch commands that fit the nodes.

Golden files (tests/golden/export/) are the export of the default plan stored beside them; regenerate them, after a
change that is meant to change them, with

    .venv/bin/python tests/test_export.py            # re-export the stored plan
    .venv/bin/python tests/test_export.py --replan   # re-plan the default scenario first (after cost-model changes)

and review the diff.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import re
import subprocess
import sys
from functools import cache, lru_cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from scenario_support import SMALL

import fleetplan.export.deployment as deployment
from fleetplan.cli.main import main
from fleetplan.errors import InputError
from fleetplan.export.deployment import DeployFile, read_deploy_file, window_index, workloads
from fleetplan.export.k8s import export_k8s, lead_minutes_for
from fleetplan.export.vllm import export_vllm, node_commands
from fleetplan.outputs.planio import load_plan_file
from fleetplan.placement.plan import Plan, Status, evaluate
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import scenario_from_raw

pytestmark = pytest.mark.xdist_group("export")

HERE = Path(__file__).parent
GOLDEN = HERE / "golden" / "export"
PLAN_FILE = GOLDEN / "default_plan.json"
CRDS = HERE / "data" / "crds"
#: Golden files kept of the full export (the other windows' files are checked against the plan instead).
# The default plan (vLLM V1) runs every model on A100s at gcp:us-central1 and part of Llama-3.1-70B's day on H100s
# at aws:us-east-1 (tp 2 or 4; window 19:00 has one).
GOLDEN_K8S = ("clusters.yaml", "gcp-us-central1/window-00-00.yaml", "gcp-us-central1/window-19-00.yaml",
              "gcp-us-central1/schedule-keda.yaml", "aws-us-east-1/window-19-00.yaml",
              "aws-us-east-1/schedule-keda.yaml")
K8S_VERSION = "1.37.0"
#: libyaml's safe loader where PyYAML has it (the same documents as yaml.safe_load, ~10x faster on the CRDs and the
#: day of manifests these tests read).
SAFE_LOADER = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
#: Golden export of the shipped disagg_wins plan (prefill and decode pools, issue 17): its plan and what is kept.
PD_PLAN_FILE = GOLDEN / "disagg_wins" / "plan.json"
GOLDEN_PD = ("clusters.yaml", "aws-us-east-1/window-06-00.yaml", "aws-us-east-1/schedule-keda.yaml")


@lru_cache(maxsize=1)
def default():
    problem, plan, scenario, _ = load_plan_file(PLAN_FILE)
    return problem, plan, scenario


@lru_cache(maxsize=1)
def pd_export() -> tuple[dict[str, str], str]:
    problem, plan, scenario, _ = load_plan_file(PD_PLAN_FILE)
    ws = workloads(problem, plan, scenario)
    files = export_k8s(problem, ws, list(range(problem.n_windows)), DeployFile(), schedule=True)
    return files, export_vllm(problem, ws, list(range(problem.n_windows)), plan_name=problem.name)


@lru_cache(maxsize=1)
def full_export() -> tuple[dict[str, str], str]:
    problem, plan, scenario = default()
    ws = workloads(problem, plan, scenario)
    files = export_k8s(problem, ws, list(range(problem.n_windows)), DeployFile(), schedule=True)
    return files, export_vllm(problem, ws, list(range(problem.n_windows)), plan_name=problem.name)


# ---------------------------------------------------------------------------------------------- schemas


def _strict(schema):
    """The schema with unknown keys refused wherever the CRD lists properties and allows nothing else (what the API
    server's strict field validation does; CRD schemas leave additionalProperties unset)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def crd_schema(kind: str) -> dict:
    files = {"LeaderWorkerSet": "leaderworkerset.x-k8s.io_leaderworkersets.yaml.gz",
             "ScaledObject": "keda.sh_scaledobjects.yaml"}
    p = CRDS / files[kind]
    text = gzip.decompress(p.read_bytes()).decode() if p.suffix == ".gz" else p.read_text()
    crd = yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 (a safe loader)
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    # metadata is the API server's ObjectMeta, which the CRD schema leaves open (type: object).
    return schema


@cache
def crd_validator(kind: str) -> jsonschema.protocols.Validator:
    """A validator of ``kind``'s CRD schema, the schema itself checked once (jsonschema.validate checked the
    schema, hundreds of kB, again on every call)."""
    schema = crd_schema(kind)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def check_manifest(doc: dict) -> None:
    """Raise when ``doc`` does not validate: built-in kinds against Kubernetes' schemas (strict), custom ones
    against their CRD's schema (strict) plus the group/version the CRD serves."""
    kind = doc["kind"]
    if kind in ("LeaderWorkerSet", "ScaledObject"):
        group = {"LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1", "ScaledObject": "keda.sh/v1alpha1"}[kind]
        assert doc["apiVersion"] == group
        crd_validator(kind).validate(doc)
        meta = doc["metadata"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", meta["name"]) and len(meta["name"]) <= 63
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.load_all(text, Loader=SAFE_LOADER) if d is not None]  # noqa: S506 (a safe loader)


# ---------------------------------------------------------------------------------------------- tests


def _planned_small(tmp_path: Path, text: str) -> Path:
    """Plan the scenario ``text`` (a variant of the README's small one) into tmp_path/plan.json; its path."""
    scen = tmp_path / "small.yaml"
    scen.write_text(text)
    plan = tmp_path / "plan.json"
    r = CliRunner().invoke(main, ["plan", str(scen), "--out", str(plan), "--no-baselines"])
    assert r.exit_code == 0, r.output
    return plan


def test_default_plan_fixture_is_valid():
    problem, plan, _ = default()
    assert validate(problem, plan).ok


def test_golden_files():
    files, vllm_text = full_export()
    for rel in GOLDEN_K8S:
        assert files[rel] == (GOLDEN / "k8s" / rel).read_text(), f"{rel} differs from its golden file (module doc)"
    assert vllm_text == (GOLDEN / "vllm.sh").read_text()


def test_every_manifest_validates_and_windows_differ_only_in_replicas():
    problem, plan, scenario = default()
    ws = workloads(problem, plan, scenario)
    files, _ = full_export()
    ev = evaluate(problem, plan)
    seen_kinds = set()
    checked: set[str] = set()
    per_window = {w: 0 for w in range(problem.n_windows)}
    shapes = {}
    for rel, text in files.items():
        if rel == "clusters.yaml":
            continue
        for doc in _docs(text):
            key = json.dumps(doc, sort_keys=True)
            if key not in checked:  # windows repeat most objects unchanged; each distinct one is checked once
                check_manifest(doc)
                checked.add(key)
            seen_kinds.add(doc["kind"])
        m = re.fullmatch(r"(.+)/window-(\d\d)-(\d\d)\.yaml", rel)
        if not m:
            continue
        w = window_index(problem, f"{m.group(2)}:{m.group(3)}")
        stripped = []
        for doc in _docs(text):
            if doc["kind"] == "Deployment":
                res = doc["spec"]["template"]["spec"]["containers"][0]["resources"]
                assert res["requests"] == res["limits"]
                per_window[w] += doc["spec"]["replicas"] * int(res["limits"]["nvidia.com/gpu"])
                doc = copy.deepcopy(doc)
                doc["spec"]["replicas"] = None
            stripped.append(doc)
        shapes.setdefault(m.group(1), []).append(stripped)
    assert {"Namespace", "Deployment", "Service", "ScaledObject"} <= seen_kinds
    # Independent check: the GPUs the manifests ask for in each window are the plan's GPUs in that window.
    assert [per_window[w] for w in range(problem.n_windows)] == list(ev.gpus_per_window)
    for site, sets in shapes.items():
        assert all(s == sets[0] for s in sets), f"{site}: windows differ in more than replicas"
    # One workload per option the plan runs in some window, plus one per distinct set of models sharing GPUs.
    running = {k for k, counts in plan.replicas.items() if any(counts)}
    assert len(ws) == len(running) + len({(g.pool, tuple(g.models)) for g in plan.shared})


def test_validation_can_fail():
    files, _ = full_export()
    dep = next(d for d in _docs(files["gcp-us-central1/window-00-00.yaml"]) if d["kind"] == "Deployment")
    bad = copy.deepcopy(dep)
    bad["spec"]["template"]["spec"]["containers"][0]["resourcez"] = {}
    with pytest.raises(Exception, match="resourcez"):
        check_manifest(bad)
    so = _docs(files["gcp-us-central1/schedule-keda.yaml"])[0]
    bad = copy.deepcopy(so)
    bad["spec"]["triggers"][0]["metadataa"] = bad["spec"]["triggers"][0].pop("metadata")
    with pytest.raises(jsonschema.ValidationError):
        check_manifest(bad)


def test_server_arguments_come_from_the_capacity_model():
    problem, plan, scenario = default()
    ws = workloads(problem, plan, scenario)
    opts = problem.option_by_key
    for w in ws:
        if w.key is not None:
            o = opts[w.key]
            (s,) = w.servers
            assert (s.tp, s.pp) == (o.tp, o.pp) and w.gpus_per_pod == o.tp
            # the KV batch, capped by the engine's max_num_seqs (vLLM's default 256 on A100, 1024 on H100)
            assert o.engine is not None and o.engine.max_num_seqs is not None
            assert s.max_num_seqs == min(math.floor(o.max_batch), o.engine.max_num_seqs)
            assert "--max-num-seqs" not in s.engine_flags and s.args()[-len(s.engine_flags):] == list(s.engine_flags)
            assert ("--no-enable-chunked-prefill" in s.args()) == (o.engine.mode == "prefill-first")
            assert s.gpu_memory_utilization == scenario.options["memory_utilization"]
    shared = next(w for w in ws if w.name == "shared-llama-3-1-8b-mistral-7b-v0-1-a100-sxm4-80gb")
    llama = shared.servers[0]
    share = problem.share_by_key[("Llama-3.1-8B", shared.pool)]
    # Llama-3.1-8B: 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 KV bytes per token; its shared KV budget in
    # whole 16-token blocks gives --max-model-len (below its 131,072-token context).
    assert llama.max_model_len == int(share.kv_budget_bytes // 131072) // 16 * 16 < 131072
    # The two servers' memory shares fit the scenario's memory_utilization (0.9) of the GPU.
    assert sum(s.gpu_memory_utilization for s in shared.servers) <= 0.9
    assert [s.port for s in shared.servers] == [8000, 8001]


def _cron_minute(expr: str) -> int:
    minute, hour, *rest = expr.split()
    assert rest == ["*", "*", "*"]
    return int(hour) * 60 + int(minute)


def test_keda_schedule_replayed_minute_by_minute():
    """At every minute of the day the largest active cron trigger (else minReplicaCount) gives the window's
    replicas, except in the lead minutes before a window, where it is at least both neighbours' (start before
    stop)."""
    problem, plan, scenario = default()
    # Keyed by site folder and name: two sites may run workloads of the same name (the same model and GPU type).
    ws = {(w.site.replace(":", "-"), w.name): w for w in workloads(problem, plan, scenario)}
    files, _ = full_export()
    checked = 0
    for site in sorted({rel.split("/")[0] for rel in files if rel.endswith("/schedule-keda.yaml")}):
        for so in _docs(files[f"{site}/schedule-keda.yaml"]):
            w = ws[(site, so["spec"]["scaleTargetRef"]["name"])]
            spans = [(_cron_minute(t["metadata"]["start"]), _cron_minute(t["metadata"]["end"]),
                      int(t["metadata"]["desiredReplicas"])) for t in so["spec"]["triggers"]]
            for t in range(24 * 60):
                active = [n for a, b, n in spans if (a <= t < b if a < b else (t >= a or t < b))]
                got = max(active, default=so["spec"]["minReplicaCount"])
                win = t // 60
                nxt = (win + 1) % 24
                if w.replicas[nxt] > w.replicas[win] and t >= (win + 1) * 60 - lead_minutes_for(w):
                    assert got >= max(w.replicas[win], w.replicas[nxt]), (w.name, t)
                else:
                    assert got == w.replicas[win], (w.name, t, got)
            checked += 1
    # One ScaledObject per workload whose replicas change during the day (the plan's own replica counts).
    assert checked == sum(len(set(w.replicas)) > 1 for w in ws.values()) >= 1


def test_vllm_commands_fit_the_nodes():
    problem, plan, scenario = default()
    ws = workloads(problem, plan, scenario)
    ev = evaluate(problem, plan)
    pools = {f"{p.site} / {p.gpu}": p for p in problem.pools}
    for w in range(problem.n_windows):
        total = 0
        for title, lines in node_commands(problem, ws, w):
            pool = pools[title.split(" node ")[0]]
            used = [g for ln in lines for m in re.finditer(r"CUDA_VISIBLE_DEVICES=([\d,]+) ", ln)
                    for g in m.group(1).split(",")]
            ports = [m.group(1) for ln in lines for m in re.finditer(r"--port (\d+)", ln)]
            assert len(ports) == len(set(ports))
            shared = sum(1 for ln in lines if ln.startswith("until curl"))
            distinct = set(used)
            assert len(distinct) <= pool.gpus_per_node and all(0 <= int(g) < pool.gpus_per_node for g in distinct)
            # A GPU appears twice only on a shared GPU (its second server).
            assert len(used) - len(distinct) == shared
            total += len(distinct)
        assert total == ev.gpus_per_window[w]


def _pipeline_case():
    """Llama-3.1-405B on 8-GPU H100 nodes: 810 GB of bf16 weights do not fit one node's 8 x 80 GiB x 0.9, so the
    scenario builder offers tp 8 x pp 2 and 3."""
    raw = {"name": "pp", "options": {"window_length_s": 3600},
           "sites": [{"name": "aws:us-east-1", "inventory": [{"gpu": "H100", "nodes": 4, "gpus_per_node": 8}]}],
           "models": [{"name": "Llama-3.1-405B", "tp": [8], "slo": {"ttft_p95_s": 5.0, "tpot_p95_s": 0.2},
                       "token_mix": {"trace": "azure-conv"}, "demand": {"rates": [0.05] * 24}}]}
    sc = scenario_from_raw(raw, source="test")
    problem = build_problem(sc)
    key = next(o.key for o in problem.options if o.pp == 2)
    plan = Plan(replicas={key: (1,) * 12 + (2,) * 12}, status=Status.FEASIBLE, backend="hand")
    assert validate(problem, plan).ok
    return problem, plan, sc


def test_pipeline_parallel_is_a_leader_worker_set():
    problem, plan, sc = _pipeline_case()
    ws = workloads(problem, plan, sc)
    (w,) = ws
    assert w.multi_node and w.pods_per_replica == 2 and w.gpus_per_pod == 8
    files = export_k8s(problem, ws, list(range(24)), DeployFile(), schedule=True)
    assert "&id" not in files["aws-us-east-1/window-13-00.yaml"]  # no YAML anchors for shared values
    docs = _docs(files["aws-us-east-1/window-13-00.yaml"])
    lws = next(d for d in docs if d["kind"] == "LeaderWorkerSet")
    for d in docs + _docs(files["aws-us-east-1/schedule-keda.yaml"]):
        check_manifest(d)
    assert lws["spec"]["replicas"] == 2 and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert "--pipeline-parallel-size 2" in leader["command"][2] and "--tensor-parallel-size 8" in leader["command"][2]
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == "8"
    (so,) = _docs(files["aws-us-east-1/schedule-keda.yaml"])
    assert so["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    text = export_vllm(problem, ws, [13])
    assert text.count("ray start --head") == 2 and text.count("--block  # pipeline stage") == 2


def test_cli_export(tmp_path):
    r = CliRunner().invoke(main, ["export", "k8s", str(PLAN_FILE), "--out", str(tmp_path / "k"), "--window", "19:30"])
    assert r.exit_code == 0, r.output
    written = sorted(str(p.relative_to(tmp_path / "k")) for p in (tmp_path / "k").rglob("*") if p.is_file())
    assert written == ["aws-us-east-1/window-19-00.yaml", "clusters.yaml", "fleetplan-files.json",
                       "gcp-us-central1/window-19-00.yaml"]
    for site in ("aws-us-east-1", "gcp-us-central1"):
        assert (tmp_path / "k" / site / "window-19-00.yaml").read_text() == \
            (GOLDEN / "k8s" / site / "window-19-00.yaml").read_text()
    r = CliRunner().invoke(main, ["export", "vllm", str(PLAN_FILE), "--window", "00:00"])
    assert r.exit_code == 0 and "## window 00:00-01:00" in r.output and "## window 01:00" not in r.output


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_cli_export_replaces_an_earlier_export(tmp_path):
    # The whole day (24 windows and a KEDA schedule per site), then one window into the same folder. Without
    # --prune it is refused, naming the files it would remove, and the folder is left as it was (it removed the 48
    # other files without being asked, easy to do by accident: issue 28). With --prune the folder holds the
    # one-window set only (no stale windows, no stale schedule); the user's own file stays.
    out = tmp_path / "k"
    r = CliRunner().invoke(main, ["export", "k8s", str(PLAN_FILE), "--out", str(out)])
    assert r.exit_code == 0, r.output
    day = _tree(out)
    assert "gcp-us-central1/schedule-keda.yaml" in day and "gcp-us-central1/window-03-00.yaml" in day
    (out / "notes.txt").write_text("mine")
    (out / "gcp-us-central1" / "kustomization.yaml").write_text("mine too")
    before = _tree(out)
    r = CliRunner().invoke(main, ["export", "k8s", str(PLAN_FILE), "--out", str(out), "--window", "19:30"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "field '--out'" in r.output and "48 files of an earlier export" in r.output, r.output
    assert "aws-us-east-1/schedule-keda.yaml" in r.output and "add --prune" in r.output, r.output
    assert _tree(out) == before  # nothing written, nothing removed
    r = CliRunner().invoke(main, ["export", "k8s", str(PLAN_FILE), "--out", str(out), "--window", "19:30",
                                  "--prune"])
    assert r.exit_code == 0, r.output
    assert sorted(_tree(out)) == ["aws-us-east-1/window-19-00.yaml", "clusters.yaml", "fleetplan-files.json",
                                  "gcp-us-central1/kustomization.yaml", "gcp-us-central1/window-19-00.yaml",
                                  "notes.txt"]
    # 2 sites × (24 windows + schedule) + clusters.yaml = 51 files before; 3 kept: 48 removed, and said so.
    assert "removed 48 file(s)" in r.output
    index = json.loads((out / "fleetplan-files.json").read_text())
    assert sorted(index["files"]) == ["aws-us-east-1/window-19-00.yaml", "clusters.yaml",
                                      "gcp-us-central1/window-19-00.yaml"]


def _export_then_edit(tmp_path, rel: str):
    """An export of the golden plan into tmp_path/k with ``rel`` edited since; returns (folder, edited file, tree)."""
    out = tmp_path / "k"
    assert CliRunner().invoke(main, ["export", "k8s", str(PLAN_FILE), "--out", str(out)]).exit_code == 0
    edited = out / "gcp-us-central1" / rel
    edited.write_text(edited.read_text() + "# my edit\n")
    return out, edited, _tree(out)


def test_cli_export_refuses_to_drop_an_edited_file_or_replace_a_users_file(tmp_path):
    out, _edited, before = _export_then_edit(tmp_path, "schedule-keda.yaml")
    r = CliRunner().invoke(main, ["export", "k8s", str(PLAN_FILE), "--out", str(out), "--window", "19:30",
                                  "--prune"])
    assert r.exit_code == 2 and "edited since" in r.output and "schedule-keda.yaml" in r.output, r.output
    assert "move it out of the folder" in r.output and "Traceback" not in r.output
    assert _tree(out) == before  # nothing written, nothing removed
    # A file fleetplan did not write, where the export would write: refused, kept.
    mine = tmp_path / "m"
    (mine / "gcp-us-central1").mkdir(parents=True)
    (mine / "clusters.yaml").write_text("my clusters")
    r = CliRunner().invoke(main, ["export", "k8s", str(PLAN_FILE), "--out", str(mine), "--window", "19:30"])
    assert r.exit_code == 2 and "was not written by an earlier export" in r.output, r.output
    assert _tree(mine) == {"clusters.yaml": "my clusters"}


def test_cli_export_refuses_to_overwrite_an_edited_file(tmp_path):
    # The same rule for replacing as for removing: an exported file edited since is refused, nothing is written.
    out, edited, before = _export_then_edit(tmp_path, "window-05-00.yaml")
    r = CliRunner().invoke(main, ["export", "k8s", str(PLAN_FILE), "--out", str(out)])
    assert r.exit_code == 2 and "edited since" in r.output and "would overwrite" in r.output, r.output
    assert "window-05-00.yaml" in r.output and "move it out of the folder" in r.output
    assert "Traceback" not in r.output and _tree(out) == before
    # Moved away as the message says: the export goes through. An unedited earlier set is replaced silently.
    edited.rename(tmp_path / "mine.yaml")
    r = CliRunner().invoke(main, ["export", "k8s", str(PLAN_FILE), "--out", str(out)])
    assert r.exit_code == 0 and "2 sites into" in r.output, r.output
    assert CliRunner().invoke(main, ["export", "k8s", str(PLAN_FILE), "--out", str(out)]).exit_code == 0


def test_every_out_refuses_a_missing_parent_folder(tmp_path):
    # One rule for every --out: the output file or folder may be new, its parent folder must exist.
    r = CliRunner().invoke(main, ["export", "k8s", str(PLAN_FILE), "--out", str(tmp_path / "typo" / "k")])
    assert r.exit_code == 2 and "does not exist" in r.output and "--out" in r.output, r.output
    assert not (tmp_path / "typo").exists()
    r = CliRunner().invoke(main, ["export", "vllm", str(PLAN_FILE), "--out", str(tmp_path / "typo" / "v.sh")])
    assert r.exit_code == 2 and "does not exist" in r.output, r.output
    r = CliRunner().invoke(main, ["plan", "--out", str(tmp_path / "typo" / "plan.json")])
    assert r.exit_code == 2 and "does not exist" in r.output, r.output
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("args, message", [
    (["--window", "25:00"], "not a time of day"),
    (["--window", "01:00", "--all-windows"], "either --window or --all-windows"),
])
def test_cli_export_bad_input(tmp_path, args, message):
    r = CliRunner().invoke(main, ["export", "k8s", str(PLAN_FILE), "--out", str(tmp_path), *args])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_deploy_file(tmp_path):
    good = tmp_path / "deploy.yaml"
    good.write_text("namespace: llm\nsites:\n  gcp:us-central1: {context: prod-usc1}\n"
                    "models:\n  Llama-3.1-8B: {hf_repo: meta-llama/Llama-3.1-8B-Instruct}\n")
    deploy = read_deploy_file(good)
    problem, plan, scenario = default()
    files = export_k8s(problem, workloads(problem, plan, scenario, deploy), [0], deploy, schedule=False)
    index = yaml.safe_load(files["clusters.yaml"])["sites"]
    assert index["gcp:us-central1"] == {"context": "prod-usc1", "namespace": "llm", "folder": "gcp-us-central1"}
    assert "meta-llama/Llama-3.1-8B-Instruct" in files["gcp-us-central1/window-00-00.yaml"]
    typo = tmp_path / "typo.yaml"
    typo.write_text("sites:\n  aws:us-east-2: {context: x}\n")
    with pytest.raises(InputError, match="aws:us-east-2"):
        export_k8s(problem, workloads(problem, plan, scenario), [0], read_deploy_file(typo), schedule=False)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("namepsace: llm\n")
    with pytest.raises(InputError, match="namepsace"):
        read_deploy_file(unknown)


@pytest.mark.parametrize("text, field, words", [
    # An unknown site, model or GPU type would be ignored silently (a misspelt model keeps the catalog checkpoint).
    ("sites:\n  gcp:us-centrl1: {context: x}\n", "sites.gcp:us-centrl1", "did you mean 'gcp:us-central1'"),
    ("models:\n  Nope: {hf_repo: x/y}\n", "models.Nope", "does not have; its models: Llama-3.1-70B"),
    ("models:\n  Llama-3.1-8b: {hf_repo: x/y}\n", "models.Llama-3.1-8b", "did you mean 'Llama-3.1-8B'"),
    ("gpu_labels: {A100-SXM4-80G: X}\n", "gpu_labels.A100-SXM4-80G", "did you mean 'A100-SXM4-80GB'"),
    # a checkpoint that is neither a repository id nor a path went into vLLM's arguments (found by a fresh user)
    ("models:\n  Llama-3.1-8B: {hf_repo: not a repo}\n", "models.Llama-3.1-8B.hf_repo", "ORG/NAME"),
    # KEDA's cron scaler takes an IANA name (Go's time.LoadLocation); an offset or a made-up name is refused.
    ("timezone: Mars/Base\n", "timezone", "'Mars/Base' is not an IANA time zone name"),
    ("timezone: Europe/Berln\n", "timezone", "did you mean 'Europe/Berlin'"),
    # +05:00 is Etc/GMT-5: IANA's Etc zones reverse the sign (POSIX style).
    ("timezone: '+05:00'\n", "timezone", "Etc/GMT-5 for a fixed offset of +05:00"),
])
def test_deploy_file_bad_values_name_file_field_value_and_fix(tmp_path, text, field, words):
    bad = tmp_path / "d.yaml"
    bad.write_text(text)
    for kind in ("k8s",) if field.startswith("sites") else ("k8s", "vllm"):  # export vllm uses no sites
        r = CliRunner().invoke(main, ["export", kind, str(PLAN_FILE), "--out", str(tmp_path / kind), "--deploy",
                                      str(bad)])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert r.output.startswith(f"Error: {bad}, field '{field}': ") and words in r.output, r.output
        assert not (tmp_path / kind).exists()


def test_deploy_file_iana_timezone_reaches_keda(tmp_path):
    good = tmp_path / "d.yaml"
    good.write_text("timezone: America/New_York\n")
    problem, plan, scenario = default()
    deploy = read_deploy_file(good)
    files = export_k8s(problem, workloads(problem, plan, scenario, deploy), list(range(problem.n_windows)), deploy,
                       schedule=True)
    keda = files["gcp-us-central1/schedule-keda.yaml"]
    assert "timezone: America/New_York" in keda and "timezone: UTC" not in keda


def _readme_step(n: int) -> str:
    text = (HERE.parent / "docs" / "export.md").read_text()
    step = text[text.index(f"\n{n}. **"):text.index(f"\n{n + 1}. **")]
    return " ".join(step.split())


def test_readme_export_steps_match_the_default_plan():
    # docs/export.md "From plan to production" steps 2 and 5 name the nodes, sites and folders of the default plan:
    # derived here from the golden default plan's workloads, so a re-plan that moves the fleet fails until the page
    # follows.
    problem, plan, scenario = default()
    ws = workloads(problem, plan, scenario)
    used = sorted({w.site for w in ws})
    step2, step5 = _readme_step(2), _readme_step(5)
    for site in used:
        for label in sorted({w.gpu_product_label for w in ws if w.site == site}):
            assert f"`{label}` nodes at {site}" in step2, (label, site)
        assert f"k8s/{site.replace(':', '-')}/window-00-00.yaml" in step5
    for site in sorted(set(problem.sites) - set(used)):
        assert f"nothing runs at {site}" in step2
    others = {lab for lab in deployment.gpu_product_labels().values()} - {w.gpu_product_label for w in ws}
    assert not [lab for lab in others if lab in step2]
    # The CLI's summary line, as the README quotes it: "4 workloads at 1 site".
    assert f"its {len(ws)} workloads at {len(used)} site{'s' if len(used) != 1 else ''} (as the export says)" in step2
    # GPUs at the peak: per window, replicas × GPUs per pod × pods per replica, summed over the workloads.
    gpus = [sum(w.replicas[i] * w.gpus_per_pod * w.pods_per_replica for w in ws) for i in range(problem.n_windows)]
    peak = max(gpus)
    assert f"take {peak} GPUs at the peak ({deployment.window_label(problem, gpus.index(peak))})" in step2


def test_gpu_without_a_known_label(monkeypatch):
    problem, plan, scenario = default()
    monkeypatch.setattr(deployment, "gpu_product_labels", lambda: {})
    with pytest.raises(InputError, match="no nvidia.com/gpu.product label known for GPU"):
        workloads(problem, plan, scenario)
    given = DeployFile(gpu_labels={"A100-SXM4-80GB": "A100-LABEL", "H100-SXM-80GB": "H100-LABEL"})
    assert {w.gpu_product_label for w in workloads(problem, plan, scenario, given)} == {"A100-LABEL", "H100-LABEL"}


def test_disaggregated_plan_exports_prefill_and_decode_deployments():
    # disagg_wins: prefill and decode pools of Llama-3.1-70B at one site (plus a colocated replica in two windows).
    problem, plan, scenario, _ = load_plan_file(PD_PLAN_FILE)
    assert validate(problem, plan).ok and plan.pd_replicas
    files, vllm_text = pd_export()
    for rel in GOLDEN_PD:
        assert files[rel] == (PD_PLAN_FILE.parent / "k8s" / rel).read_text(), f"{rel} differs from its golden file"
    assert vllm_text == (PD_PLAN_FILE.parent / "vllm.sh").read_text()
    ev = evaluate(problem, plan)
    roles: dict[str, str] = {}
    checked: set[str] = set()
    for rel, text in files.items():
        if rel == "clusters.yaml":
            continue
        docs = _docs(text)
        for doc in docs:
            key = json.dumps(doc, sort_keys=True)
            if key not in checked:
                check_manifest(doc)
                checked.add(key)
        m = re.fullmatch(r".+/window-(\d\d)-(\d\d)\.yaml", rel)
        if not m:
            continue
        gpus = 0
        for doc in docs:
            if doc["kind"] != "Deployment":
                continue
            pod = doc["spec"]["template"]
            c = pod["spec"]["containers"][0]
            gpus += doc["spec"]["replicas"] * int(c["resources"]["limits"]["nvidia.com/gpu"])
            role = pod["metadata"]["labels"].get("fleetplan.io/role", "colocated")
            roles[doc["metadata"]["name"]] = role
            args = c["args"]
            if role == "colocated":
                assert "--kv-transfer-config" not in args
                assert pod["metadata"]["labels"]["serves.fleetplan.io/llama-3-1-70b"] == "true"
                continue
            config = json.loads(args[args.index("--kv-transfer-config") + 1])
            assert config == {"kv_connector": "NixlConnector",
                              "kv_role": {"prefill": "kv_producer", "decode": "kv_consumer"}[role]}
            assert pod["metadata"]["labels"][f"{role}.fleetplan.io/llama-3-1-70b"] == "true"
            assert "serves.fleetplan.io/llama-3-1-70b" not in pod["metadata"]["labels"]  # behind the proxy only
            env = {e["name"]: e for e in c["env"]}
            assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
            assert ("--max-num-seqs" in args) is (role == "decode")
        # Independent check: the GPUs asked for in each window are the plan's (prefill, decode and colocated).
        assert gpus == ev.gpus_per_window[window_index(problem, f"{m.group(1)}:{m.group(2)}")]
        svc = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
        assert svc["vllm-llama-3-1-70b-prefill"]["spec"]["clusterIP"] == "None"
        assert set(svc) == {"vllm-llama-3-1-70b", "vllm-llama-3-1-70b-prefill", "vllm-llama-3-1-70b-decode"}
    assert set(roles.values()) == {"colocated", "prefill", "decode"}
    # vLLM commands: the same flags, one NIXL handshake port per server on a node, the proxy's endpoints listed.
    assert vllm_text.count("kv_role\":\"kv_producer") and vllm_text.count("kv_role\":\"kv_consumer")
    assert "VLLM_NIXL_SIDE_CHANNEL_PORT=5601" in vllm_text and "# prefill servers: " in vllm_text
    for w in range(problem.n_windows):
        for _, lines in node_commands(problem, workloads(problem, plan, scenario), w):
            ports = re.findall(r"VLLM_NIXL_SIDE_CHANNEL_PORT=(\d+)", "\n".join(lines))
            assert len(ports) == len(set(ports))


def regenerate(replan: bool) -> None:
    """Rewrite the golden files (module docstring)."""
    if replan:
        subprocess.run([sys.executable, "-m", "fleetplan.cli.main", "plan", "--out", str(PLAN_FILE)], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, "-m", "fleetplan.cli.main", "plan", "disagg_wins", "--no-baselines",
                        "--out", str(PD_PLAN_FILE)], check=True, stdout=subprocess.DEVNULL)
    default.cache_clear()
    full_export.cache_clear()
    pd_export.cache_clear()
    files, vllm_text = full_export()
    for rel in GOLDEN_K8S:
        p = GOLDEN / "k8s" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(files[rel])
    (GOLDEN / "vllm.sh").write_text(vllm_text)
    files, vllm_text = pd_export()
    for rel in GOLDEN_PD:
        p = PD_PLAN_FILE.parent / "k8s" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(files[rel])
    (PD_PLAN_FILE.parent / "vllm.sh").write_text(vllm_text)


if __name__ == "__main__":
    regenerate("--replan" in sys.argv)


def test_an_alias_with_other_weights_is_exported_with_its_own_checkpoint(tmp_path):
    # The README's small scenario naming Llama-3.1-8B-Instruct: planned as the catalog's Llama-3.1-8B (aliases.csv:
    # the same architecture), whose checkpoint meta-llama/Llama-3.1-8B holds the base weights. The export serves the
    # alias's own checkpoint (aliases.csv's hf_repo column), unless the deployment file names another.
    plan = _planned_small(tmp_path, SMALL.replace("name: Llama-3.1-8B\n", "name: Llama-3.1-8B-Instruct\n"))
    assert "Llama-3.1-8B-Instruct" in (tmp_path / "small.yaml").read_text()
    out = tmp_path / "vllm.sh"
    r = CliRunner().invoke(main, ["export", "vllm", str(plan), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "vllm serve meta-llama/Llama-3.1-8B-Instruct " in out.read_text()
    assert "vllm serve meta-llama/Llama-3.1-8B " not in out.read_text()
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text("models:\n  Llama-3.1-8B: {hf_repo: my-org/llama-8b-ft}\n")
    out2 = tmp_path / "vllm2.sh"
    r = CliRunner().invoke(main, ["export", "vllm", str(plan), "--deploy", str(deploy), "--out", str(out2)])
    assert r.exit_code == 0, r.output
    assert "vllm serve my-org/llama-8b-ft " in out2.read_text()


def test_an_alias_is_served_under_the_name_the_scenario_used(tmp_path):
    # Clients call the name the scenario gave (Llama-3.1-8B-Instruct), not the catalog model it is planned as
    # (Llama-3.1-8B): --served-model-name is the scenario's name in both exports. The Kubernetes objects keep the
    # catalog name's DNS-label form in names and labels (the alias's own 'meta-llama/...' spelling would not be a
    # valid label value), and every manifest still validates; the Service says the served name in an annotation.
    plan = _planned_small(tmp_path, SMALL.replace("name: Llama-3.1-8B\n", "name: Llama-3.1-8B-Instruct\n"))
    r = CliRunner().invoke(main, ["export", "vllm", str(plan)])
    assert r.exit_code == 0, r.output
    assert "--served-model-name Llama-3.1-8B-Instruct " in r.output
    assert "--served-model-name Llama-3.1-8B " not in r.output
    r = CliRunner().invoke(main, ["export", "k8s", str(plan), "--out", str(tmp_path / "k"), "--window", "02:00"])
    assert r.exit_code == 0, r.output
    docs = _docs((tmp_path / "k" / "aws-us-east-1" / "window-02-00.yaml").read_text())
    for doc in docs:
        check_manifest(doc)
    deploys = [d for d in docs if d["kind"] == "Deployment"]
    assert deploys
    for deploy in deploys:
        command = " ".join(deploy["spec"]["template"]["spec"]["containers"][0]["args"])
        assert "--served-model-name Llama-3.1-8B-Instruct " in command, command
        assert deploy["spec"]["template"]["metadata"]["labels"]["serves.fleetplan.io/llama-3-1-8b"] == "true"
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    assert svc["metadata"]["name"] == "vllm-llama-3-1-8b"
    assert svc["metadata"]["annotations"]["fleetplan.io/served-model-name"] == "Llama-3.1-8B-Instruct"
    # The deployment file may name the model as the scenario does (it was told the scenario "does not have" it);
    # naming it both ways is two checkpoints for one model, refused.
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text("models:\n  Llama-3.1-8B-Instruct: {hf_repo: my-org/llama-8b-instruct-ft}\n")
    r = CliRunner().invoke(main, ["export", "vllm", str(plan), "--deploy", str(deploy)])
    assert r.exit_code == 0, r.output
    assert "vllm serve my-org/llama-8b-instruct-ft --served-model-name Llama-3.1-8B-Instruct " in r.output
    deploy.write_text("models:\n  Llama-3.1-8B-Instruct: {hf_repo: a/b}\n  Llama-3.1-8B: {hf_repo: c/d}\n")
    r = CliRunner().invoke(main, ["export", "vllm", str(plan), "--deploy", str(deploy)])
    assert r.exit_code == 2 and "field 'models.Llama-3.1-8B'" in r.output and "both" in r.output, r.output
    # A name typed as the checkpoint's repository id is served as typed too (vLLM's own default served name).
    plan = _planned_small(tmp_path, SMALL.replace("name: Llama-3.1-8B\n", "name: meta-llama/Llama-3.1-8B\n"))
    r = CliRunner().invoke(main, ["export", "vllm", str(plan)])
    assert r.exit_code == 0 and "--served-model-name meta-llama/Llama-3.1-8B " in r.output, r.output


def test_schedule_of_a_short_horizon_names_the_windows(tmp_path):
    # The README's small scenario plans 3 one-hour windows (its rates: list), 3 h, not a day: the KEDA schedule
    # refuses it naming the plan's windows, not window_length_s (3600 s is a whole number of minutes). Its last rate
    # doubled (24 req/s, above one H100 replica's 16.3 x 0.9 margin) so the replicas change between windows and the
    # export needs a schedule (at 12 req/s one replica holds all three windows and nothing is scheduled).
    plan = _planned_small(tmp_path, SMALL.replace("rates: [1.0, 4.0, 12.0]", "rates: [1.0, 4.0, 24.0]"))
    r = CliRunner().invoke(main, ["export", "k8s", str(plan), "--out", str(tmp_path / "k8s")])
    assert r.exit_code == 2
    assert "3 windows of 3600 s = 3 h" in r.output and "n_windows" in r.output and "--window" in r.output
    assert not (tmp_path / "k8s").exists()
