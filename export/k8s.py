"""Kubernetes manifests for a plan: vLLM workloads, a Service per model, and a KEDA schedule for the day.

For each site (one cluster and namespace, :func:`fleetplan.export.deployment.site_target`) and each window
exported, one multi-document YAML file ``<site>/window-HH-MM.yaml`` holds:

* the Namespace;
* per workload (:mod:`fleetplan.export.deployment`) a ``Deployment`` (apps/v1) with that window's replicas, or a
  ``LeaderWorkerSet`` (leaderworkerset.x-k8s.io/v1) when pipeline stages span nodes (a group of ``pp`` pods, one per
  node: the leader starts a Ray head and ``vllm serve``, the workers join its Ray cluster). Each pod asks for
  ``nvidia.com/gpu`` = tp (requests = limits) on nodes whose ``nvidia.com/gpu.product`` label is the GPU type's
  (GPU feature discovery), tolerates the usual ``nvidia.com/gpu`` taint, and is ready when ``/health`` answers
  (a startup probe gives it at least 30 minutes to load before liveness may restart it).
  A shared GPU is one pod of one GPU whose container starts one vLLM server per resident model, each limited to its
  memory share (``--gpu-memory-utilization``), the second after the first is healthy (their memory profiling must
  not overlap);
* per model a ``Service`` (port 8000) over every pod serving it: pods carry the label
  ``serves.fleetplan.io/<model>: "true"`` and name the port of that model's server ``m<index>``, so one Service
  reaches a model on dedicated and shared pods alike. Names and labels use the catalog model's DNS-label form; the
  name clients call (``--served-model-name``: the scenario's spelling, e.g. an alias Llama-3.1-8B-Instruct of
  Llama-3.1-8B) is the Service's annotation ``fleetplan.io/served-model-name``.

Disaggregated plans: the prefill and decode replicas of a model are Deployments of their own (one per GPU type, tp
and role, :func:`fleetplan.export.deployment.pd_workload_name`) whose ``vllm serve`` carries
``--kv-transfer-config`` (NixlConnector, kv_producer / kv_consumer). Their pods carry ``fleetplan.io/role`` and
``prefill.fleetplan.io/<model>`` or ``decode.fleetplan.io/<model>`` (not the ``serves`` label: clients must not
reach them directly), get ``VLLM_NIXL_SIDE_CHANNEL_HOST`` = the pod's IP (the address the decode side pulls the KV
cache from) and name the NIXL handshake port ``nixl``. Per model and role a headless ``Service``
``vllm-<model>-prefill`` / ``-decode`` lists the pods' addresses for the routing proxy that must run in front
(vLLM's toy proxy, llm-d or Dynamo; docs/export.md "Disaggregated prefill and decode"); the model's own Service then
selects that proxy's pods (``serves.fleetplan.io/<model>``), which the export does not write.

Workloads idle in a window are kept with ``replicas: 0``, so every window's file holds the same objects and
``kubectl apply`` of the next window's file only changes replicas.

With every window exported, ``<site>/schedule-keda.yaml`` holds a KEDA ``ScaledObject`` per workload whose replicas
change during the day: cron triggers (one per replica level and run of windows at or above it) whose maximum is
the window's replicas. Each trigger starts ``lead`` minutes before its windows (the time to load the weights,
rounded up), so new replicas come up while the old ones still serve: capacity never drops at a boundary (start
before stop); scale-downs happen at the window's end. ``clusters.yaml`` lists each site's context, namespace and
folder. Apply with ``kubectl --context CTX apply -f DIR/<site>/window-HH-MM.yaml`` (docs/export.md: "From plan to
production").
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import yaml

from fleetplan.datasets.deploy import vllm_defaults
from fleetplan.errors import InputError
from fleetplan.export.deployment import DeployFile, VllmServer, Workload, check_targets, site_target, slug, window_label
from fleetplan.placement.problem import Problem

#: API versions of the kinds written (LeaderWorkerSet v1 since LWS 0.5; KEDA v1alpha1 is KEDA's only version).
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
KEDA_API_VERSION = "keda.sh/v1alpha1"
MANAGED_BY = {"app.kubernetes.io/managed-by": "fleetplan"}
SERVES_PREFIX = "serves.fleetplan.io/"


def service_name(model: str) -> str:
    """The Service of ``model`` at a site: 'vllm-<model slug>'."""
    return f"vllm-{slug(model)}"[:63].rstrip("-")


def _labels(w: Workload) -> dict[str, str]:
    out = {"app.kubernetes.io/name": "vllm", **MANAGED_BY, "fleetplan.io/workload": w.name,
           "fleetplan.io/site": slug(w.site)}
    if w.pd_key is not None:
        out["fleetplan.io/role"] = w.role
    return out


def _serve_labels(w: Workload) -> dict[str, str]:
    if w.pd_key is not None:  # reached through the routing proxy only
        return {f"{w.role}.fleetplan.io/{slug(s.model)}": "true" for s in w.servers}
    return {f"{SERVES_PREFIX}{slug(s.model)}": "true" for s in w.servers}


def _env(deploy: DeployFile, w: Workload | None = None) -> list[dict]:
    out = []
    if deploy.hf_token_secret is not None:
        out.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": deploy.hf_token_secret,
                                                                        "key": "token", "optional": True}}})
    if w is not None and w.pd_key is not None:  # the NIXL handshake: where the decode side reaches this pod
        out += [{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(vllm_defaults().nixl_side_channel_port)}]
    return out


def _shell_quote(arg: str) -> str:
    return arg if all(c.isalnum() or c in "-_./:=" for c in arg) else "'" + arg.replace("'", "'\\''") + "'"


def _vllm_line(s: VllmServer, *, ray: bool = False) -> str:
    return "vllm serve " + " ".join(_shell_quote(a) for a in s.args(ray=ray))


def _health_check(ports: list[int]) -> list[str]:
    urls = ", ".join(f"'http://127.0.0.1:{p}/health'" for p in ports)
    return ["python3", "-c", f"import urllib.request as u; [u.urlopen(x, timeout=3) for x in ({urls},)]"]


def _resources(gpus: int) -> dict:
    return {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}


def _pod_spec(w: Workload, containers: list[dict]) -> dict:
    spec: dict[str, Any] = {"nodeSelector": {"nvidia.com/gpu.product": w.gpu_product_label},
                            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                            "containers": containers}
    if w.gpus_per_pod > 1 or w.multi_node:
        # NCCL between the GPUs of a pod needs more shared memory than the container runtime's 64 MiB default.
        spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
        for c in containers:
            c["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    return spec


def _probe(port: int | None, ports: list[int]) -> dict:
    check: dict[str, Any] = ({"httpGet": {"path": "/health", "port": port}} if port is not None
                             else {"exec": {"command": _health_check(ports)}})
    return {**check, "periodSeconds": 10, "failureThreshold": 3}


#: the shortest start a vLLM server is allowed before Kubernetes restarts it, seconds: downloading the checkpoint,
#: loading the weights and capturing CUDA graphs take minutes (a stated allowance, not a measurement)
STARTUP_MIN_S = 1800


def _probes(c: dict, probe: dict, load_s: float) -> None:
    """Readiness, liveness and startup probes of a vLLM container, all on ``probe``'s health check. The startup
    probe holds the other two off for up to max(STARTUP_MIN_S, 4 x the plan's weight-load time ``load_s``), so a
    server still loading is not restarted; then liveness restarts one whose /health fails for 30 s."""
    c["readinessProbe"] = probe
    c["livenessProbe"] = dict(probe)
    c["startupProbe"] = {**probe, "failureThreshold": math.ceil(max(STARTUP_MIN_S, 4 * load_s) / 10)}


def _container(w: Workload, deploy: DeployFile, image: str) -> dict:
    """The container of a Deployment pod: one `vllm serve`, or on a shared GPU a shell that starts each server."""
    ports = [{"name": s.port_name, "containerPort": s.port, "protocol": "TCP"} for s in w.servers]
    if w.pd_key is not None:
        ports.append({"name": "nixl", "containerPort": vllm_defaults().nixl_side_channel_port, "protocol": "TCP"})
    c: dict[str, Any] = {"name": "vllm", "image": image}
    if len(w.servers) == 1:
        s = w.servers[0]
        c["command"] = ["vllm", "serve"]
        c["args"] = s.args()
        probe = _probe(s.port, [])
    else:
        lines = []
        for i, s in enumerate(w.servers):
            lines.append(f"{_vllm_line(s)} &")
            if i < len(w.servers) - 1:  # the next server profiles memory only once this one holds its share
                lines.append(f"until python3 -c \"import urllib.request as u; u.urlopen('http://127.0.0.1:{s.port}"
                             f"/health', timeout=3)\" 2>/dev/null; do sleep 5; done")
        lines.append("wait -n")  # one server exiting restarts the container (and so both)
        lines.append("exit $?")
        c["command"] = ["bash", "-c", "\n".join(lines)]
        probe = _probe(None, [s.port for s in w.servers])
    c["ports"] = ports
    env = _env(deploy, w)
    if env:
        c["env"] = env
    c["resources"] = _resources(w.gpus_per_pod)
    _probes(c, probe, w.load_s)
    return c


def deployment(w: Workload, replicas: int, namespace: str, deploy: DeployFile, image: str) -> dict:
    """The apps/v1 Deployment of a single-node workload ``w`` with ``replicas`` replicas."""
    labels = _labels(w)
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": w.name, "namespace": namespace, "labels": labels,
                         "annotations": {"fleetplan.io/site": w.site, "fleetplan.io/pool": w.pool}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"fleetplan.io/workload": w.name}},
                     "template": {"metadata": {"labels": {**labels, **_serve_labels(w)}},
                                  "spec": _pod_spec(w, [_container(w, deploy, image)])}}}


def leader_worker_set(w: Workload, replicas: int, namespace: str, deploy: DeployFile, image: str) -> dict:
    """The LeaderWorkerSet of a pipeline-parallel workload ``w``: ``replicas`` groups of ``pp`` pods (one per node),
    the leader serving HTTP, as in LeaderWorkerSet's vLLM example (datasets/data/deploy/vllm.csv)."""
    (s,) = w.servers
    d = vllm_defaults()
    labels = _labels(w)
    env = _env(deploy)
    leader: dict[str, Any] = {
        "name": "vllm-leader", "image": image,
        "command": ["bash", "-c", f"bash {d.multi_node_script} leader --ray_port={d.ray_port} "
                    f"--ray_cluster_size=$(LWS_GROUP_SIZE) && {_vllm_line(s, ray=True)}"],
        "ports": [{"name": s.port_name, "containerPort": s.port, "protocol": "TCP"}],
        "resources": _resources(w.gpus_per_pod)}
    _probes(leader, _probe(s.port, []), w.load_s)
    worker: dict[str, Any] = {
        "name": "vllm-worker", "image": image,
        "command": ["bash", "-c", f"bash {d.multi_node_script} worker --ray_address=$(LWS_LEADER_ADDRESS) "
                    f"--ray_port={d.ray_port}"],
        "resources": _resources(w.gpus_per_pod)}
    if env:
        leader["env"] = env
        worker["env"] = [dict(e) for e in env]
    return {"apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet",
            "metadata": {"name": w.name, "namespace": namespace, "labels": labels,
                         "annotations": {"fleetplan.io/site": w.site, "fleetplan.io/pool": w.pool}},
            "spec": {"replicas": replicas,
                     "leaderWorkerTemplate": {
                         "size": w.pods_per_replica, "restartPolicy": "RecreateGroupOnPodRestart",
                         "leaderTemplate": {"metadata": {"labels": {**labels, **_serve_labels(w)}},
                                            "spec": _pod_spec(w, [leader])},
                         "workerTemplate": {"metadata": {"labels": labels}, "spec": _pod_spec(w, [worker])}}}}


def workload_manifest(w: Workload, replicas: int, namespace: str, deploy: DeployFile) -> dict:
    """The Deployment or LeaderWorkerSet of ``w`` (see the module docstring)."""
    image = deploy.image or vllm_defaults().image
    make = leader_worker_set if w.multi_node else deployment
    return make(w, replicas, namespace, deploy, image)


def services(ws: list[Workload], namespace: str) -> list[dict]:
    """One ClusterIP Service per model served by colocated workloads of ``ws`` (port 8000 -> the model's named port
    on every pod), then one headless Service per model and role of its prefill and decode workloads (the pods'
    addresses, for the routing proxy: module docstring)."""
    ports: dict[str, str] = {}
    pd_ports: dict[tuple[str, str], str] = {}
    served = {s.model: s.served_name for w in ws for s in w.servers}
    for w in ws:
        for s in w.servers:
            if w.pd_key is None:
                ports[s.model] = s.port_name
            else:
                pd_ports[(s.model, w.role)] = s.port_name
    port = vllm_defaults().port
    out: list[dict] = [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": service_name(m), "namespace": namespace,
                      "labels": {**MANAGED_BY, "fleetplan.io/model": slug(m)},
                      "annotations": {"fleetplan.io/model": m, "fleetplan.io/served-model-name": served[m]}},
         "spec": {"type": "ClusterIP", "selector": {f"{SERVES_PREFIX}{slug(m)}": "true"},
                  "ports": [{"name": "http", "port": port, "targetPort": name, "protocol": "TCP"}]}}
        for m, name in sorted(ports.items())]
    out += [{"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": f"{service_name(m)[:63 - len(role) - 1].rstrip('-')}-{role}",
                          "namespace": namespace,
                          "labels": {**MANAGED_BY, "fleetplan.io/model": slug(m), "fleetplan.io/role": role},
                          "annotations": {"fleetplan.io/model": m, "fleetplan.io/served-model-name": served[m],
                                          "fleetplan.io/note": f"{role} servers of a disaggregated plan: for the "
                                                               "routing proxy, not for clients"}},
             "spec": {"clusterIP": "None", "selector": {f"{role}.fleetplan.io/{slug(m)}": "true"},
                      "ports": [{"name": "http", "port": port, "targetPort": name, "protocol": "TCP"}]}}
            for (m, role), name in sorted(pd_ports.items())]
    return out


