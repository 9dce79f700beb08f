"""Pull demand observations from a Prometheus server that scrapes vLLM, through Prometheus's HTTP query API.

vLLM's metric names (https://docs.vllm.ai/en/latest/design/metrics.html): ``vllm:request_success_total``
(finished requests), ``vllm:num_requests_waiting`` and ``vllm:num_requests_running`` (queue and batch sizes),
``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total``, each labelled with ``model_name``.
Prometheus's instant query API: ``GET <base>/api/v1/query?query=...&time=...``
(https://prometheus.io/docs/prometheus/latest/querying/api/).

vLLM counts no arrivals, so demand over an interval is estimated as finished requests plus the growth of the
waiting and running queues (``fleetplan.solvers.online.estimate_demand``): completions alone under-count when
the fleet is saturated and the queue grows.
"""

from __future__ import annotations

import httpx

from fleetplan.datasets.catalog.names import resolve_name
from fleetplan.errors import InputError, UnknownNameError

#: PromQL per quantity; {w} is the interval in seconds.
QUERIES = {
    "completions": "sum by (model_name) (increase(vllm:request_success_total[{w}s]))",
    "waiting_delta": "sum by (model_name) (delta(vllm:num_requests_waiting[{w}s]))",
    "running_delta": "sum by (model_name) (delta(vllm:num_requests_running[{w}s]))",
    "prompt_tokens": "sum by (model_name) (increase(vllm:prompt_tokens_total[{w}s]))",
    "generation_tokens": "sum by (model_name) (increase(vllm:generation_tokens_total[{w}s]))",
}


def match_model(served_name: str, models: list[str]) -> str | None:
    """The planned model a vLLM ``model_name`` label stands for: the same name; the planned model the name resolves
    to as a scenario's name does (an alias such as 'Mixtral-8x7B' -> 'Mixtral-8x7B-v0.1', the name ``fleetplan
    export`` serves it under: :func:`~fleetplan.datasets.catalog.names.resolve_name`); or the planned name
    contained in the label's last path component (case-insensitive: 'meta-llama/Llama-3.1-8B-Instruct' ->
    'Llama-3.1-8B'), the longest such name winning. None when nothing matches."""
    if served_name in models:
        return served_name
    try:
        return resolve_name("model", served_name, models)
    except UnknownNameError:
        pass
    tail = served_name.rsplit("/", 1)[-1].lower()
    hits = [m for m in models if m.lower() in tail]
    return max(hits, key=len) if hits else None


def _vector(client: httpx.Client, base_url: str, query: str, at_s: float) -> dict[str, float]:
    r = client.get(base_url.rstrip("/") + "/api/v1/query", params={"query": query, "time": f"{at_s:.3f}"})
    r.raise_for_status()
    d = r.json()
    if d.get("status") != "success" or d.get("data", {}).get("resultType") != "vector":
        raise InputError(f"Prometheus answered {d.get('status')!r} to {query!r}: {d.get('error', '')}",
                         field="prometheus")
    out = {}
    for item in d["data"]["result"]:
        name = item.get("metric", {}).get("model_name")
        if name is None:
            continue
        out[name] = float(item["value"][1])
    return out


def pull_observations(base_url: str, interval_s: float, at_s: float, models: list[str], *,
                      client: httpx.Client | None = None, timeout_s: float = 5.0) -> tuple[list[dict], list[str]]:
    """Observations (dicts in the POST /v1/observations schema, tenant 'prometheus') for the interval ending at
    ``at_s``, one per planned model that vLLM reports; and the served model names that matched no planned model.

    Raises httpx.HTTPError when the server cannot be reached, InputError when it answers with an error.
    """
    own = client is None
    client = client or httpx.Client(timeout=timeout_s)
    try:
        got = {k: _vector(client, base_url, q.format(w=int(round(interval_s))), at_s) for k, q in QUERIES.items()}
    finally:
        if own:
            client.close()
    obs, unknown = [], []
    for served in sorted(set(got["completions"]) | set(got["waiting_delta"])):
        m = match_model(served, models)
        if m is None:
            unknown.append(served)
            continue
        waiting = got["waiting_delta"].get(served, 0.0)
        running = got["running_delta"].get(served, 0.0)
        obs.append({"model": m, "tenant": "prometheus", "interval_s": float(interval_s), "at_s": float(at_s),
                    "completions": max(0.0, got["completions"].get(served, 0.0)),
                    "waiting_start": 0.0, "waiting_end": waiting, "running_start": 0.0, "running_end": running,
                    "prompt_tokens": got["prompt_tokens"].get(served), "generation_tokens":
                        got["generation_tokens"].get(served)})
    return obs, unknown
