"""The replicas a cluster runs now, read back from the workloads ``fleetplan export k8s`` wrote (``fleetplan diff
PLAN --cluster``).

Input: the JSON of ``kubectl get deploy,lws -l app.kubernetes.io/managed-by=fleetplan -o json`` (a ``List``, or a
``DeploymentList`` / ``LeaderWorkerSetList``; several sites' lists may be given one after the other as files).
Each ``Deployment`` or ``LeaderWorkerSet`` the export wrote (:mod:`fleetplan.export.k8s`) tells:

* the pool: annotation ``fleetplan.io/pool`` (a pool id of the plan's scenario, 'site/gpu' or 'site/gpu/name');
* the models: the pod template's labels ``serves.fleetplan.io/<model>`` (whole or shared replicas),
  ``prefill.fleetplan.io/<model>`` / ``decode.fleetplan.io/<model>`` (prefill and decode replicas), with the
  model's DNS-label form (:func:`~fleetplan.export.deployment.slug`) mapped back to the scenario's model names;
* the shape: tp = the container's ``nvidia.com/gpu`` limit, pp = a LeaderWorkerSet's group size (1 for a
  Deployment); a shared-GPU workload is the one named :func:`~fleetplan.export.deployment.shared_workload_name`
  of its residents; a prefill workload's decode site is the ``-to-<site>`` of its name, else its own site;
* the replicas: ``spec.replicas`` (what the cluster is asked to run; ``status.readyReplicas`` is counted apart as
  the replicas not ready yet).

The result is a one-window :class:`~fleetplan.placement.plan.Plan` (counts of one element) plus what was left out,
so a diff compares it with one window of a plan. What a cluster does not hold is not made up: prices, commitments,
egress and demand are the plan's, not the cluster's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from fleetplan.errors import InputError, UnknownNameError
from fleetplan.export.deployment import shared_workload_name, slug
from fleetplan.export.k8s import MANAGED_BY, SERVES_PREFIX
from fleetplan.placement.plan import Plan, SharedGPU
from fleetplan.placement.problem import Problem

#: The command whose output :func:`cluster_replicas` reads (the fix named in its errors).
KUBECTL_GET = "kubectl get deploy,lws -l app.kubernetes.io/managed-by=fleetplan -o json"
#: The kinds read; any other kind in the list is counted as left out.
WORKLOAD_KINDS = ("Deployment", "LeaderWorkerSet")
_ROLE_PREFIXES = {SERVES_PREFIX: "colocated", "prefill.fleetplan.io/": "prefill", "decode.fleetplan.io/": "decode"}


@dataclass(frozen=True)
class ClusterReplicas:
    """The replicas a cluster runs, as a one-window plan.

    Attributes:
        plan: replicas {key: (n,)}, prefill/decode replicas {pd key: (n,)} and one SharedGPU per shared replica.
        workloads: Deployments and LeaderWorkerSets read.
        not_ready: replicas asked for (spec.replicas) but not ready (status.readyReplicas), summed over the
            workloads that have a status (a manifest has none).
        left_out: {reason: count} of the list's items not read (other kinds, objects fleetplan does not manage).
        sites: the sites of the workloads read (a site with none is not known to be empty: the lists may not cover
            it).
    """

    plan: Plan
    workloads: int
    not_ready: int
    left_out: dict[str, int]
    sites: frozenset[str] = frozenset()


def _field(obj: Any, path: str, source: str, item: str) -> Any:
    """``obj`` at dotted ``path`` (a dict walk), or an InputError naming the item and the path."""
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise InputError(f"{item} has no {path}; give the output of `{KUBECTL_GET}`", source=source, field=path)
        cur = cur[part]
    return cur


def _count(value: Any, source: str, item: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{item}: {path} {value!r} is not a replica count (a whole number >= 0); give the output "
                         f"of `{KUBECTL_GET}`", source=source, field=path, value=value)
    return value


def _items(doc: Any, source: str) -> list[Any]:
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(kind, str) or not kind.endswith("List") or "items" not in doc:
        shown = kind if kind is not None else type(doc).__name__
        raise InputError(f"not a kubectl list (kind {shown!r}, expected 'List' with 'items'); give the output of "
                         f"`{KUBECTL_GET}`", source=source, field="kind", value=shown)
    if not isinstance(doc["items"], list):
        raise InputError(f"items must be a JSON array of objects, not {type(doc['items']).__name__}; give the output "
                         f"of `{KUBECTL_GET}`", source=source, field="items", value=doc["items"])
    return list(doc["items"])


def _label_true(labels: dict, label: str, source: str, item: str) -> None:
    """InputError unless ``labels[label]`` is 'true', the only value the export writes (a Service selects
    ``<label>: "true"``, so any other value is not a replica the plan's Services route to)."""
    if labels[label] != "true":
        raise InputError(f"{item}: pod label {label} is {labels[label]!r}; the export writes 'true' (the Services "
                         f"select it); drop the label from a workload that does not serve the model, or give the "
                         f"output of `{KUBECTL_GET}`", source=source, field=f"{item}.pod labels.{label}",
                         value=labels[label])


def cluster_replicas(docs: list[tuple[str, Any]], problem: Problem) -> ClusterReplicas:
    """The replicas of the fleetplan workloads in ``docs`` ([(file name, parsed kubectl list JSON)]), keyed as the
    plans of ``problem`` are (module docstring).

    Raises InputError naming the file, the item, the field and the value when a document is not a kubectl list, a
    file is given twice or an object (same kind, namespace and name) is in the lists twice (it would be counted
    twice), a workload lacks the export's labels or annotations, names a pool or model ``problem`` does not have
    (:class:`~fleetplan.errors.UnknownNameError`, with close names), has no replica count, a GPU count below 1, a
    LeaderWorkerSet group size below 1, a ``status.readyReplicas`` outside 0..spec.replicas, or a model label whose
    value is not 'true'.
    """
    models = {slug(m.name): m.name for m in problem.models}
    sites = {slug(s): s for s in {p.site for p in problem.pools}}
    replicas: Counter = Counter()
    pd: Counter = Counter()
    shared: list[SharedGPU] = []
    left_out: Counter = Counter()
    n = not_ready = 0
    seen: dict[tuple[str, str, str], str] = {}
    read_sites: set[str] = set()
    sources = Counter(source for source, _ in docs)
    twice = sorted(s for s, k in sources.items() if k > 1)
    if twice:
        raise InputError(f"{twice[0]} is given {sources[twice[0]]} times; its workloads would be counted that many "
                         "times: give each cluster's list once", source=twice[0], field="--cluster")
    for source, doc in docs:
        for i, obj in enumerate(_items(doc, source)):
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            kind = obj.get("kind") if isinstance(obj, dict) else None
            if not isinstance(meta, dict) or not isinstance(kind, str):
                raise InputError(f"items[{i}] is not a Kubernetes object (no kind or metadata); give the output of "
                                 f"`{KUBECTL_GET}`", source=source, field=f"items[{i}]")
            labels = meta.get("labels") or {}
            if any(labels.get(k) != v for k, v in MANAGED_BY.items()):
                left_out["not managed by fleetplan"] += 1
                continue
            if kind not in WORKLOAD_KINDS:
                left_out[kind] += 1
                continue
            name = str(meta.get("name", ""))
            item = f"items[{i}] ({kind} {name})"
            ident = (kind, str(meta.get("namespace", "")), name)
            if ident in seen:
                raise InputError(f"{item} in namespace {ident[1] or '(none)'!r} is also {seen[ident]}: the same object "
                                 "twice would be counted twice; give each cluster's list once", source=source,
                                 field=f"{item}.metadata.name", value=name)
            seen[ident] = f"{item} of {source}"
            pool_id = (meta.get("annotations") or {}).get("fleetplan.io/pool")
            if pool_id is None:
                raise InputError(f"{item} has no annotation fleetplan.io/pool (the export writes it); give the "
                                 f"output of `{KUBECTL_GET}`", source=source,
                                 field=f"{item}.metadata.annotations.fleetplan.io/pool")
            if pool_id not in problem.pool_by_id:
                raise UnknownNameError("pool", str(pool_id), problem.pool_by_id, source=source,
                                       field=f"{item}.metadata.annotations.fleetplan.io/pool")
            pool = problem.pool_by_id[pool_id]
            read_sites.add(pool.site)
            spec = _field(obj, "spec", source, item)
            count = _count(_field(obj, "spec.replicas", source, item), source, item, "spec.replicas")
            status = obj.get("status")
            if isinstance(status, dict):  # a manifest (no status) says nothing about readiness
                ready = _count(status.get("readyReplicas") or 0, source, item, "status.readyReplicas")
                if ready > count:
                    raise InputError(f"{item}: status.readyReplicas {ready} is above spec.replicas {count}; give the "
                                     f"output of `{KUBECTL_GET}`", source=source, field=f"{item}.status.readyReplicas",
                                     value=ready)
                not_ready += count - ready
            if kind == "Deployment":
                template = _field(spec, "template", source, item)
                pp = 1
            else:
                lwt = _field(spec, "leaderWorkerTemplate", source, item)
                template = _field(lwt, "leaderTemplate", source, item)
                pp = lwt.get("size", 1)  # LeaderWorkerSet's default group size is 1
                if isinstance(pp, bool) or not isinstance(pp, int) or pp < 1:
                    raise InputError(f"{item}: spec.leaderWorkerTemplate.size {pp!r} is not a group size (a whole "
                                     "number >= 1: the pods of one replica, one per pipeline stage); give the output "
                                     f"of `{KUBECTL_GET}`", source=source,
                                     field=f"{item}.spec.leaderWorkerTemplate.size", value=pp)
            pod_labels = (template.get("metadata") or {}).get("labels") or {}
            served: list[tuple[str, str]] = []
            for label in sorted(pod_labels):
                for prefix, role in _ROLE_PREFIXES.items():
                    if label.startswith(prefix):
                        _label_true(pod_labels, label, source, item)
                        model_slug = label[len(prefix):]
                        if model_slug not in models:
                            raise UnknownNameError("model", model_slug, models, source=source,
                                                   field=f"{item}.pod labels.{label}")
                        served.append((models[model_slug], role))
            if not served:
                raise InputError(f"{item} has no pod label {SERVES_PREFIX}<model> (nor prefill./decode.fleetplan.io/"
                                 f"<model>): not a workload `fleetplan export k8s` wrote; give the output of "
                                 f"`{KUBECTL_GET}`", source=source, field=f"{item}.pod labels")
            n += 1
            names = tuple(sorted(m for m, _ in served))
            role = served[0][1]
            if role == "colocated" and name == shared_workload_name(names, pool.gpu, pool.name):
                shared += [SharedGPU(pool=pool_id, models=names, served_req_per_s={})] * count
                continue
            containers = _field(template, "spec.containers", source, item)
            gpus = ((containers[0] if containers else {}).get("resources") or {}).get("limits", {}).get(
                "nvidia.com/gpu")
            try:
                tp = int(str(gpus))
                if tp < 1:
                    raise ValueError
            except ValueError:
                raise InputError(f"{item}: the first container's resources.limits nvidia.com/gpu {gpus!r} is not a "
                                 f"GPU count (a whole number >= 1); give the output of `{KUBECTL_GET}`", source=source,
                                 field=f"{item}.resources.limits.nvidia.com/gpu", value=gpus) from None
            if len(served) != 1:
                raise InputError(f"{item} serves {', '.join(names)} but is not named as their shared GPU "
                                 f"({shared_workload_name(names, pool.gpu, pool.name)}); fix or remove the object",
                                 source=source, field=f"{item}.metadata.name", value=name)
            model = names[0]
            if role == "colocated":
                replicas[(model, pool_id, tp, pp)] += count
            else:
                decode_site = "" if role == "decode" else pool.site
                if role == "prefill" and "-to-" in name:
                    to = name.rsplit("-to-", 1)[1]
                    decode_site = next((s for sl, s in sites.items() if to == sl or to.startswith(sl + "-")),
                                       pool.site)
                pd[(model, role, pool_id, tp, decode_site)] += count
    plan = Plan(replicas={k: (v,) for k, v in sorted(replicas.items())},
                pd_replicas={k: (v,) for k, v in sorted(pd.items())}, shared=tuple(shared))
    return ClusterReplicas(plan=plan, workloads=n, not_ready=not_ready, left_out=dict(left_out),
                           sites=frozenset(read_sites))
