"""`fleetplan prefix-cache`: per-replica vs shared prefix-cache hit rates from a block-id trace, and the link
bandwidth at which fetching a shared block beats recomputing it."""

from __future__ import annotations

import click

from fleetplan.cli.output import table
from fleetplan.cli.params import FiniteRange
from fleetplan.costmodels.latency import prefill_time_s
from fleetplan.costmodels.ledger import SECONDS_PER_DAY
from fleetplan.costmodels.prefixcache import (
    break_even_egress_usd_per_gb,
    break_even_hit_rate,
    per_replica_and_shared,
    prefix_cache_ledgers,
)
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.prefix_blocks import MOONCAKE_BLOCK_TOKENS, prefix_cache_costs, read_block_ids
from fleetplan.errors import InputError


@click.command("prefix-cache")
@click.option("--trace", default="mooncake-conversation", show_default=True,
              help="JSON Lines with hash_ids per request, or a shipped name (mooncake-conversation, "
                   "mooncake-synthetic).")
@click.option("--requests", "limit", type=click.IntRange(1, 10_000_000), default=3000, show_default=True,
              help="First requests of the trace to use.")
@click.option("--replicas", default="1,2,4,8", show_default=True, help="Replica counts, comma-separated.")
@click.option("--cache-gb", type=FiniteRange(0.1, 1e5), default=20.0, show_default=True,
              help="Prefix-cache memory per replica, GB (1e9 bytes).")
@click.option("--model", default="Llama-3.1-8B", show_default=True, help="Catalog model (KV bytes per token).")
@click.option("--gpu", default="H100-SXM-80GB", show_default=True, help="GPU type (prefill time of a block).")
@click.option("--site", default="aws:us-east-1", show_default=True, help="Site of the replicas (GPU price).")
@click.option("--peer-site", default=None, help="Site the shared cache's remote blocks come from [default: the "
                                                "same site: the inter-node link, no egress].")
@click.option("--rate", type=FiniteRange(0.0, 1e6, min_open=True), default=1.0, show_default=True,
              help="Requests per second over all replicas (the ledger's volume).")
