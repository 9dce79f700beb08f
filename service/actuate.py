"""The service acting on a cluster: each adopted plan's replicas, patched onto the exported workloads.

``fleetplan serve --actuate k8s`` gives every committed plan row to a :class:`K8sActuator`. The row's one-window plan
names, per site, the replicas of each workload (:func:`plan_targets`; the names are those ``fleetplan export k8s``
gave the Deployments and LeaderWorkerSets, :mod:`fleetplan.export.deployment`). Each site's workloads live in the
context and namespace the deployment file maps it to. Applying a row (:meth:`K8sActuator.apply`):

1. reads each workload's replicas through the ``scale`` subresource (a workload the plan does not name but that
   carries ``app.kubernetes.io/managed-by=fleetplan`` is scaled to 0);
2. scales *up* every workload that needs more replicas;
3. waits until those are ready (``status.readyReplicas``), polling every ``poll_s`` up to ``ready_timeout_s``;
4. only then scales *down* the rest: capacity never drops below what the previous plan served (start before stop).
   When a start fails or is not ready in time the stops are deferred (recorded, left for the next plan);
5. records every change (:class:`Applied`: what, from, to, outcome) in memory and, when configured, as one JSON line
   per change in a log file.

Patches set absolute replica counts (a merge patch of ``spec.replicas``), so applying the same plan twice changes
nothing the second time (idempotent). ``dry_run`` (the default of ``fleetplan serve``) reads the cluster and records
what it would change without patching. Rows are applied in a background thread, newest first (a row that arrives
while another is applied replaces any row still waiting).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fleetplan.errors import FleetplanError, InputError
from fleetplan.export.deployment import DeployFile, gpu_label, shared_workload_name, site_target, workload_name
from fleetplan.export.k8s import LWS_API_VERSION, MANAGED_BY
from fleetplan.placement.problem import Problem

log = logging.getLogger("fleetplan.service.actuate")

DEPLOYMENT = "Deployment"
LWS = "LeaderWorkerSet"
_LWS_GROUP, _LWS_VERSION = LWS_API_VERSION.split("/")
_LWS_PLURAL = "leaderworkersets"
_MANAGED_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())


@dataclass(frozen=True)
class Target:
    """Replicas one workload should have: ``kind`` 'Deployment' or 'LeaderWorkerSet' in (context, namespace)."""

    site: str
    context: str
    namespace: str
    kind: str
    name: str
    replicas: int


@dataclass(frozen=True)
class Applied:
    """One change the actuator made, would make (dry run), deferred or failed to make.

    Attributes:
        at_s: unix time. plan_id: the plan row applied. site, context, namespace, kind, name: the workload.
        from_replicas, to_replicas: replicas before and asked for (from_replicas None when it could not be read).
        outcome: 'applied', 'dry-run', 'deferred' (a stop held back: a start failed or is not ready), 'failed' or
            'missing' (no such workload: export and apply the manifests first).
        message: why, for the last three.
    """

    at_s: float
    plan_id: int | None
    site: str
    context: str
    namespace: str
    kind: str
    name: str
    from_replicas: int | None
    to_replicas: int
    outcome: str
    message: str = ""


def plan_targets(body: dict, deploy: DeployFile) -> list[Target]:
    """The :class:`Target` of every workload a plan body (:func:`fleetplan.outputs.planio.plan_to_dict` of a
    one-window plan, as the service stores it) runs: dedicated replicas by (model, GPU, tp, pp), shared GPUs grouped
    by (GPU, residents). Raises InputError for a body without replicas."""
    try:
        reps = body["replicas"]
        shared = body["shared_gpus"]
    except (KeyError, TypeError):
        raise InputError("a plan body without replicas and shared_gpus", field="body") from None
    out: dict[tuple[str, str], Target] = {}
    names = {p["id"]: p.get("name", "") for p in body.get("pools") or []}  # named pools (several per site and GPU)
    for r in reps:
        site = r["site"]
        context, ns = site_target(site, deploy)
        kind = LWS if int(r["pp"]) > 1 else DEPLOYMENT
        name = workload_name(r["model"], r["gpu"], int(r["tp"]), int(r["pp"]), names.get(r["pool"], ""))
        n = int(r["counts"][0])
        prev = out.get((site, name))
        out[(site, name)] = Target(site, context, ns, kind, name, n + (prev.replicas if prev else 0))
    for g in shared:
        site = g["site"]
        context, ns = site_target(site, deploy)
        name = shared_workload_name(tuple(g["models"]), g["gpu"], names.get(g["pool"], ""))
        prev = out.get((site, name))
        out[(site, name)] = Target(site, context, ns, DEPLOYMENT, name, 1 + (prev.replicas if prev else 0))
    return sorted(out.values(), key=lambda t: (t.site, t.name))


class _Cluster:
    """The few Kubernetes API calls the actuator makes, on one ApiClient (official ``kubernetes`` client)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client  # the k8s extra; imported only when actuation is asked for

        self.api_client = api_client
        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.ApiException = client.exceptions.ApiException

    def replicas(self, kind: str, ns: str, name: str) -> int | None:
        """spec.replicas of the workload's scale subresource, or None when there is no such workload."""
        try:
            if kind == DEPLOYMENT:
                scale = self.apps.read_namespaced_deployment_scale(name, ns)
                return int(scale.spec.replicas or 0) if scale.spec else 0
            obj = self.custom.get_namespaced_custom_object_scale(_LWS_GROUP, _LWS_VERSION, ns, _LWS_PLURAL, name)
            return int(_get(obj, "spec", "replicas") or 0)
        except self.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def ready(self, kind: str, ns: str, name: str) -> int:
        """status.readyReplicas of the workload (0 when absent)."""
        if kind == DEPLOYMENT:
            d = self.apps.read_namespaced_deployment(name, ns)
            return int((d.status.ready_replicas if d.status else 0) or 0)
        obj = self.custom.get_namespaced_custom_object(_LWS_GROUP, _LWS_VERSION, ns, _LWS_PLURAL, name)
        return int(_get(obj, "status", "readyReplicas") or 0)

    def scale(self, kind: str, ns: str, name: str, replicas: int) -> None:
        """Merge-patch spec.replicas of the workload's scale subresource."""
        body = {"spec": {"replicas": replicas}}
        if kind == DEPLOYMENT:
            self.apps.patch_namespaced_deployment_scale(name, ns, body,
                                                        _content_type="application/merge-patch+json")
        else:
            self.custom.patch_namespaced_custom_object_scale(_LWS_GROUP, _LWS_VERSION, ns, _LWS_PLURAL, name, body,
                                                             _content_type="application/merge-patch+json")

    def managed(self, ns: str) -> dict[tuple[str, str], int]:
        """{(kind, name): spec.replicas} of the fleetplan-managed workloads in ``ns`` (LeaderWorkerSets only when
        their CRD is installed)."""
        out: dict[tuple[str, str], int] = {}
        for d in self.apps.list_namespaced_deployment(ns, label_selector=_MANAGED_SELECTOR).items:
            name = _get(d, "metadata", "name")
            if name:
                out[(DEPLOYMENT, str(name))] = int(_get(d, "spec", "replicas") or 0)
        for item in self._managed_lws(ns):
            name = _get(item, "metadata", "name")
            if name:
                out[(LWS, str(name))] = int(_get(item, "spec", "replicas") or 0)
        return out

    def _managed_lws(self, ns: str) -> list:
        """The fleetplan-managed LeaderWorkerSets of ``ns`` (as dicts), none when their CRD is not installed (404)."""
        try:
            lws = self.custom.list_namespaced_custom_object(_LWS_GROUP, _LWS_VERSION, ns, _LWS_PLURAL,
                                                            label_selector=_MANAGED_SELECTOR)
        except self.ApiException as exc:
            if exc.status != 404:
                raise
            return []
        return list(_get(lws, "items") or [])

    def workload_list(self, ns: str) -> dict:
        """The fleetplan-managed Deployments and LeaderWorkerSets of ``ns`` as one kubectl ``List`` (the JSON
        ``kubectl get deploy,lws -l app.kubernetes.io/managed-by=fleetplan -o json`` prints; LeaderWorkerSets only
        when their CRD is installed)."""
        deps = self.apps.list_namespaced_deployment(ns, label_selector=_MANAGED_SELECTOR).items
        items = [dict(self.api_client.sanitize_for_serialization(d), apiVersion="apps/v1", kind=DEPLOYMENT)
                 for d in deps]
        items += [dict(i, apiVersion=LWS_API_VERSION, kind=LWS) for i in self._managed_lws(ns)]
        return {"apiVersion": "v1", "kind": "List", "items": items}

    def ready_nodes(self, label: str) -> int:
        """Nodes labelled ``nvidia.com/gpu.product=<label>`` whose Ready condition is True and that are not
        cordoned (spec.unschedulable)."""
        n = 0
        for node in self.core.list_node(label_selector=f"{GPU_PRODUCT_LABEL}={label}").items:
            if _get(node, "spec", "unschedulable"):
                continue
            conds = _get(node, "status", "conditions") or []
            if any(_get(c, "type") == "Ready" and _get(c, "status") == "True" for c in conds):
                n += 1
        return n


