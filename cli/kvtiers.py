"""`fleetplan kv-tiers`: a replica's KV tiers (HBM, host DRAM, NVMe) as capacity, and the HBM miss rate vs TTFT p99
curve of a long-context trace with block hashes."""

from __future__ import annotations

import math
from pathlib import Path

import click

from fleetplan.cli.output import table
from fleetplan.cli.params import FiniteRange
from fleetplan.costmodels.capacity import replica_capacity
from fleetplan.costmodels.engine import engine_or_default
from fleetplan.costmodels.kvtier_curve import CurvePoint, miss_rate_ttft_curve
from fleetplan.costmodels.kvtiers import replica_tier_sizes
from fleetplan.costmodels.latency import decode_step_time_s, prefill_time_s
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.host_tiers import load_node_tiers
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.kv_tiers import block_bytes, block_stack_distances, replica_host_tier
from fleetplan.datasets.traces import load_trace, token_mix_from_trace
from fleetplan.errors import InputError
from fleetplan.fileio import atomic_path, check_destination


@click.command("kv-tiers")
@click.option("--trace", default="mooncake-conversation", show_default=True,
              help="Mooncake JSON Lines (lengths and hash_ids), or a shipped name (mooncake-conversation, "
                   "mooncake-synthetic): the token mix and the prefix blocks' popularity.")
@click.option("--requests", "limit", type=click.IntRange(1, 10_000_000), default=3000, show_default=True,
              help="First requests of the trace whose block reads are counted.")
@click.option("--model", default="Llama-3.1-8B", show_default=True, help="Catalog model.")
@click.option("--gpu", default="H100-SXM-80GB", show_default=True, help="GPU type (with a host-tier row).")
@click.option("--tp", type=click.IntRange(1, 8), default=1, show_default=True, help="GPUs of the replica.")
@click.option("--ttft-s", type=FiniteRange(0.01, 120), default=5.0, show_default=True,
              help="TTFT p95 target of the capacity comparison, seconds.")
@click.option("--tpot-s", type=FiniteRange(0.001, 2), default=0.1, show_default=True,
              help="TPOT p95 target of the capacity comparison, seconds.")
@click.option("--rate", type=FiniteRange(0.0, 1e6, min_open=True), default=None,
              help="Arrival rate of the curve, req/s [default: 0.9 x the HBM-only replica's capacity].")
@click.option("--cache-gb", "cache_gb", default="0,4,16,64,256,1024,4096", show_default=True,
              help="Prefix-cache sizes of the curve, GB (1e9 bytes), comma-separated.")
@click.option("--dram-share", type=FiniteRange(0, 1), default=0.5, show_default=True,
              help="Share of the node's host memory (per GPU) given to the KV tier.")
@click.option("--spill-share", type=FiniteRange(0, 1), default=0.5, show_default=True,
              help="Share of the DRAM tier kept for swapped-out running sequences (the rest caches prefix blocks).")
@click.option("--nvme-share", type=FiniteRange(0, 1), default=0.5, show_default=True,
              help="Share of the node's NVMe (per GPU) caching prefix blocks.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write the miss-rate vs TTFT p99 curve as a PNG here.")
