"""A plan as plain ``vllm serve`` launch commands per node, for teams without Kubernetes.

The same workloads and server arguments as the Kubernetes export (:mod:`fleetplan.export.deployment`). For each
window and each pool, replicas are placed on the pool's nodes first-fit by GPUs, largest first (tp divides the node
size, so they pack without gaps); each server gets its GPUs through ``CUDA_VISIBLE_DEVICES`` and its own port on
the node (8000, 8001, ...). A shared GPU runs one server per resident model on the same GPU, each limited to its
memory share, the second started once the first answers ``/health``. A pipeline-parallel replica takes ``pp`` whole
nodes: the first runs the Ray head and ``vllm serve``, the others join its Ray cluster.

Prefill and decode servers of a disaggregated plan run with ``--kv-transfer-config`` (NixlConnector, kv_producer /
kv_consumer) and the NIXL handshake's address: ``VLLM_NIXL_SIDE_CHANNEL_HOST`` = the node's first address
(``NODE_IP``, set at the top of the node's block) and ``VLLM_NIXL_SIDE_CHANNEL_PORT`` = 5600, 5601, ... per server
on the node. Each window ends with the routing proxy's endpoints per model (prefill and decode servers as node and
port), e.g. for vLLM's toy proxy (README, "Disaggregated prefill and decode").
"""

from __future__ import annotations

import dataclasses

from fleetplan.datasets.deploy import vllm_defaults
from fleetplan.errors import InputError
from fleetplan.export.deployment import VllmServer, Workload, window_label
from fleetplan.placement.problem import Problem


def _quote(arg: str) -> str:
    return arg if all(c.isalnum() or c in "-_./:=" for c in arg) else "'" + arg.replace("'", "'\\''") + "'"


def _serve(s: VllmServer, gpus: list[int], *, ray: bool = False, nixl_port: int | None = None) -> str:
    env = f"CUDA_VISIBLE_DEVICES={','.join(map(str, gpus))} " if gpus else ""
    if nixl_port is not None:
        env += f"VLLM_NIXL_SIDE_CHANNEL_HOST=$NODE_IP VLLM_NIXL_SIDE_CHANNEL_PORT={nixl_port} "
    return env + "vllm serve " + " ".join(_quote(a) for a in s.args(ray=ray))


#: The node's first address, set once per node block that runs a prefill or decode server.
_NODE_IP = "NODE_IP=$(hostname -I | awk '{print $1}')  # the address the NIXL handshake advertises"


def _wait_healthy(port: int) -> str:
    return f"until curl -sf http://127.0.0.1:{port}/health >/dev/null; do sleep 5; done"


def node_commands(problem: Problem, ws: list[Workload], w: int,
                  endpoints: list[tuple[str, str, str, int]] | None = None) -> list[tuple[str, list[str]]]:
    """[(node title, shell lines)] of window ``w``: every node that runs something, pools in plan order.
    ``endpoints``, when given, receives (model, role, node title, port) of every prefill and decode server.

    Raises InputError when a pool's replicas do not fit its nodes (a plan that fails validation).
    """
    port0 = vllm_defaults().port
    ray_port = vllm_defaults().ray_port
    nixl0 = vllm_defaults().nixl_side_channel_port
    out: list[tuple[str, list[str]]] = []
    for pool in problem.pools:
        mine = [x for x in ws if x.pool == pool.id and x.replicas[w] > 0]
        if not mine:
            continue
        size = pool.gpus_per_node
        free = [size] * pool.nodes
        lines: list[list[str]] = [[] for _ in range(pool.nodes)]
        ports = [port0] * pool.nodes
        nixl = [nixl0] * pool.nodes

        titles = [f"{pool.site} / {pool.gpu}" + (f" [{pool.name}]" if pool.name else "")
                  + f" node {i + 1} of {pool.nodes}" for i in range(pool.nodes)]
        items = sorted(((x.gpus_per_pod * x.pods_per_replica, x) for x in mine for _ in range(x.replicas[w])),
                       key=lambda t: -t[0])
        for _, x in items:
            if x.multi_node:
                nodes = [i for i in range(pool.nodes) if free[i] == size][:x.pods_per_replica]
                if len(nodes) < x.pods_per_replica:
                    raise InputError(f"window {window_label(problem, w)}: {x.name} needs {x.pods_per_replica} free "
                                     f"nodes of {pool.id}; the plan does not fit the inventory", field="replicas")
                head = nodes[0]
                (s,) = x.servers
                lines[head] += [f"ray start --head --port={ray_port}",
                                f"# then on nodes {', '.join(str(i + 1) for i in nodes[1:])}: "
                                f"ray start --address=<node {head + 1} address>:{ray_port} --block",
                                _serve(dataclasses.replace(s, port=ports[head]), list(range(size)), ray=True) + " &"]
                ports[head] += 1
                for i in nodes[1:]:
                    lines[i].append(f"ray start --address=<node {head + 1} address>:{ray_port} --block  "
                                    f"# pipeline stage of {x.name} (node {head + 1})")
                for i in nodes:
                    free[i] = 0
                continue
            need = x.gpus_per_pod
            node = next((i for i in range(pool.nodes) if free[i] >= need), None)
            if node is None:
                raise InputError(f"window {window_label(problem, w)}: {x.name} does not fit the free GPUs of "
                                 f"{pool.id}; the plan does not fit the inventory", field="replicas")
            first = size - free[node]
            gpus = list(range(first, first + need))
            free[node] -= need
            for k, s in enumerate(x.servers):
                placed = dataclasses.replace(s, port=ports[node])
                nixl_port = None
                if x.pd_key is not None:
                    if nixl[node] == nixl0:
                        lines[node].insert(0, _NODE_IP)
                    nixl_port = nixl[node]
                    nixl[node] += 1
                    if endpoints is not None:
                        endpoints.append((s.model, x.role, titles[node], placed.port))
                lines[node].append(_serve(placed, gpus, nixl_port=nixl_port) + " &")
                if k < len(x.servers) - 1:
                    lines[node].append(_wait_healthy(placed.port))
                ports[node] += 1
        for i, ls in enumerate(lines):
            if ls:
                out.append((titles[i], ls + ["wait"]))
    return out


def export_vllm(problem: Problem, ws: list[Workload], windows: list[int], *, plan_name: str = "") -> str:
    """A shell-script text: for each window in ``windows`` and each node, the commands that start its servers."""
    out = [f"# fleetplan export vllm: launch commands per node{' for plan ' + plan_name if plan_name else ''}.",
           "# Run each node's block on that node (its servers run in the background; `wait` keeps the shell). Between",
           "# windows, stop the servers a window drops only once the ones it starts answer /health.", ""]
    for w in windows:
        end = window_label(problem, (w + 1) % problem.n_windows) if problem.n_windows > 1 else "24:00"
        out.append(f"## window {window_label(problem, w)}-{end}")
        endpoints: list[tuple[str, str, str, int]] = []
        for title, lines in node_commands(problem, ws, w, endpoints):
            out.append(f"### {title}")
            out += lines
        for m in sorted({e[0] for e in endpoints}):
            out.append(f"### routing proxy for {m} (prefill -> decode; clients call the proxy, not these servers)")
            for role in ("prefill", "decode"):
                mine = [f"{node}: port {port}" for mm, r, node, port in endpoints if mm == m and r == role]
                out.append(f"# {role} servers: " + ("; ".join(mine) if mine else "none in this window"))
        out.append("")
    return "\n".join(out)