#: The node label the NVIDIA GPU Operator (GPU feature discovery) sets to the GPU's product name.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


def node_availability(problem: Problem, deploy: DeployFile, clients: Mapping[str, Any]) -> dict[str, list[int]]:
    """{pool id: node indices down} from each site's cluster: the ready, schedulable GPU nodes of the pool's GPU
    type (:data:`GPU_PRODUCT_LABEL`, the deployment file's ``gpu_labels`` or the shipped table) fill the site's pools
    of that type in the problem's order; each pool's nodes beyond those are down (the highest indices: the
    re-planner's placement does not know which physical node is which). More ready nodes than the scenario's
    inventory count as the inventory (it bounds what is planned). Raises the client's ApiException when a cluster
    does not answer, InputError for a GPU type without a node label."""
    out: dict[str, list[int]] = {}
    by_type: dict[tuple[str, str], list] = {}
    for p in problem.pools:
        by_type.setdefault((p.site, p.gpu), []).append(p)
    for (site, gpu), pools in sorted(by_type.items()):
        context, _ = site_target(site, deploy)
        ready = _Cluster(clients[context]).ready_nodes(gpu_label(gpu, deploy))
        for p in pools:
            up = min(ready, p.nodes)
            ready -= up
            out[p.id] = list(range(up, p.nodes))
    return out