def kv_tiers(trace: str, limit: int, model: str, gpu: str, tp: int, ttft_s: float, tpot_s: float,
             rate: float | None, cache_gb: str, dram_share: float, spill_share: float, nvme_share: float,
             plot_path: str | None) -> None:
    """A replica's KV tiers as capacity (fleetplan.costmodels.kvtiers): its node's DRAM and NVMe per GPU from the
    hardware data; its capacity under the SLO with HBM only and with the host tier (prefix hits fetched instead of
    recomputed, running sequences swapped out above HBM's room); and the curve of a prefix cache's miss rate (by LRU
    popularity over the trace's hash_ids, per cache size) against the TTFT p99 at a fixed rate, with the cache's
    hits read from HBM, DRAM or NVMe at their bandwidths (misses recomputed)."""
    try:
        points_gb = [float(x) for x in cache_gb.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--cache-gb {cache_gb!r}: give numbers of GB, e.g. 0,16,256", field="cache-gb") from None
    if not points_gb or min(points_gb) < 0:
        raise InputError(f"--cache-gb {cache_gb!r}: give sizes >= 0", field="cache-gb", value=cache_gb)
    if plot_path is not None:
        check_destination(plot_path, field="--plot")
    m, g = get_model(model), get_gpu(gpu)
    calib = load_calibration(g)
    mix = token_mix_from_trace(load_trace(trace))
    slo = SLO(ttft_s=ttft_s, tpot_s=tpot_s)
    node = load_node_tiers(g)
    tier = replica_host_tier(m, g, tp, block_trace=trace, requests=limit, dram_share=dram_share,
                             spill_share=spill_share, nvme_share=nvme_share)
    cache, spill, nvme, dram_bw, nvme_bw = replica_tier_sizes(node, tp, dram_share=dram_share, nvme_share=nvme_share,
                                                              spill_share=spill_share)
    alone = replica_capacity(m, g, mix, slo, tp=tp, calib=calib)  # the default engine
    if alone.limiting == "weights_do_not_fit":
        # No replica at all: nothing below is defined (it printed tables of 0 req/s and nan, then advised --rate,
        # which drew a plot of empty axes).
        raise InputError(f"{m.name} at tp {tp} does not fit on {g.name}: {alone.reason}; give a larger --tp",
                         field="--tp", value=tp)
    tiered = replica_capacity(m, g, mix, slo, tp=tp, calib=calib, host_tier=tier)
    eng = engine_or_default(alone.engine, g.memory_bytes / 2**30, g.name)

    from rich.console import Console

    con = Console()
    con.print(f"{m.name} on {tp} x {g.name} ({node.instance}); token mix of {trace}: prompt mean "
              f"{mix.input_tokens_mean:,.0f} / p95 {mix.input_tokens_p95:,.0f} tokens, output mean "
              f"{mix.output_tokens_mean:,.0f}; vLLM V1 engine, budget {eng.max_num_batched_tokens} tokens (the "
              "HBM-only replica's best)")
    tiers = table("KV tiers of the replica", ("tier", "size GB", "read into HBM GB/s", "holds"), right=True)
    tiers.add_row("HBM", f"{alone.kv_bytes_available / 1e9:.1f}", f"{g.hbm_bandwidth_bytes_per_s * tp / 1e9:,.0f}",
                  "running sequences (KV budget after the weights)")
    tiers.add_row("DRAM", f"{(cache + spill) / 1e9:.1f}", f"{dram_bw / 1e9:.0f}",
                  f"{cache / 1e9:.0f} GB prefix cache + {spill / 1e9:.0f} GB swapped-out sequences")
    tiers.add_row("NVMe", f"{nvme / 1e9:,.0f}", f"{nvme_bw / 1e9:.0f}", "prefix cache")
    con.print(tiers)
    sh = tier.shares
    con.print(f"prefix-block reads of the first {limit} requests ({block_bytes(m) / 1e6:.1f} MB blocks): "
              f"{100 * sh.dram:.1f}% in DRAM, {100 * sh.nvme:.1f}% on NVMe, {100 * sh.miss:.1f}% recomputed "
              "(HBM holds running sequences in the planner: no HBM share)")
    cap = table(f"capacity under TTFT p95 <= {ttft_s:g} s, TPOT p95 <= {tpot_s:g} s",
                ("replica", "req/s", "max batch", "batch at capacity", "TTFT p95 s", "limited by"), right=True)
    for name, c in (("HBM only", alone), ("with host tier", tiered)):
        cap.add_row(name, f"{c.req_per_s:.3f}", f"{c.max_batch:.1f}", f"{c.batch_at_capacity:.1f}",
                    f"{c.ttft_p95_s:.2f}", c.limiting)
    con.print(cap)
    if alone.req_per_s > 0:
        con.print(f"the host tier changes capacity x{tiered.req_per_s / alone.req_per_s:.2f}")
    if rate is None:
        if alone.req_per_s <= 0:
            raise InputError(f"the HBM-only replica has no capacity under the SLO ({alone.reason or alone.limiting}); "
                             "give --rate (the curve's TTFT at that rate), or a looser --ttft-s/--tpot-s",
                             field="--rate")
        rate = 0.9 * alone.req_per_s
    elif alone.req_per_s > 0 and rate > tiered.req_per_s:
        con.print(f"note: --rate {rate:g} req/s is above the replica's capacity under the SLO "
                  f"({alone.req_per_s:.3f} req/s HBM only, {tiered.req_per_s:.3f} with the host tier): TTFT p99 "
                  "grows without bound (inf) where the cache's hits do not lift it enough")
    p99 = SLO(ttft_s=ttft_s, tpot_s=tpot_s, ttft_percentile=99.0)
    bws = {"HBM": math.inf, "DRAM": dram_bw, "NVMe": nvme_bw}
    curve = miss_rate_ttft_curve(
        block_stack_distances(trace, limit), block_bytes(m), [x * 1e9 for x in points_gb], read_bytes_per_s=bws,
        kv_bytes_per_token=m.kv_bytes_per_token("bf16"),
        prefill_s=lambda i: prefill_time_s(m, g, i, tp=tp, calib=calib),
        decode_step_s=lambda b, c: decode_step_time_s(m, g, b, c, tp=tp, calib=calib), mix=mix, slo=p99,
        rate_req_per_s=rate, engine=eng)
    tab = table(f"prefix-cache miss rate vs TTFT p99 at {rate:.3f} req/s, the cache's hits read from each tier",
                ("cache GB", "miss rate", *(f"TTFT p99 s, cache in {t}" for t in bws)), right=True)
    for p in curve:
        tab.add_row(f"{p.cache_bytes / 1e9:,g}", f"{100 * p.miss:.1f}%", *(f"{p.ttft_s[t]:.2f}" for t in bws))
    con.print(tab)
    if plot_path is not None and not any(math.isfinite(v) for p in curve for v in p.ttft_s.values()):
        raise InputError(f"every TTFT p99 of the curve is unbounded at {rate:g} req/s (the queue grows): no plot "
                         f"written to {plot_path}; give a lower --rate", field="--rate", value=rate)
    if plot_path is not None:
        _plot(curve, Path(plot_path), f"{m.name}, {tp} x {g.name}, {trace} ({limit} requests), {rate:.3f} req/s\n"
                                      f"reads: HBM free, DRAM {dram_bw / 1e9:g} GB/s, NVMe {nvme_bw / 1e9:g} GB/s")
        con.print(f"wrote {plot_path}")


def _plot(curve: list[CurvePoint], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = sorted(curve, key=lambda p: p.miss)
    x = [100 * p.miss for p in pts]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, marker in zip(pts[0].ttft_s, "osd^v", strict=False):
        ax.plot(x, [p.ttft_s[name] for p in pts], marker=marker, label=f"cache hits read from {name}")
    labelled = -math.inf
    for p, xi in sorted(zip(pts, x, strict=True), key=lambda t: -t[1]):  # the sizes, skipping crowded ones
        if abs(xi - labelled) >= 2.0:
            ax.annotate(f"{p.cache_bytes / 1e9:,g} GB", (xi, max(p.ttft_s.values())), textcoords="offset points",
                        xytext=(0, 6), fontsize=7, ha="center")
            labelled = xi
    ax.set_xlabel("prefix-cache miss rate (share of prefix-block reads recomputed), %; labels: cache size")
    ax.set_ylabel("TTFT p99, s")
    ax.set_title(title, fontsize=8, wrap=True)
    ax.invert_xaxis()
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    try:
        with atomic_path(path, field="--plot") as tmp:
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)
