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
port), e.g. for vLLM's toy proxy (docs/export.md, "Disaggregated prefill and decode").
"""

from __future__ import annotations

import dataclasses

from fleetplan.datasets.deploy import vllm_defaults
from fleetplan.errors import InputError
from fleetplan.export.deployment import VllmServer, Workload, window_label
from fleetplan.placement.problem import Pool, Problem


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


class _PoolNodes:
    """The nodes of one pool in one window as servers are placed on them: free GPUs, shell lines, the next vLLM
    and NIXL side-channel port, and a title per node."""

    def __init__(self, problem: Problem, pool: Pool, w: int) -> None:
        d = vllm_defaults()
        self.problem, self.pool, self.w = problem, pool, w
        self.size = pool.gpus_per_node
        self.free = [self.size] * pool.nodes
        self.lines: list[list[str]] = [[] for _ in range(pool.nodes)]
        self.ports = [d.port] * pool.nodes
        self.ray_port = d.ray_port
        self.nixl0 = d.nixl_side_channel_port
        self.nixl = [self.nixl0] * pool.nodes
        self.titles = [f"{pool.site} / {pool.gpu}" + (f" [{pool.name}]" if pool.name else "")
                       + f" node {i + 1} of {pool.nodes}" for i in range(pool.nodes)]

    def place_multi_node(self, x: Workload) -> None:
        """A replica whose pipeline stages span whole nodes: a Ray head on the first free node running the
        server, the other nodes joining it. Raises InputError when too few nodes are free."""
        nodes = [i for i in range(self.pool.nodes) if self.free[i] == self.size][:x.pods_per_replica]
        if len(nodes) < x.pods_per_replica:
            raise InputError(f"window {window_label(self.problem, self.w)}: {x.name} needs {x.pods_per_replica} "
                             f"free nodes of {self.pool.id}; the plan does not fit the inventory", field="replicas")
        head = nodes[0]
        (s,) = x.servers
        self.lines[head] += [f"ray start --head --port={self.ray_port}",
                             f"# then on nodes {', '.join(str(i + 1) for i in nodes[1:])}: "
                             f"ray start --address=<node {head + 1} address>:{self.ray_port} --block",
                             _serve(dataclasses.replace(s, port=self.ports[head]), list(range(self.size)), ray=True)
                             + " &"]
        self.ports[head] += 1
        for i in nodes[1:]:
            self.lines[i].append(f"ray start --address=<node {head + 1} address>:{self.ray_port} --block  "
                                 f"# pipeline stage of {x.name} (node {head + 1})")
        for i in nodes:
            self.free[i] = 0

    def place(self, x: Workload, endpoints: list[tuple[str, str, str, int]] | None) -> None:
        """A replica inside one node: its servers on the first node with GPUs enough, the next ports, a NIXL port
        for prefill/decode servers (recorded in ``endpoints``), each server after the previous one is healthy.
        Raises InputError when no node has the GPUs free."""
        need = x.gpus_per_pod
        node = next((i for i in range(self.pool.nodes) if self.free[i] >= need), None)
        if node is None:
            raise InputError(f"window {window_label(self.problem, self.w)}: {x.name} does not fit the free GPUs of "
                             f"{self.pool.id}; the plan does not fit the inventory", field="replicas")
        first = self.size - self.free[node]
        gpus = list(range(first, first + need))
        self.free[node] -= need
        lines = self.lines[node]
        for k, s in enumerate(x.servers):
            placed = dataclasses.replace(s, port=self.ports[node])
            nixl_port = None
            if x.pd_key is not None:
                if self.nixl[node] == self.nixl0:
                    lines.insert(0, _NODE_IP)
                nixl_port = self.nixl[node]
                self.nixl[node] += 1
                if endpoints is not None:
                    endpoints.append((s.model, x.role, self.titles[node], placed.port))
            lines.append(_serve(placed, gpus, nixl_port=nixl_port) + " &")
            if k < len(x.servers) - 1:
                lines.append(_wait_healthy(placed.port))
            self.ports[node] += 1

    def commands(self) -> list[tuple[str, list[str]]]:
        """[(node title, shell lines ending in `wait`)] of the nodes that run something."""
        return [(self.titles[i], ls + ["wait"]) for i, ls in enumerate(self.lines) if ls]


def node_commands(problem: Problem, ws: list[Workload], w: int,
                  endpoints: list[tuple[str, str, str, int]] | None = None) -> list[tuple[str, list[str]]]:
    """[(node title, shell lines)] of window ``w``: every node that runs something, pools in plan order.
    ``endpoints``, when given, receives (model, role, node title, port) of every prefill and decode server.

    Replicas are placed largest first (GPUs per replica), multi-node ones on whole free nodes, others on the first
    node with GPUs enough. Raises InputError when a pool's replicas do not fit its nodes (a plan that fails
    validation).
    """
    out: list[tuple[str, list[str]]] = []
    for pool in problem.pools:
        mine = [x for x in ws if x.pool == pool.id and x.replicas[w] > 0]
        if not mine:
            continue
        nodes = _PoolNodes(problem, pool, w)
        items = sorted(((x.gpus_per_pod * x.pods_per_replica, x) for x in mine for _ in range(x.replicas[w])),
                       key=lambda t: -t[0])
        for _, x in items:
            if x.multi_node:
                nodes.place_multi_node(x)
            else:
                nodes.place(x, endpoints)
        out += nodes.commands()
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