def cluster_lists(sites: list[str], deploy: DeployFile, clients: Mapping[str, Any]) -> list[tuple[str, dict]]:
    """[(where, kubectl List)] of the fleetplan-managed workloads each site's (context, namespace) of ``deploy``
    runs now, read live through ``clients`` ({context: ApiClient}, :func:`kube_clients`), for
    :func:`fleetplan.export.cluster.cluster_replicas`; a (context, namespace) several sites share is read once.
    Raises InputError naming the context when the API server cannot be reached or refuses the read."""
    out = []
    for ctx, ns in dict.fromkeys(site_target(site, deploy) for site in sites):
        cluster = _Cluster(clients[ctx])
        try:
            out.append((f"context {ctx} namespace {ns}", cluster.workload_list(ns)))
        except Exception as exc:  # the client raises ApiException, urllib3 errors or OSError
            raise InputError(f"cannot read the workloads of context {ctx!r} namespace {ns!r}: {_reason(exc)}; check "
                             "the kubeconfig and that the deployment file maps the site to its cluster",
                             field="sites.context", value=ctx) from None
    return out


def _get(obj: Any, *keys: str) -> Any:
    for k in keys:
        if obj is None:
            return None
        obj = obj.get(k) if isinstance(obj, dict) else getattr(obj, k, None)
    return obj


