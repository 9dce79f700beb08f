"""``fleetplan serve --actuate k8s``: the actuator against a small Kubernetes API server in-process (HTTP on
127.0.0.1, the endpoints the actuator uses, able to fail and to keep replicas unready), through the official
``kubernetes`` client: start before stop, idempotence, dry run, failures and timeouts, and the service's commit hook.
No test against a real kube-apiserver: it skipped in both branches (no binary here; when found, no certificates
wired) and so could not fail (issue 28); the in-process API server covers the calls the actuator makes."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import pytest
from kubernetes import client as k8s
from service_support import wait_until

from fleetplan.cli.main import main
from fleetplan.cli.serve import attach_actuator
from fleetplan.export.deployment import DeployFile, SiteTarget, workload_name
from fleetplan.outputs.planio import plan_to_dict
from fleetplan.service.actuate import K8sActuator, node_availability, plan_targets
from fleetplan.service.runtime import ReplanService, ServiceSettings, load_problem

pytestmark = pytest.mark.xdist_group("actuate")

NS = "llm"
MANAGED = {"app.kubernetes.io/managed-by": "fleetplan"}
_DEP = re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/deployments(?:/([^/]+))?(/scale)?$")
_LWS = re.compile(r"^/apis/leaderworkerset\.x-k8s\.io/v1/namespaces/([^/]+)/leaderworkersets(?:/([^/]+))?(/scale)?$")


class FakeKube:
    """The API server's state: {(kind, namespace, name): {'replicas', 'ready', 'polls_left', 'labels'}}.

    ``ready_after_polls``: readiness GETs after a scale-up before the new replicas are ready (None: never).
    ``fail_patches``: the next that many PATCH requests answer 500. ``requests``: (method, kind, name, replicas).
    """

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.ready_after_polls: int | None = 0
        self.fail_patches = 0
        self.requests: list[tuple[str, str, str, int | None]] = []
        self.lock = threading.Lock()
        #: GPU nodes: (name, nvidia.com/gpu.product, ready, cordoned)
        self.nodes: list[tuple[str, str, bool, bool]] = []

    def add(self, kind: str, name: str, replicas: int, *, managed: bool = True) -> None:
        self.objects[(kind, NS, name)] = {"replicas": replicas, "ready": replicas, "polls_left": 0,
                                          "labels": dict(MANAGED) if managed else {}}

    def replicas(self, kind: str, name: str) -> int:
        return self.objects[(kind, NS, name)]["replicas"]

    # ---- JSON bodies the client deserializes ----
    @staticmethod
    def _meta(name, ns, labels=None):
        return {"name": name, "namespace": ns, "labels": labels or {}}

    def deployment(self, ns, name, o):
        sel = {"fleetplan.io/workload": name}
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": self._meta(name, ns, o["labels"]),
                "spec": {"replicas": o["replicas"], "selector": {"matchLabels": sel},
                         "template": {"metadata": {"labels": sel},
                                      "spec": {"containers": [{"name": "vllm", "image": "vllm"}]}}},
                "status": {"replicas": o["replicas"], "readyReplicas": o["ready"]}}

    def lws(self, ns, name, o):
        return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "metadata": self._meta(name, ns, o["labels"]), "spec": {"replicas": o["replicas"]},
                "status": {"replicas": o["replicas"], "readyReplicas": o["ready"]}}

    @staticmethod
    def scale(ns, name, o):
        return {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name, "namespace": ns},
                "spec": {"replicas": o["replicas"]}, "status": {"replicas": o["replicas"]}}

    # ---- request handling ----
    def node_list(self, selector: str) -> dict:
        key, _, value = selector.partition("=")
        items = [{"metadata": {"name": n, "labels": {"nvidia.com/gpu.product": label}},
                  "spec": {"unschedulable": cordoned},
                  "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
                 for n, label, ready, cordoned in self.nodes if key == "nvidia.com/gpu.product" and label == value]
        return {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": items}

    def handle(self, method: str, path: str, body: dict | None, query: str = "") -> tuple[int, dict]:
        if path == "/api/v1/nodes":
            from urllib.parse import parse_qs
            return 200, self.node_list(parse_qs(query).get("labelSelector", [""])[0])
        with self.lock:
            routes = [(k, rx.match(path)) for k, rx in (("Deployment", _DEP), ("LeaderWorkerSet", _LWS))]
            found = [(k, m) for k, m in routes if m]
            if not found:
                return 404, _status(404, f"no route {path}")
            kind, m = found[0]
            ns, name, sub = m.group(1), m.group(2), m.group(3)
            if name is None:  # list
                items = [self.deployment(n, nm, o) if kind == "Deployment" else self.lws(n, nm, o)
                         for (k, n, nm), o in sorted(self.objects.items())
                         if k == kind and n == ns and o["labels"].get("app.kubernetes.io/managed-by") == "fleetplan"]
                return 200, {"apiVersion": "v1", "kind": f"{kind}List", "metadata": {}, "items": items}
            o = self.objects.get((kind, ns, name))
            if o is None:
                return 404, _status(404, f"{kind} {name} not found")
            if method == "PATCH":
                n = int(body["spec"]["replicas"])
                self.requests.append(("PATCH", kind, name, n))
                if self.fail_patches > 0:
                    self.fail_patches -= 1
                    return 500, _status(500, "etcdserver: request timed out")
                if n > o["replicas"]:
                    o["polls_left"] = self.ready_after_polls if self.ready_after_polls is not None else 10**9
                o["ready"] = min(o["ready"], n)
                o["replicas"] = n
                return 200, self.scale(ns, name, o)
            self.requests.append(("GET", kind, name + (sub or ""), None))
            if sub:
                return 200, self.scale(ns, name, o)
            if o["ready"] < o["replicas"]:
                if o["polls_left"] <= 0:
                    o["ready"] = o["replicas"]
                else:
                    o["polls_left"] -= 1
            return 200, self.deployment(ns, name, o) if kind == "Deployment" else self.lws(ns, name, o)


def _status(code: int, message: str) -> dict:
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "message": message, "code": code}


@pytest.fixture
def kube():
    state = FakeKube()

    class Handler(BaseHTTPRequestHandler):
        def _do(self, method):
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n)) if n else None
            url = urlparse(self.path)
            code, out = state.handle(method, url.path, body, url.query)
            data = json.dumps(out).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            self._do("GET")

        def do_PATCH(self):  # noqa: N802
            self._do("PATCH")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cfg = k8s.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    api = k8s.ApiClient(cfg)
    yield state, api
    server.shutdown()
    server.server_close()


class FakeTime:
    def __init__(self) -> None:
        self.t = 1_000.0

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


DEPLOY = DeployFile(sites={"aws:us-east-1": SiteTarget(context="use1", namespace=NS)})
BIG = workload_name("Llama-3.1-70B", "H100-SXM-80GB", 8, 1)
SMALL = workload_name("Llama-3.1-70B", "H100-SXM-80GB", 2, 1)
PIPE = workload_name("Llama-3.1-405B", "H100-SXM-80GB", 8, 2)


def row(pid: int, **counts: int) -> dict:
    """A plan row whose one-window plan runs ``counts`` ({'big': n, 'small': n, 'pipe': n}) at aws:us-east-1."""
    shapes = {"big": ("Llama-3.1-70B", 8, 1), "small": ("Llama-3.1-70B", 2, 1), "pipe": ("Llama-3.1-405B", 8, 2)}
    reps = [{"model": m, "pool": "aws:us-east-1/H100-SXM-80GB", "site": "aws:us-east-1", "gpu": "H100-SXM-80GB",
             "tp": tp, "pp": pp, "counts": [counts[k]]} for k, (m, tp, pp) in shapes.items() if k in counts]
    return {"id": pid, "body": {"replicas": reps, "shared_gpus": []}}


def actuator(api, t: FakeTime, **kw) -> K8sActuator:
    kw.setdefault("dry_run", False)
    return K8sActuator(DEPLOY, {"use1": api}, ready_timeout_s=60, poll_s=5, clock=t.clock, sleep=t.sleep, **kw)


def test_plan_targets_names_match_the_export():
    (t,) = plan_targets(row(1, big=2)["body"], DEPLOY)
    assert (t.context, t.namespace, t.kind, t.name, t.replicas) == ("use1", NS, "Deployment", BIG, 2)
    (t,) = plan_targets(row(1, pipe=1)["body"], DEPLOY)
    assert t.kind == "LeaderWorkerSet" and t.name == PIPE


def test_start_before_stop_then_idempotent(kube, tmp_path):
    state, api = kube
    state.add("Deployment", BIG, 0)
    state.add("Deployment", SMALL, 3)
    state.ready_after_polls = 2  # the new replica is ready at the third readiness poll
    t = FakeTime()
    log = tmp_path / "applied.jsonl"
    act = actuator(api, t, log_file=log)
    recs = act.apply(row(7, big=1, small=0))
    assert [(r.name, r.from_replicas, r.to_replicas, r.outcome) for r in recs] == [
        (BIG, 0, 1, "applied"), (SMALL, 3, 0, "applied")]
    patches = [(k, n, r) for m, k, n, r in state.requests if m == "PATCH"]
    assert patches == [("Deployment", BIG, 1), ("Deployment", SMALL, 0)]
    # The stop came only after readiness polls saw the start ready: 3 polls of BIG between the two patches.
    i_up = state.requests.index(("PATCH", "Deployment", BIG, 1))
    i_down = state.requests.index(("PATCH", "Deployment", SMALL, 0))
    assert [r for r in state.requests[i_up:i_down] if r[:3] == ("GET", "Deployment", BIG)] == \
        [("GET", "Deployment", BIG, None)] * 3
    assert state.replicas("Deployment", BIG) == 1 and state.replicas("Deployment", SMALL) == 0
    assert [json.loads(x)["outcome"] for x in log.read_text().splitlines()] == ["applied", "applied"]
    state.requests.clear()
    assert act.apply(row(8, big=1, small=0)) == []  # idempotent: nothing to change, nothing patched
    assert not [r for r in state.requests if r[0] == "PATCH"]


def test_dry_run_changes_nothing(kube):
    state, api = kube
    state.add("Deployment", BIG, 0)
    state.add("Deployment", SMALL, 3)
    recs = actuator(api, FakeTime(), dry_run=True).apply(row(1, big=2, small=1))
    assert {(r.name, r.from_replicas, r.to_replicas, r.outcome) for r in recs} == {
        (BIG, 0, 2, "dry-run"), (SMALL, 3, 1, "dry-run")}
    assert not [r for r in state.requests if r[0] == "PATCH"]
    assert state.replicas("Deployment", BIG) == 0 and state.replicas("Deployment", SMALL) == 3


def test_failed_start_defers_the_stops_and_the_next_plan_converges(kube):
    state, api = kube
    state.add("Deployment", BIG, 0)
    state.add("Deployment", SMALL, 3)
    state.fail_patches = 1
    act = actuator(api, FakeTime())
    recs = act.apply(row(1, big=1, small=0))
    assert [(r.name, r.outcome) for r in recs] == [(BIG, "failed"), (SMALL, "deferred")]
    assert "HTTP 500" in recs[0].message and recs[1].message == "a start failed"
    assert state.replicas("Deployment", SMALL) == 3  # capacity kept
    recs = act.apply(row(2, big=1, small=0))
    assert [(r.name, r.outcome) for r in recs] == [(BIG, "applied"), (SMALL, "applied")]


def test_unready_start_defers_the_stops(kube):
    state, api = kube
    state.add("Deployment", BIG, 0)
    state.add("Deployment", SMALL, 3)
    state.ready_after_polls = None  # never ready
    t = FakeTime()
    recs = actuator(api, t).apply(row(1, big=1, small=0))
    assert [(r.name, r.outcome) for r in recs] == [(BIG, "applied"), (SMALL, "deferred")]
    assert "not ready after 60 s" in recs[1].message and t.t >= 1_060.0
    assert state.replicas("Deployment", SMALL) == 3


def test_missing_unmanaged_and_leader_worker_sets(kube):
    state, api = kube
    state.add("LeaderWorkerSet", PIPE, 0)
    state.add("Deployment", "old-workload", 2)  # managed by fleetplan, not in the plan: scaled to 0
    state.add("Deployment", "someone-else", 4, managed=False)  # not ours: left alone
    recs = actuator(api, FakeTime()).apply(row(1, pipe=2, big=1))
    got = {(r.kind, r.name, r.to_replicas, r.outcome) for r in recs}
    assert got == {("Deployment", BIG, 1, "missing"), ("LeaderWorkerSet", PIPE, 2, "applied"),
                   ("Deployment", "old-workload", 0, "applied")}
    assert state.replicas("LeaderWorkerSet", PIPE) == 2 and state.replicas("Deployment", "someone-else") == 4


def test_api_server_down_is_recorded_not_raised():
    cfg = k8s.Configuration(host="http://127.0.0.1:9")  # discard port: nothing listens
    cfg.retries = 0
    act = K8sActuator(DEPLOY, {"use1": k8s.ApiClient(cfg)}, dry_run=False)
    recs = act.apply(row(1, big=1))
    assert [r.outcome for r in recs] == ["failed"] and "listing workloads" in recs[0].message


def test_service_commit_hook_applies_each_adopted_plan(kube, tmp_path):
    """The service's commits reach the actuator: every workload of the committed plan is read from the cluster."""
    state, api = kube
    problem, loads = load_problem(None)
    settings = ServiceSettings(db_url=f"sqlite:///{tmp_path / 's.db'}", insecure_no_auth=True, interval_s=0,
                               resolve_every_s=0)
    svc = ReplanService(settings, problem, loads, clock=lambda: 1_700_000_000.0)
    deploy = DeployFile(sites={s: SiteTarget(context="use1", namespace=f"ns{i}") for i, s in enumerate(problem.sites)})
    targets = plan_targets(svc.plan_row["body"], deploy)
    for tg in targets:
        state.objects[(tg.kind, tg.namespace, tg.name)] = {"replicas": 0, "ready": 0, "polls_left": 0,
                                                           "labels": dict(MANAGED)}
    seen = []
    act = K8sActuator(deploy, {"use1": api}, dry_run=True)
    svc.commit_hooks.append(lambda r: seen.append(act.apply(r)))
    row_ = svc.replan()
    assert seen and all(r.plan_id == row_["id"] and r.outcome == "dry-run" for r in seen[-1])
    wanted = {(tg.name, tg.replicas) for tg in plan_targets(row_["body"], deploy) if tg.replicas > 0}
    assert {(r.name, r.to_replicas) for r in seen[-1]} == wanted
    # The body the hook gets is the stored plan (plan_to_dict of the one-window plan).
    assert row_["body"]["replicas"] == plan_to_dict(svc.replanner.current.problem,
                                                    svc.replanner.current.plan)["replicas"]
    svc.close()