@click.option("--pricing-model", default="on-demand", show_default=True, help="Pricing model of the GPU price.")
def prefix_cache(trace: str, limit: int, replicas: str, cache_gb: float, model: str, gpu: str, site: str,
                 peer_site: str | None, rate: float, pricing_model: str) -> None:
    """Hit rates of a prefix cache per replica (round-robin routing, own LRU each) and shared across the replicas
    (one LRU of their summed memory), by LRU stack distances over the trace's block ids; the KV bytes the shared
    cache moves per request; and the break-even link bandwidth: one block's KV bytes / the seconds to prefill it
    (the roofline's prefill of a 512-token block): above it, fetching beats recomputing. Then the ledger per day
    at --rate of no cache, per-replica caches and the shared cache on the largest replica count: prefill GPU-hours
    of the missed blocks, the caches' HBM (pro rata of the GPU-hour), the GPUs' wait for moved blocks and their
    egress (--peer-site), with the break-even egress price and the hit rate at which the cache pays its memory."""
    try:
        counts = sorted({int(x) for x in replicas.split(",") if x.strip()})
    except ValueError:
        raise InputError(f"--replicas {replicas!r}: give whole numbers, e.g. 1,2,4", field="replicas") from None
    if not counts or counts[0] < 1:
        raise InputError(f"--replicas {replicas!r}: give counts >= 1", field="replicas", value=replicas)
    m, g = get_model(model), get_gpu(gpu)
    # A tp-1 replica (the prefill times below are one GPU's) holds the weights and the cache in the share of HBM
    # vLLM uses (0.9, replica_capacity's default): Llama-3.1-70B on an A10G was priced with exit 0.
    usable = 0.9 * g.memory_bytes
    if m.weight_bytes("bf16") + cache_gb * 1e9 > usable:
        raise InputError(f"{m.name}'s bf16 weights ({m.weight_bytes('bf16') / 1e9:,.0f} GB) and a {cache_gb:g}-GB "
                         f"cache exceed 0.9 × {g.memory_bytes / 1e9:.0f} GB of one {g.name}, and this command prices "
                         "a tp-1 replica: give a smaller model, a larger GPU (--gpu) or a smaller --cache-gb",
                         field="--model", value=m.name)
    # The site's price before any output: an unknown site was refused after the hit-rate table had been printed.
    r = counts[-1]
    costs = prefix_cache_costs(m, g, site=site, peer_site=peer_site, requests_per_day=rate * SECONDS_PER_DAY,
                               blocks_per_request=1.0, cache_bytes_per_replica=cache_gb * 1e9, replicas=r,
                               pricing_model=pricing_model)
    block_bytes = MOONCAKE_BLOCK_TOKENS * m.kv_bytes_per_token("bf16")
    cap_blocks = max(1, int(cache_gb * 1e9 // block_bytes))
    reqs = read_block_ids(trace, limit=limit)
    blocks = sum(len(q) for q in reqs)
    tab = table(f"{trace}: {len(reqs)} requests, {blocks} block reads; {cache_gb:g} GB per replica = {cap_blocks} "
                f"blocks of {MOONCAKE_BLOCK_TOKENS} tokens ({block_bytes / 1e6:.1f} MB each, {m.name} bf16 KV)",
                ("replicas", "per-replica hit rate", "shared hit rate", "extra hits", "KV moved per request MB"),
                right=True)
    hits = {}
    for r in counts:
        per, shared = per_replica_and_shared(reqs, r, cap_blocks)
        hits[r] = (per, shared)
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
    costs = prefix_cache_costs(m, g, site=site, peer_site=peer_site, requests_per_day=rate * SECONDS_PER_DAY,
                               blocks_per_request=blocks / len(reqs), cache_bytes_per_replica=cache_gb * 1e9,
                               replicas=r, pricing_model=pricing_model)
    ledgers = prefix_cache_ledgers(*hits[r], costs)
    led = table(f"ledger per day: {r} replicas, {rate:g} req/s, {costs.route} ({costs.price.gpu} at "
                f"${costs.price.usd_per_gpu_hour:.2f}/GPU-h, {costs.price.pricing_model})",
                ("option", "line", "quantity", "unit", "unit price USD", "USD/day"),
                right=lambda c: c in ("quantity", "unit price USD", "USD/day"))
    for name, ledger in ledgers.items():
        for item in ledger.items:
            led.add_row(name, item.label, f"{item.quantity_per_day:,.3f}", item.unit, f"{item.unit_price_usd:.4f}",
                        f"{item.amount_usd_per_day:,.2f}")
        led.add_row(name, "total", "", "", "", f"{ledger.total_usd_per_day:,.2f}", style="bold")
    con.print(led)
    per_t, sh_t = ledgers["per-replica caches"].total_usd_per_day, ledgers["shared cache"].total_usd_per_day
    none_t = ledgers["no cache"].total_usd_per_day
    con.print(f"the shared cache {'saves' if sh_t <= per_t else 'costs'} ${abs(per_t - sh_t):,.2f}/day against "
              f"per-replica caches and {'saves' if sh_t <= none_t else 'costs'} ${abs(none_t - sh_t):,.2f}/day "
              "against no cache (memory priced pro rata of the GPU-hour: its cost when that HBM could hold running "
              "sequences; HBM the running batch leaves idle caches for free)")
    be = break_even_egress_usd_per_gb(costs)
    fetch_ms, pre_ms = 1000 * costs.fetch_gpu_s_per_block, 1000 * costs.prefill_gpu_s_per_block
    con.print("break-even egress: " + (f"${be:.5f}/GB moved (a remote hit saves {pre_ms:.1f} ms of prefill and "
                                       f"waits {fetch_ms:.1f} ms for the block; "
                                       + (f"the route charges ${costs.egress_table.tiers[0].usd_per_gb:.4f}/GB)"
                                          if costs.egress_table is not None else "no egress within a zone)")
                                       if be > 0 else
                                       f"none: fetching a block ({fetch_ms:.1f} ms) is slower than recomputing it "
                                       f"({pre_ms:.1f} ms), even with free egress"))
    bh = break_even_hit_rate(costs)
    con.print(f"break-even hit rate for the caches' memory ({costs.cache_gpu_hours_per_day:.2f} GPU-h/day of HBM): "
              + (f"{100 * bh:.1f}% of block reads" if bh <= 1 else "above 100%: at this rate the memory never pays")
              + f"; measured {100 * hits[r][0]:.1f}% per replica, {100 * hits[r][1]:.1f}% shared")
