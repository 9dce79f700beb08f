"""fleetplan diff: plan against plan, per model, pool and window, with the cost delta (issue 28, item 1)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from click.testing import CliRunner

from fleetplan.cli.diff import _spans
from fleetplan.cli.main import main
from fleetplan.errors import InputError
from fleetplan.outputs.plandiff import RowChange, diff_plans
from fleetplan.outputs.planio import load_plan_file
from fleetplan.placement.validate import validate
from fleetplan.service.runtime import ReplanService, ServiceSettings, load_problem

GOLDEN = Path(__file__).parent / "golden" / "export"
PLAN = GOLDEN / "default_plan.json"
DISAGG = GOLDEN / "disagg_wins" / "plan.json"


def test_one_more_replica_in_one_window_is_one_row_its_gpu_hours_and_its_start():
    problem, plan, _sc, _d = load_plan_file(PLAN)
    # A model served only at its origin site (no request egress before or after, so the delta is GPUs + start).
    key = next(k for k in plan.replicas if k[0] == "Mixtral-8x7B-v0.1")
    assert problem.pool_by_id[key[1]].site == problem.model_by_name[key[0]].origin_site
    counts = list(plan.replicas[key])
    assert counts[4] == counts[5] == counts[6]  # so one more in window 5 is one rise and one fall
    counts[5] += 1
    more = replace(plan, replicas={**plan.replicas, key: tuple(counts)}, objective_usd=None, bound_usd=None, gap=None)
    assert validate(problem, more).ok  # more capacity than the original: still a valid plan
    d = diff_plans(problem, plan, problem, more)
    assert len(d.rows) == 1 and d.rows[0].windows() == [5]
    assert (d.rows[0].added, d.rows[0].removed, d.migrations) == (1, 0, 1)
    o = problem.option_by_key[key]
    pool = problem.pool_by_id[o.pool]
    # By hand: one more replica for one 1-h window = tp x pp GPUs x the pool's price x 1 h, plus one start
    # (the rise from window 4 to window 5) at the option's start cost; nothing else changes.
    expected = o.tp * o.pp * pool.usd_per_gpu_hour * 1.0 + o.start_cost_usd
    assert d.cost_delta_usd_per_day == pytest.approx(expected, rel=1e-9)
    back = diff_plans(problem, more, problem, plan)
    assert (back.rows[0].added, back.rows[0].removed) == (0, 1)
    assert back.cost_delta_usd_per_day == pytest.approx(-expected, rel=1e-9)


def test_the_same_plan_is_no_change_and_plans_on_other_windows_are_refused():
    problem, plan, _sc, _d = load_plan_file(PLAN)
    assert diff_plans(problem, plan, problem, plan).rows == ()
    p2, plan2, _s2, _d2 = load_plan_file(DISAGG)
    with pytest.raises(InputError, match="different windows"):
        diff_plans(problem, plan, p2, plan2)


def test_cli_json_and_the_refusal_as_one_line():
    r = CliRunner().invoke(main, ["diff", str(PLAN), str(PLAN), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["rows"] == [] and d["cost_delta_usd_per_day"] == 0 and d["migrations"] == 0
    r = CliRunner().invoke(main, ["diff", str(PLAN), str(DISAGG)])
    assert r.exit_code == 2 and "different windows" in r.output and "Traceback" not in r.output


# ------------------------------------------------------------------------ a plan against the cluster or a stored plan
def _cluster_list(tmp_path: Path, plan: Path, hhmm: str) -> dict:
    """The Deployments, LeaderWorkerSets and Services `export k8s --window hhmm` writes for ``plan``, as one
    kubectl List (what `kubectl get deploy,lws,svc -o json` prints after they were applied)."""
    out = tmp_path / "k8s"
    r = CliRunner().invoke(main, ["export", "k8s", str(plan), "--out", str(out), "--window", hhmm])
    assert r.exit_code == 0, r.output
    items = [d for f in sorted(out.glob(f"*/window-{hhmm.replace(':', '-')}.yaml"))
             for d in yaml.safe_load_all(f.read_text()) if d and d["kind"] != "Namespace"]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _diff_json(*args: str) -> dict:
    r = CliRunner().invoke(main, ["diff", *args, "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_the_cluster_running_the_exported_window_is_no_change_and_one_scaled_workload_is_one_row(tmp_path):
    problem, plan, _sc, d = load_plan_file(PLAN)
    assert validate(problem, plan).ok
    doc = _cluster_list(tmp_path, PLAN, "14:00")
    f = tmp_path / "cluster.json"
    f.write_text(json.dumps(doc))
    same = _diff_json(str(PLAN), "--cluster", str(f), "--at", "14:00")
    # The exported window read back: no row, and the GPUs are the plan file's own count for window 14.
    assert same["rows"] == [] and same["window"] == 14 and same["window_utc"] == "14:00-15:00 UTC"
    assert same["gpus_running"] == same["gpus_plan"] == d["windows"][14]["gpus"]
    assert same["left_out"] == {"Service": sum(1 for i in doc["items"] if i["kind"] == "Service")}
    assert "not known from the cluster" in same["unknown"]
    # Scale one dedicated Deployment up by 2 replicas (someone ran kubectl scale): one row, running n+2, plan n.
    dep = next(i for i in doc["items"] if i["kind"] == "Deployment" and i["spec"]["replicas"] >= 1
               and not i["metadata"]["name"].startswith("shared-"))
    n = dep["spec"]["replicas"]
    tp = int(dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
    pool = problem.pool_by_id[dep["metadata"]["annotations"]["fleetplan.io/pool"]]
    dep["spec"]["replicas"] = n + 2
    dep["status"] = {"readyReplicas": n}  # the two new replicas still loading
    f.write_text(json.dumps(doc))
    out = _diff_json(str(PLAN), "--cluster", str(f), "--at", "14:00")
    assert [(r["running"], r["plan"], r["removed"], r["added"]) for r in out["rows"]] == [(n + 2, n, 2, 0)]
    # By hand: applying the plan's window stops 2 replicas of tp GPUs each: -2 x tp GPUs, at the pool's price.
    assert out["gpus_running"] - out["gpus_plan"] == 2 * tp
    assert out["list_delta_usd_per_hour"] == pytest.approx(round(-2 * tp * pool.usd_per_gpu_hour, 2), abs=0.011)
    assert out["migrations"] == 2 and out["not_ready"] == 2


def test_a_cluster_file_that_is_no_kubectl_list_or_names_an_unknown_model_is_refused(tmp_path):
    doc = _cluster_list(tmp_path, PLAN, "14:00")
    f = tmp_path / "one.json"
    f.write_text(json.dumps(doc["items"][0]))  # `kubectl get deploy NAME -o json`: one object, not a list
    r = CliRunner().invoke(main, ["diff", str(PLAN), "--cluster", str(f), "--at", "14:00"])
    assert r.exit_code == 2 and "not a kubectl list" in r.output and "field 'kind'" in r.output
    assert "kubectl get deploy,lws" in r.output and "Traceback" not in r.output
    dep = next(i for i in doc["items"] if i["kind"] == "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    label = next(k for k in labels if k.startswith("serves.fleetplan.io/"))
    labels["serves.fleetplan.io/llama-3-1-8c"] = labels.pop(label)
    f.write_text(json.dumps(doc))
    r = CliRunner().invoke(main, ["diff", str(PLAN), "--cluster", str(f), "--at", "14:00"])
    assert r.exit_code == 2 and "unknown model 'llama-3-1-8c'" in r.output and "did you mean" in r.output
    assert "serves.fleetplan.io/llama-3-1-8c" in r.output
    # one thing to compare with, and the options of one form not given to another
    for args, said in ((["--cluster", str(f), str(PLAN)], "not PLAN_B and --cluster"), ([], "nothing to compare"),
                       ([str(PLAN), "--at", "14:00"], "drop --at"), (["--plan-id", "3", "--cluster", str(f)],
                                                                     "--plan-id picks a stored plan")):
        r = CliRunner().invoke(main, ["diff", str(PLAN), *args])
        assert r.exit_code == 2 and said in r.output, r.output


def _stored_service_plan(db_url: str, at_s: float) -> dict:
    """The plan a re-planner service on the default scenario stores at ``at_s`` (its cold start)."""
    problem, lt = load_problem(None)
    svc = ReplanService(ServiceSettings(db_url=db_url, insecure_no_auth=True, interval_s=0, resolve_every_s=0),
                        problem, lt, clock=lambda: at_s)
    try:
        return svc.plan_row
    finally:
        svc.close()


def check_stored_plan_diff(db_url: str) -> None:
    """``diff PLAN --db db_url`` against the service's stored plan, checked against both plans' JSON rows."""
    at_s = 1_764_597_600.0 + 600  # 2025-12-01 14:10 UTC (1_764_547_200 is 00:00; + 14 h = 50_400 s)
    row = _stored_service_plan(db_url, at_s)
    out = _diff_json(str(PLAN), "--db", db_url)
    assert out["window"] == 14 and out["plan_id"] == row["id"] and out["running"] == "stored plan"
    assert out["stored_cost_usd_per_hour"] == pytest.approx(row["cost_usd_per_hour"])
    # Independently, from the two plans' JSON: the replicas of each dedicated (model, pool, tp) in window 14 of
    # the plan file against the stored plan's one window.
    plan_d = json.loads(PLAN.read_text())
    ours = {(r["model"], r["pool"], f"tp{r['tp']}"): r["counts"][14] for r in plan_d["replicas"]}
    theirs = {(r["model"], r["pool"], f"tp{r['tp']}"): r["counts"][0] for r in row["body"]["replicas"]}
    expected = {k: (theirs.get(k, 0), ours.get(k, 0)) for k in ours.keys() | theirs.keys()
                if theirs.get(k, 0) != ours.get(k, 0)}
    got = {(r["model"], r["pool"], r["shape"]): (r["running"], r["plan"]) for r in out["rows"]
           if not r["shape"].startswith("shared")}
    assert got == expected
    # --at picks another window; --plan-id an absent plan is named
    assert _diff_json(str(PLAN), "--db", db_url, "--at", "03:30")["window"] == 3
    r = CliRunner().invoke(main, ["diff", str(PLAN), "--db", db_url, "--plan-id", "99"])
    assert r.exit_code == 2 and "no stored plan 99" in r.output


def test_a_plan_against_the_plan_the_service_stored_in_sqlite(tmp_path):
    check_stored_plan_diff(f"sqlite:///{tmp_path / 's.db'}")
    # A plan of another scenario against the default scenario's stored plan printed "+6 GPUs ..." with exit 0
    # (issue 28): the stored plan's name says its scenario ('default (online window)').
    r = CliRunner().invoke(main, ["diff", str(DISAGG), "--db", f"sqlite:///{tmp_path / 's.db'}"])
    assert r.exit_code == 2 and "field '--db'" in r.output, r.output
    assert "is a plan of the scenario 'default'" in r.output and "of 'disagg-wins'" in r.output, r.output
    r = CliRunner().invoke(main, ["diff", str(PLAN), "--db", f"sqlite:///{tmp_path / 'none.db'}"])
    assert r.exit_code == 2 and "no database file" in r.output and not (tmp_path / "none.db").exists()


def test_diff_live_reads_the_clusters_through_the_kubernetes_api(tmp_path):
    # The objects of the exported window 14:00, served by a stand-in API server (each site's cluster under a path
    # of its own); the live read gives what the file form gives (no change at 14:00), and a context the kubeconfig
    # lacks is named.
    doc = _cluster_list(tmp_path, PLAN, "14:00")
    by_path: dict[str, list] = {}
    for item in doc["items"]:
        meta = item["metadata"]
        plural = {"Deployment": "/apis/apps/v1/namespaces/{}/deployments",
                  "LeaderWorkerSet": "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{}/leaderworkersets"}.get(
                      item["kind"])
        if plural:
            site = meta["annotations"]["fleetplan.io/site"].replace(":", "-")
            by_path.setdefault(f"/{site}" + plural.format(meta["namespace"]), []).append(item)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            path = urlparse(self.path).path
            kind = "LeaderWorkerSetList" if "leaderworkersets" in path else "DeploymentList"
            data = json.dumps({"apiVersion": "v1", "kind": kind, "metadata": {},
                               "items": by_path.get(path, [])}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sites = sorted({i["metadata"]["annotations"]["fleetplan.io/site"] for i in doc["items"]
                        if i["kind"] != "Service"})
        url = f"http://127.0.0.1:{server.server_address[1]}"
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": s, "cluster": {"server": f"{url}/{s.replace(':', '-')}"}} for s in sites],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": s, "context": {"cluster": s, "user": "u"}} for s in sites]}))
        # without --deploy: each site's context is its name and the namespace the export's default
        out = _diff_json(str(PLAN), "--live", "--kubeconfig", str(kubeconfig), "--at", "14:00")
        assert out["rows"] == [] and out["workloads"] == sum(len(v) for v in by_path.values())
        assert out["gpus_running"] == out["gpus_plan"] > 0
        missing = tmp_path / "other"
        missing.write_text(kubeconfig.read_text().replace(f"name: {sites[0]}", "name: elsewhere"))
        r = CliRunner().invoke(main, ["diff", str(PLAN), "--live", "--kubeconfig", str(missing), "--at", "14:00"])
        assert r.exit_code == 2 and repr(sites[0]) in r.output and "Traceback" not in r.output
        r = CliRunner().invoke(main, ["diff", str(PLAN), str(PLAN), "--kubeconfig", str(kubeconfig)])
        assert r.exit_code == 2 and "--kubeconfig without --live" in r.output
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------- cluster lists a fresh user got wrong (issue 31)
def _write(tmp_path: Path, name: str, doc: dict) -> str:
    f = tmp_path / name
    f.write_text(json.dumps(doc))
    return str(f)


def _refused(*args: str) -> str:
    r = CliRunner().invoke(main, ["diff", str(PLAN), *args, "--at", "14:00"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    return r.output


def test_a_cluster_list_given_twice_or_holding_an_object_twice_is_refused(tmp_path):
    doc = _cluster_list(tmp_path, PLAN, "14:00")
    f = _write(tmp_path, "c.json", doc)
    assert "given 2 times" in _refused("--cluster", f, "--cluster", f)
    dep = next(i for i in doc["items"] if i["kind"] == "Deployment")
    doc["items"].append(dep)  # the same Deployment (kind, namespace, name) a second time
    out = _refused("--cluster", _write(tmp_path, "dup.json", doc))
    assert dep["metadata"]["name"] in out and "counted twice" in out


def test_sites_no_cluster_list_covers_are_left_out_unless_named_with_covers(tmp_path):
    doc = _cluster_list(tmp_path, PLAN, "14:00")
    work = [i for i in doc["items"] if i["kind"] in ("Deployment", "LeaderWorkerSet")]
    sites = sorted({i["metadata"]["annotations"]["fleetplan.io/site"] for i in work})
    assert len(sites) >= 2
    one = {**doc, "items": [i for i in work if i["metadata"]["annotations"]["fleetplan.io/site"] == sites[0]]}
    f = _write(tmp_path, "one.json", one)
    out = _diff_json(str(PLAN), "--cluster", f, "--at", "14:00")
    # Only sites[0] is compared: it runs what the plan's window asks there, so no row, and the other sites are
    # named as not covered (before, they showed as '0 running -> +N').
    assert out["rows"] == [] and out["sites_covered"] == sites[:1] and out["sites_not_covered"] == sites[1:]
    # By hand: the GPUs of sites[0] = sum over its dedicated workloads of replicas x tp x pp, + 1 per shared replica.
    gpus = 0
    for i in one["items"]:
        spec = i["spec"]
        if i["metadata"]["name"].startswith("shared-"):
            gpus += spec["replicas"]
            continue
        tmpl = spec["template"] if i["kind"] == "Deployment" else spec["leaderWorkerTemplate"]["leaderTemplate"]
        pp = 1 if i["kind"] == "Deployment" else spec["leaderWorkerTemplate"]["size"]
        gpus += spec["replicas"] * int(tmpl["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) * pp
    assert out["gpus_running"] == out["gpus_plan"] == gpus
    r = CliRunner().invoke(main, ["diff", str(PLAN), "--cluster", f, "--at", "14:00"])
    assert "not covered, left out of the comparison: " + ", ".join(sites[1:]) in r.output
    # --covers sites[1]: its cluster runs nothing, so every plan row there is '0 -> n'.
    out = _diff_json(str(PLAN), "--cluster", f, "--covers", sites[1], "--at", "14:00")
    assert out["rows"] and all(r["running"] == 0 and r["plan"] > 0 for r in out["rows"])
    assert "did you mean" in _refused("--cluster", f, "--covers", sites[1] + "x")


def test_nonsense_values_in_a_cluster_list_are_refused_naming_item_field_and_value(tmp_path):
    doc = _cluster_list(tmp_path, PLAN, "14:00")
    dep = next(i for i in doc["items"] if i["kind"] == "Deployment" and i["spec"]["replicas"] >= 1
               and not i["metadata"]["name"].startswith("shared-"))
    name, n = dep["metadata"]["name"], dep["spec"]["replicas"]
    limits = dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    gpu = limits["nvidia.com/gpu"]
    limits["nvidia.com/gpu"] = 0
    out = _refused("--cluster", _write(tmp_path, "g.json", doc))
    assert name in out and "nvidia.com/gpu 0 is not a GPU count" in out
    limits["nvidia.com/gpu"] = gpu
    for ready in (-1, n + 1):
        dep["status"] = {"readyReplicas": ready}
        out = _refused("--cluster", _write(tmp_path, "r.json", doc))
        assert name in out and "status.readyReplicas" in out and str(ready) in out
    del dep["status"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    label = next(k for k in labels if k.startswith("serves.fleetplan.io/"))
    labels[label] = "false"
    out = _refused("--cluster", _write(tmp_path, "l.json", doc))
    assert label in out and "'false'" in out and "writes 'true'" in out
    out = _refused("--cluster", _write(tmp_path, "d.json", {"apiVersion": "v1", "kind": "List", "items": {}}))
    assert "items must be a JSON array" in out


def test_a_leader_worker_set_of_size_0_is_refused_naming_the_field(tmp_path):
    # A LeaderWorkerSet's group size is the replica's pipeline stages (pods of tp GPUs); size 0 was read as pp 0, a
    # replica of no GPUs. The default plan has none, so one of its Deployments is recast as a LeaderWorkerSet.
    doc = _cluster_list(tmp_path, PLAN, "14:00")
    dep = next(i for i in doc["items"] if i["kind"] == "Deployment" and not i["metadata"]["name"].startswith("shared-"))
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": dep["metadata"],
           "spec": {"replicas": dep["spec"]["replicas"],
                    "leaderWorkerTemplate": {"size": 0, "leaderTemplate": dep["spec"]["template"]}}}
    doc["items"] = [lws if i is dep else i for i in doc["items"]]
    for size in (0, -2, "2"):
        lws["spec"]["leaderWorkerTemplate"]["size"] = size
        out = _refused("--cluster", _write(tmp_path, "lws.json", doc))
        assert dep["metadata"]["name"] in out and "spec.leaderWorkerTemplate.size" in out, out
        assert f"{size!r} is not a group size" in out and "a whole number >= 1" in out, out


def test_live_without_any_kubeconfig_says_where_it_looked(tmp_path, monkeypatch):
    pytest.importorskip("kubernetes")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    out = _refused("--live")
    assert "no kubeconfig found" in out and str(tmp_path / ".kube" / "config") in out


def test_plans_over_different_horizons_of_equal_windows_are_refused_naming_the_horizons():
    problem, plan, _sc, _d = load_plan_file(PLAN)
    # The same scenario cut to its first 3 windows: 3 x 3600 s = 3 h against 24 x 3600 s = 24 h, same window length.
    short = replace(problem, n_windows=3,
                    models=tuple(replace(m, demand_req_per_s=m.demand_req_per_s[:3]) for m in problem.models))
    with pytest.raises(InputError) as e:
        diff_plans(short, plan, problem, plan)
    assert "3 x 3600 s = 3 h vs 24 x 3600 s = 24 h" in str(e.value) and "same horizon" in str(e.value)
    assert "window_length_s" not in str(e.value)


def test_spans_name_the_end_of_the_day_and_a_whole_day():
    # 24 hourly windows. A change in windows 20-23 ends at midnight: '20:00-24:00' (it read '20:00-00:00', an empty
    # range); a change in every window is 'all day' (a fresh user saw a shared GPU's '00:00-00:00 1->2').
    late = RowChange("m", "p", "tp1", (1,) * 24, (1,) * 20 + (2,) * 4)
    assert _spans(late, 3600) == "20:00-24:00 1->2"
    allday = RowChange("m", "p", "shared with a", (1,) * 24, (2,) * 24)
    assert _spans(allday, 3600) == "all day 1->2"
    morning = RowChange("m", "p", "tp1", (0,) * 2 + (1,) * 22, (1,) * 24)
    assert _spans(morning, 3600) == "00:00-02:00 0->1"
    # a two-day horizon: each time names its day; the whole horizon is not 'all day'
    two = RowChange("m", "p", "tp1", (0,) * 48, (1,) * 48)
    assert _spans(two, 3600) == "d1 00:00-d2 24:00 0->1"
    assert _spans(RowChange("m", "p", "tp1", (0,) * 48, (0,) * 30 + (1,) * 2 + (0,) * 16), 3600) == \
        "d2 06:00-d2 08:00 0->1"