def test_a_failing_commit_hook_is_counted_and_the_plan_still_commits(tmp_path):
    problem, loads = load_problem(None)
    settings = ServiceSettings(db_url=f"sqlite:///{tmp_path / 's.db'}", insecure_no_auth=True, interval_s=0,
                               resolve_every_s=0)
    svc = ReplanService(settings, problem, loads, clock=lambda: 1_700_000_000.0)

    def broken(_row: dict) -> None:
        raise RuntimeError("cluster unreachable")

    svc.commit_hooks.append(broken)
    row_ = svc.replan()
    assert svc.store.last_plan()["id"] == row_["id"]  # committed despite the hook
    assert svc.counters["commit_hook_errors"] == 1
    assert "fleetplan_commit_hook_errors_total 1" in svc.metrics_text()
    svc.close()


def test_serve_refuses_actuation_options_without_actuate(tmp_path):
    from click.testing import CliRunner


    r = CliRunner().invoke(main, ["serve", "--insecure-no-auth", "--db", f"sqlite:///{tmp_path / 'x.db'}",
                                  "--deploy", str(tmp_path / "deploy.yaml")])
    assert r.exit_code == 2 and "go with --actuate k8s" in r.output


def test_shared_gpu_names_do_not_depend_on_resident_order():
    body = {"replicas": [], "shared_gpus": [
        {"pool": "gcp:us-central1/A100-SXM4-80GB", "site": "gcp:us-central1", "gpu": "A100-SXM4-80GB",
         "models": models} for models in (["Qwen2.5-7B", "Llama-3.1-8B"], ["Llama-3.1-8B", "Qwen2.5-7B"])]}
    (t,) = plan_targets(body, DeployFile())
    # The name `fleetplan export k8s` gives this group in the default plan (tests/golden/export).
    assert (t.name, t.replicas) == ("shared-llama-3-1-8b-qwen2-5-7b-a100-sxm4-80gb", 2)