def _runs(active: list[bool]) -> list[tuple[int, int]]:
    """Maximal runs of True in a cyclic list as (first window, number of windows); a run crossing the end of the day
    is split at midnight (a cron schedule is daily). All True: one run of the whole day."""
    n = len(active)
    out = []
    w = 0
    while w < n:
        if active[w]:
            start = w
            while w < n and active[w]:
                w += 1
            out.append((start, w - start))
        else:
            w += 1
    return out


def _cron(minute_of_day: int) -> str:
    m = minute_of_day % (24 * 60)
    return f"{m % 60} {m // 60} * * *"


def scaled_object(w: Workload, problem: Problem, namespace: str, timezone: str, lead_minutes: int) -> dict | None:
    """KEDA ScaledObject that sets ``w``'s replicas window by window (module docstring), or None when they never
    change. Raises InputError when windows do not start on whole minutes or the horizon is not a day."""
    lo, hi = min(w.replicas), max(w.replicas)
    if lo == hi:
        return None
    if abs(problem.horizon_hours - 24) > 1e-9 or problem.window_length_s % 60:
        field, value = (("n_windows", problem.n_windows) if problem.window_length_s % 60 == 0
                        else ("window_length_s", problem.window_length_s))
        raise InputError(f"a daily cron schedule needs windows of whole minutes covering 24 h (this plan: "
                         f"{problem.n_windows} windows of {problem.window_length_s:g} s = {problem.horizon_hours:g} "
                         "h); export one window with --window instead", field=field, value=value)
    win_min = int(problem.window_length_s // 60)
    triggers = []
    for level in range(lo + 1, hi + 1):
        for first, length in _runs([n >= level for n in w.replicas]):
            # The lead never reaches back past the start of the previous run (start and end must differ).
            lead = min(lead_minutes, (problem.n_windows - length) * win_min - 1)
            start = first * win_min - lead
            end = (first + length) * win_min
            triggers.append({"type": "cron", "name": f"r{level}-w{first:02d}",
                             "metadata": {"timezone": timezone, "start": _cron(start), "end": _cron(end),
                                          "desiredReplicas": str(level)}})
    target: dict[str, Any] = {"name": w.name}
    if w.multi_node:
        target = {"apiVersion": LWS_API_VERSION, "kind": "LeaderWorkerSet", "name": w.name}
    return {"apiVersion": KEDA_API_VERSION, "kind": "ScaledObject",
            "metadata": {"name": w.name, "namespace": namespace, "labels": {**MANAGED_BY,
                                                                            "fleetplan.io/workload": w.name}},
            "spec": {"scaleTargetRef": target, "minReplicaCount": lo, "maxReplicaCount": hi,
                     "pollingInterval": 30, "cooldownPeriod": 60,
                     "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                         "scaleDown": {"stabilizationWindowSeconds": 0}}}},
                     "triggers": triggers}}


# libyaml's emitter where PyYAML was built with it (its wheels are): the same text as PyYAML's own emitter, which
# took ~95% of an export's time (2.7 -> 0.15 CPU-s for the whole day of tests/golden's default and disagg_wins plans,
# byte for byte the same files).
if TYPE_CHECKING or not yaml.__with_libyaml__:
    _SafeDumper = yaml.SafeDumper
else:  # the same interface (the type stubs give the C classes no common base with the Python ones)
    _SafeDumper = yaml.CSafeDumper


class _Dumper(_SafeDumper):
    """SafeDumper that writes multi-line strings (the shared pod's start script) as literal blocks and repeats
    shared values instead of writing YAML anchors (which kubectl reads, but people and other tools stumble on)."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(docs: list[dict]) -> str:
    return "---\n".join(yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=1000) for d in docs)


def lead_minutes_for(w: Workload) -> int:
    """Minutes a scaler starts ``w``'s replicas ahead of their window: the weight load time, rounded up (at least 1)."""
    return max(1, math.ceil(w.load_s / 60))


def export_k8s(problem: Problem, ws: list[Workload], windows: list[int], deploy: DeployFile, *,
               schedule: bool, lead_minutes: int | None = None) -> dict[str, str]:
    """{relative file path: YAML text} of the manifests (module docstring) for windows ``windows``; ``schedule``
    adds each site's KEDA schedule; ``lead_minutes`` overrides each workload's :func:`lead_minutes_for`.
    Raises InputError for a deployment file that names an unknown site or maps two sites to one namespace."""
    sites = sorted({w.site for w in ws})
    check_targets(problem.sites, deploy)
    files: dict[str, str] = {}
    index: dict[str, dict] = {}
    for site in sites:
        context, ns = site_target(site, deploy)
        folder = slug(site)
        index[site] = {"context": context, "namespace": ns, "folder": folder}
        mine = [w for w in ws if w.site == site]
        head = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": dict(MANAGED_BY)}}]
        svc = services(mine, ns)
        for wi in windows:
            docs = head + [workload_manifest(w, w.replicas[wi], ns, deploy) for w in mine] + svc
            files[f"{folder}/window-{window_label(problem, wi).replace(':', '-')}.yaml"] = _dump(docs)
        if schedule:
            objs = [scaled_object(w, problem, ns, deploy.timezone,
                                  lead_minutes if lead_minutes is not None else lead_minutes_for(w)) for w in mine]
            kept = [o for o in objs if o is not None]
            if kept:
                files[f"{folder}/schedule-keda.yaml"] = _dump(kept)
    files["clusters.yaml"] = yaml.safe_dump({"sites": index}, sort_keys=False)
    return files
