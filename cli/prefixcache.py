"""`fleetplan prefix-cache`: per-replica vs shared prefix-cache hit rates from a block-id trace, and the link
bandwidth at which fetching a shared block beats recomputing it."""

from __future__ import annotations

import click

from fleetplan.cli.output import table
from fleetplan.costmodels.latency import prefill_time_s
from fleetplan.costmodels.prefixcache import per_replica_and_shared
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.prefix_blocks import MOONCAKE_BLOCK_TOKENS, read_block_ids
from fleetplan.errors import InputError


@click.command("prefix-cache")
@click.option("--trace", default="mooncake-conversation", show_default=True,
              help="JSON Lines with hash_ids per request, or a shipped name (mooncake-conversation, "
                   "mooncake-synthetic).")
@click.option("--requests", "limit", type=click.IntRange(1, 10_000_000), default=3000, show_default=True,
              help="First requests of the trace to use.")
@click.option("--replicas", default="1,2,4,8", show_default=True, help="Replica counts, comma-separated.")
@click.option("--cache-gb", type=click.FloatRange(0.1, 1e5), default=20.0, show_default=True,
              help="Prefix-cache memory per replica, GB (1e9 bytes).")
@click.option("--model", default="Llama-3.1-8B", show_default=True, help="Catalog model (KV bytes per token).")
@click.option("--gpu", default="H100-SXM-80GB", show_default=True, help="GPU type (prefill time of a block).")
def prefix_cache(trace: str, limit: int, replicas: str, cache_gb: float, model: str, gpu: str) -> None:
    """Hit rates of a prefix cache per replica (round-robin routing, own LRU each) and shared across the replicas
    (one LRU of their summed memory), by LRU stack distances over the trace's block ids; the KV bytes the shared
    cache moves per request; and the break-even link bandwidth: one block's KV bytes / the seconds to prefill it
    (the roofline's prefill of a 512-token block): above it, fetching beats recomputing."""
    try:
        counts = sorted({int(x) for x in replicas.split(",") if x.strip()})
    except ValueError:
        raise InputError(f"--replicas {replicas!r}: give whole numbers, e.g. 1,2,4", field="replicas") from None
    if not counts or counts[0] < 1:
        raise InputError(f"--replicas {replicas!r}: give counts >= 1", field="replicas", value=replicas)
    m, g = get_model(model), get_gpu(gpu)
    block_bytes = MOONCAKE_BLOCK_TOKENS * m.kv_bytes_per_token("bf16")
    cap_blocks = max(1, int(cache_gb * 1e9 // block_bytes))
    reqs = read_block_ids(trace, limit=limit)
    blocks = sum(len(q) for q in reqs)
    tab = table(f"{trace}: {len(reqs)} requests, {blocks} block reads; {cache_gb:g} GB per replica = {cap_blocks} "
                f"blocks of {MOONCAKE_BLOCK_TOKENS} tokens ({block_bytes / 1e6:.1f} MB each, {m.name} bf16 KV)",
                ("replicas", "per-replica hit rate", "shared hit rate", "extra hits", "KV moved per request MB"),
                right=True)
    for r in counts:
        per, shared = per_replica_and_shared(reqs, r, cap_blocks)
        # Extra hits of the shared cache: blocks a replica fetches from another's memory (upper bound: all of them
        # remote, as with round-robin routing and r > 1).
        moved = (shared - per) * blocks / len(reqs) * block_bytes if r > 1 else 0.0
        tab.add_row(str(r), f"{100 * per:.1f}%", f"{100 * shared:.1f}%", f"{100 * (shared - per):+.1f} pts",
                    f"{moved / 1e6:.1f}")
    from rich.console import Console

    con = Console()
    con.print(tab)
    t_block = prefill_time_s(m, g, MOONCAKE_BLOCK_TOKENS, calib=load_calibration(g))
    con.print(f"break-even link bandwidth: {block_bytes / 1e6:.1f} MB per block / {1000 * t_block:.1f} ms to prefill "
              f"it on {g.name} = {block_bytes / t_block / 1e9:.1f} GB/s; a link faster than that makes a shared hit "
              "cheaper than recomputing (per block, a first-block prefill: later blocks attend to longer contexts, "
              "so their recompute costs more and the break-even is lower)")