def kube_clients(contexts: list[str], kubeconfig: str | None = None, *,
                 needed_by: tuple[str, str] = ("--actuate k8s", "--actuate")) -> dict[str, Any]:
    """{context: ApiClient} from the kubeconfig (``kubeconfig`` or $KUBECONFIG / ~/.kube/config). Raises
    InputError when the client is not installed (naming ``needed_by``: (what needs it, its option)) or a context
    cannot be loaded."""
    try:
        from kubernetes import config
    except ImportError:
        raise InputError(f"{needed_by[0]} needs the Kubernetes client: pip install 'fleetplan[k8s]'",
                         field=needed_by[1]) from None
    if kubeconfig is not None:
        looked = [kubeconfig]
    elif os.environ.get("KUBECONFIG"):
        looked = [p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
    else:
        looked = [os.path.expanduser("~/.kube/config")]
    if not any(os.path.isfile(p) for p in looked):
        where = ("--kubeconfig " if kubeconfig is not None else
                 "$KUBECONFIG " if os.environ.get("KUBECONFIG") else "the default ") + ", ".join(looked)
        raise InputError(f"no kubeconfig found (looked at {where}); give --kubeconfig FILE or set $KUBECONFIG to the "
                         "kubeconfig holding the deployment file's contexts", field="--kubeconfig",
                         value=kubeconfig) from None
    out = {}
    for ctx in contexts:
        try:
            out[ctx] = config.new_client_from_config(config_file=kubeconfig, context=ctx)
        except Exception as exc:  # the loader raises ConfigException, TypeError or OSError for a bad file
            raise InputError(f"cannot load kubectl context {ctx!r}: {exc}; map the site to a context of your "
                             "kubeconfig in the deployment file (sites: {SITE: {context: CTX}})",
                             field="sites.context", value=ctx) from None
    return out


class K8sActuator:
    """Applies plan rows to clusters (module docstring).

    Args:
        deploy: the deployment file (site -> context and namespace).
        clients: {context: kubernetes ApiClient}, e.g. :func:`kube_clients`.
        dry_run: read and record, never patch.
        ready_timeout_s: longest wait for started replicas to become ready before stops are deferred, seconds.
        poll_s: seconds between readiness polls.
        log_file: a JSON-lines file every :class:`Applied` record is appended to, or None.
        clock, sleep: time functions (tests pass fakes).
    """

    def __init__(self, deploy: DeployFile, clients: dict[str, Any], *, dry_run: bool = True,
                 ready_timeout_s: float = 900.0, poll_s: float = 5.0, log_file: str | Path | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self.deploy = deploy
        self.clusters = {ctx: _Cluster(c) for ctx, c in clients.items()}
        self.dry_run = dry_run
        self.ready_timeout_s = ready_timeout_s
        self.poll_s = poll_s
        self.log_file = Path(log_file) if log_file else None
        self.clock = clock
        self.sleep = sleep
        self.records: deque[Applied] = deque(maxlen=10_000)
        self._lock = threading.Lock()
        self._pending: dict | None = None
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ---- records ----------------------------------------------------------------------------------------
    def _record(self, plan_id: int | None, t: Target, before: int | None, outcome: str, message: str = "") -> Applied:
        rec = Applied(at_s=self.clock(), plan_id=plan_id, site=t.site, context=t.context, namespace=t.namespace,
                      kind=t.kind, name=t.name, from_replicas=before, to_replicas=t.replicas, outcome=outcome,
                      message=message)
        self.records.append(rec)
        log.info("actuate %s %s/%s %s/%s: %s -> %s%s", outcome, t.context, t.namespace, t.kind, t.name, before,
                 t.replicas, f" ({message})" if message else "")
        if self.log_file is not None:
            with self.log_file.open("a", encoding="utf-8") as f:
                f.write(json.dumps(asdict(rec), sort_keys=True) + "\n")
        return rec

    # ---- one plan ----------------------------------------------------------------------------------------
    def apply(self, row: dict) -> list[Applied]:
        """Apply plan row ``row`` ({'id', 'body'}) now (module docstring); returns the records it made."""
        plan_id = row.get("id")
        targets = plan_targets(row["body"], self.deploy)
        made: list[Applied] = []
        for ctx in {t.context for t in targets} - set(self.clusters):
            raise FleetplanError(f"no Kubernetes client for context {ctx!r}")
        named = {(t.context, t.namespace, t.kind, t.name) for t in targets}
        current: dict[Target, int] = {}
        for ctx, ns in sorted({(t.context, t.namespace) for t in targets}):
            cluster = self.clusters[ctx]
            try:
                managed = cluster.managed(ns)
            except Exception as exc:  # the API server is down or refuses: nothing is changed
                made += [self._record(plan_id, t, None, "failed", f"listing workloads: {_reason(exc)}")
                         for t in targets if (t.context, t.namespace) == (ctx, ns)]
                continue
            site = next(t.site for t in targets if (t.context, t.namespace) == (ctx, ns))
            for (kind, name), n in sorted(managed.items()):
                if (ctx, ns, kind, name) not in named and n > 0:  # a workload the plan no longer runs
                    t = Target(site, ctx, ns, kind, name, 0)
                    targets.append(t)
                    current[t] = n
            for t in targets:
                if (t.context, t.namespace) != (ctx, ns) or t in current:
                    continue
                try:
                    n_now = cluster.replicas(t.kind, ns, t.name)
                except Exception as exc:
                    made.append(self._record(plan_id, t, None, "failed", f"reading replicas: {_reason(exc)}"))
                    continue
                if n_now is None:
                    made.append(self._record(plan_id, t, None, "missing", f"no {t.kind} {t.name} in namespace {ns}; "
                                             "apply the manifests of `fleetplan export k8s` first"))
                    continue
                current[t] = n_now
        ups = [t for t, n in current.items() if t.replicas > n]
        downs = [t for t, n in current.items() if t.replicas < n]
        if self.dry_run:
            return made + [self._record(plan_id, t, current[t], "dry-run") for t in ups + downs]
        ups_ok = True
        for t in ups:
            try:
                self.clusters[t.context].scale(t.kind, t.namespace, t.name, t.replicas)
                made.append(self._record(plan_id, t, current[t], "applied"))
            except Exception as exc:
                ups_ok = False
                made.append(self._record(plan_id, t, current[t], "failed", _reason(exc)))
        if downs:
            why = "" if ups_ok else "a start failed"
            if not why and ups:
                why = self._wait_ready(ups)
            if why:
                return made + [self._record(plan_id, t, current[t], "deferred", why) for t in downs]
        for t in downs:
            try:
                self.clusters[t.context].scale(t.kind, t.namespace, t.name, t.replicas)
                made.append(self._record(plan_id, t, current[t], "applied"))
            except Exception as exc:
                made.append(self._record(plan_id, t, current[t], "failed", _reason(exc)))
        return made

    def _wait_ready(self, ups: list[Target]) -> str:
        """'' once every started workload has its replicas ready, else why not (timeout or an API error)."""
        deadline = self.clock() + self.ready_timeout_s
        while True:
            waiting = []
            for t in ups:
                try:
                    if self.clusters[t.context].ready(t.kind, t.namespace, t.name) < t.replicas:
                        waiting.append(t.name)
                except Exception as exc:
                    return f"reading readiness of {t.name}: {_reason(exc)}"
            if not waiting:
                return ""
            if self.clock() >= deadline:
                return (f"started replicas not ready after {self.ready_timeout_s:g} s: {', '.join(waiting)}; stops "
                        "wait for the next plan")
            self.sleep(self.poll_s)

    # ---- background ----------------------------------------------------------------------------------------
    def submit(self, row: dict) -> None:
        """Apply ``row`` in the background thread (replacing a row still waiting); never raises."""
        with self._lock:
            self._pending = row
        self._wake.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="fleetplan-actuate", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                row, self._pending = self._pending, None
            if row is None:
                continue
            try:
                self.apply(row)
            except Exception:  # logged with its traceback; the next plan is applied as usual
                log.exception("applying plan %s failed", row.get("id"))

    def close(self) -> None:
        """Stop the background thread (a change under way finishes first)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _reason(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"HTTP {status} {reason}" if status else f"{type(exc).__name__}: {reason}"