def test_serve_wiring_applies_current_and_later_plans_in_the_background(kube, tmp_path):
    """`serve --actuate k8s --no-dry-run`'s wiring: a kubeconfig context pointing at the API server, the current plan
    applied at once and each later commit too, by the actuator's thread; every change logged as a JSON line."""
    state, api = kube
    host = api.configuration.host
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{host}"}}}}]
contexts: [{{name: use1, context: {{cluster: fake, user: u}}}}]
users: [{{name: u, user: {{token: abc}}}}]
current-context: use1
""")
    problem, loads = load_problem(None)
    settings = ServiceSettings(db_url=f"sqlite:///{tmp_path / 's.db'}", insecure_no_auth=True, interval_s=0,
                               resolve_every_s=0)
    svc = ReplanService(settings, problem, loads, clock=lambda: 1_700_000_000.0)
    deploy = DeployFile(sites={s: SiteTarget(context="use1", namespace=f"ns{i}") for i, s in enumerate(problem.sites)})
    for tg in plan_targets(svc.plan_row["body"], deploy):
        state.objects[(tg.kind, tg.namespace, tg.name)] = {"replicas": 0, "ready": 0, "polls_left": 0,
                                                           "labels": dict(MANAGED)}
    log = tmp_path / "applied.jsonl"
    act = attach_actuator(svc, deploy, kubeconfig=str(kubeconfig), dry_run=False, log_file=str(log))
    want = {(tg.namespace, tg.name): tg.replicas for tg in plan_targets(svc.plan_row["body"], deploy)}
    wait_until("the current plan applied",
               lambda: {(ns, name): o["replicas"] for (_, ns, name), o in state.objects.items()} == want)
    assert {json.loads(x)["outcome"] for x in log.read_text().splitlines()} == {"applied"}
    # A later commit reaches the actuator through the hook: triple Llama-3.1-8B's demand, re-plan, and the cluster
    # follows the new plan (its workloads that exist here; a new shape would be recorded 'missing').
    svc.observe([{"model": "Llama-3.1-8B", "interval_s": 60.0, "arrivals": 60.0 * 3 * 8.0, "at_s": 1_700_000_000.0}])
    row2 = svc.replan()
    want2 = {(tg.namespace, tg.name): tg.replicas for tg in plan_targets(row2["body"], deploy)}
    assert want2 != want

    def follows() -> bool:
        got = {(ns, name): o["replicas"] for (_, ns, name), o in state.objects.items()}
        return (any(r.plan_id == row2["id"] for r in list(act.records))
                and all(got[k] == want2.get(k, 0) for k in got))

    wait_until("the cluster following the later plan", follows)
    act.close()
    svc.close()


def test_node_readiness_marks_the_missing_nodes_down_and_the_service_replans(kube, tmp_path):
    # The default scenario's pools: aws H100 (2 nodes), aws A100 (2), aws A10G (8), gcp A100 (2). The clusters
    # report: H100 one ready, one NotReady; A100 two ready and one cordoned; A10G eight ready.
    state, api = kube
    h100, a100, a10 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-A10G"
    state.nodes = [("h0", h100, True, False), ("h1", h100, False, False), ("a0", a100, True, False),
                   ("a1", a100, True, False), ("a2", a100, True, True)] + [(f"g{i}", a10, True, False)
                                                                          for i in range(8)]
    deploy = DeployFile(sites={"aws:us-east-1": SiteTarget(context="use1", namespace=NS),
                               "gcp:us-central1": SiteTarget(context="usc1", namespace=NS)})
    problem, loads = load_problem(None)
    got = node_availability(problem, deploy, {"use1": api, "usc1": api})
    pools = {p.id: p for p in problem.pools}
    h = next(p for p in pools if pools[p].gpu.startswith("H100"))
    assert got[h] == [1]  # one of its 2 nodes is ready: node index 1 is down
    assert all(v == [] for p, v in got.items() if p != h)  # A100: 2 ready of 2 per site; A10G: 8 of 8
    svc = ReplanService(ServiceSettings(db_url=f"sqlite:///{tmp_path / 'n.db'}", insecure_no_auth=True, interval_s=0,
                                        resolve_every_s=0), problem, loads, clock=lambda: 1_700_000_000.0)
    try:
        svc.inventory_source = lambda: node_availability(problem, deploy, {"use1": api, "usc1": api})
        assert "replicas lost" in svc.try_read_inventory()
        assert svc.replanner.down == {h: frozenset({1})}
        assert svc.try_read_inventory() == "inventory unchanged"
        state.nodes[1] = ("h1", h100, True, False)  # back
        svc.try_read_inventory()
        assert svc.replanner.down == {}
        svc.inventory_source = lambda: (_ for _ in ()).throw(RuntimeError("connection refused"))
        assert svc.try_read_inventory().startswith("inventory read failed") and svc.counters["inventory_errors"] == 1
    finally:
        svc.close()
