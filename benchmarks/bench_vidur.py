"""Against Vidur: the arrival rate at which p95 TTFT and p95 TPOT targets stop holding, per replica configuration.

Run (needs a checkout of Vidur, https://github.com/microsoft/vidur, and a Python environment where it imports;
fleetplan does not depend on it and nothing else in the project imports this script):

    .venv/bin/python benchmarks/bench_vidur.py --vidur PATH/TO/vidur --vidur-python PATH/TO/venv/bin/python \
        [--configs 8b-a100 ...] [--duration-s 600] [--seed 0] [--write-docs]

For each configuration (model, GPU, tp, SLO), the same requests (Poisson arrivals, prompt and output lengths drawn
from the Azure LLM inference trace 2023, conversation; the arrivals of rate r are one unit-rate Poisson process's
times divided by r, so every rate replays the same requests, only closer together) are replayed by

* Vidur with its ``sarathi`` scheduler (chunked prefill; the chunk = fleetplan's token budget) and its ``vllm``
  scheduler (vLLM V0: whole prefills batched ahead of decodes);
* fleetplan's replay (:mod:`fleetplan.simulator.engine`, the engine ``fleetplan simulate`` runs) with the
  ``vllm-v1`` engine (chunked prefill, same budget) and the ``prefill-first`` engine;

and the largest rate at which p95 TTFT <= its target and p95 TPOT <= its target (over the requests arriving after
the first 10% of the run; every request runs to completion) is found by bisection on the rate (bracketed from
fleetplan's capacity model, then halved to 3%). fleetplan's capacity model (:func:`fleetplan.costmodels.capacity.
replica_capacity`, the option's ``capacity_req_per_s`` before any margin) is printed beside them. The script prints
the table and the ratios; ``--write-docs`` rewrites the table in docs/vidur.md.

Vidur's attention profiles are not in its public repository snapshots (git LFS objects of 9-21 MB; the snapshot
holds no blob for them). This script rebuilds one per (GPU, model, tp) from rows of Vidur's own published A100
profile of Meta-Llama-3-8B (:data:`ATTENTION_SAMPLES_FILE`, provenance in its folder), fitted with kernel-shaped
formulas (:func:`fit_attention`) and evaluated on Vidur's own profiling grid; H100 rows are the A100 formulas scaled by
Vidur's own H100/A100 ratio of its measured MLP kernels (:func:`h100_speedups`). docs/vidur.md says what this means
for the comparison.

Measured 2026-12-03 (2 shared cores, nice 10, seed 0; `--duration-s 600`, 1800 for 70b-a100-tp2), limit rates in
req/s (Vidur sarathi / Vidur vllm / replay vllm-v1 / replay prefill-first / model vllm-v1 / model prefill-first):

    8b-a100         5.77 / 5.91 / 6.71 / 6.22 / 4.83 / 5.09   replay v1 / sarathi 1.16, pf / vllm 1.05
    8b-a100-tpot50  4.58 / 4.47 / 5.07 / 4.70 / 4.36 / 4.36   1.11, 1.05
    70b-a100-tp4    1.56 / 1.44 / 2.16 / 2.06 / 1.86 / 2.03   1.39, 1.43
    70b-a100-tp2    0.48 / 0.47 / 0.62 / 0.78 / 0.20 / 0.30   1.29, 1.66
    70b-h100-tp4    6.31 / 5.15 / 6.15 / 5.56 / 5.42 / 5.53   0.97, 1.08

docs/vidur.md has the ratios, the step times (`--steps-only`) and what they mean.

``--fleetplan-only`` needs no Vidur: fleetplan's capacity model and its replay's limit for each seed of ``--seeds``
(1% bisection), the binding check, and model / replay over the seeds; ``--write-docs`` then rewrites only the
fleetplan columns of docs/vidur.md's table. After the capacity model's revision of 2026-12-03 (2 shared cores,
nice 5, about 30 s in all):

    .venv/bin/python benchmarks/bench_vidur.py --fleetplan-only --seeds 0 1 2 \
        --configs 8b-a100 8b-a100-tpot50 70b-a100-tp4 70b-h100-tp4
    .venv/bin/python benchmarks/bench_vidur.py --fleetplan-only --seeds 0 1 2 --configs 70b-a100-tp2 --duration-s 7200

    config           model v1 / replay v1 (seeds 0-2)    model pf / replay pf
    8b-a100          6.16 / 6.74, 6.74, 6.49: 0.92-0.95   6.18 / 6.34, 6.34, 6.18: 0.97-1.00
    8b-a100-tpot50   4.75 / 5.12, 5.15, 5.42: 0.88-0.93   4.79 / 4.79, 4.85, 5.00: 0.96-1.00
    70b-a100-tp4     1.90 / 2.17, 2.07, 2.14: 0.88-0.92   2.04 / 2.08, 1.99, 1.99: 0.98-1.03
    70b-a100-tp2     0.47 / 0.59, 0.59, 0.55: 0.79-0.85   0.76 / 0.72, 0.78, 0.75: 0.97-1.06
    70b-h100-tp4     5.71 / 6.16, 6.35, 6.23: 0.90-0.93   5.59 / 5.67, 5.67, 5.77: 0.97-0.99

(before the revision, same command with 600 s / 1800 s for tp2 and 3% bisection: 0.72-0.76, 0.82-0.86, 0.86-0.90,
0.33-0.46, 0.88 for vllm-v1 and 0.82-0.84, 0.88-0.93, 1.00-1.03, 0.39-0.41, 0.97 for prefill-first).
"""

from __future__ import annotations

import argparse
import csv
import importlib.resources
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fleetplan.costmodels.capacity import replica_capacity
from fleetplan.costmodels.engine import VLLM_V1
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.gpus import load_gpus
from fleetplan.datasets.catalog.models import load_models
from fleetplan.datasets.traces import load_trace, token_mix_from_trace
from fleetplan.errors import FleetplanError
from fleetplan.placement.plan import Plan
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario
from fleetplan.simulator.fleet import FleetBuilder
from fleetplan.simulator.metrics import request_latencies
from fleetplan.simulator.replay import run_window
from fleetplan.simulator.workload import Workload
from fleetplan.solvers.online.state import window_problem

#: Rows of Vidur's A100 attention profile of Meta-Llama-3-8B, transcribed with their provenance into
#: datasets/data/profiles/vidur/ (SOURCE.txt there; Vidur's MIT license beside it).
ATTENTION_SAMPLES_FILE = "data/profiles/vidur/attention_a100_llama3_8b_sample.csv"


HEAD_DIM = 128
SAMPLE_HEADS = {1: (32, 8), 4: (8, 2)}  # Meta-Llama-3-8B's (query, KV) heads per GPU at tp 1 and 4
#: Step times printed for both simulators: decode steps at (batch, context tokens), prefills of n-token prompts.
DECODE_POINTS = [(16, 1280), (64, 1280), (128, 1280)]
PREFILL_POINTS = [1024, 4096]
MAX_TOKENS = 8192  # longest request replayed (prompt + output); 1 in 19,366 azure-conv requests is longer


@dataclass(frozen=True)
class Config:
    """One replica configuration compared. ``vidur_model``: Vidur's model name (same layer shapes as
    ``model``); ``vidur_compute_model``: whose MLP profile Vidur reads on that device."""

    name: str
    model: str
    gpu: str
    tp: int
    ttft_s: float
    tpot_s: float
    vidur_model: str
    vidur_device: str
    vidur_network: str
    q_heads: int  # the model's attention heads (all GPUs)
    kv_heads: int


CONFIGS = [
    Config("8b-a100", "Llama-3.1-8B", "A100-80GB", 1, 1.0, 0.1, "meta-llama/Meta-Llama-3-8B", "a100", "a100_dgx",
           32, 8),
    Config("8b-a100-tpot50", "Llama-3.1-8B", "A100-80GB", 1, 1.0, 0.05, "meta-llama/Meta-Llama-3-8B", "a100",
           "a100_dgx", 32, 8),
    Config("70b-a100-tp4", "Llama-3.1-70B", "A100-80GB", 4, 2.0, 0.1, "meta-llama/Meta-Llama-3-70B", "a100",
           "a100_dgx", 64, 8),
    Config("70b-a100-tp2", "Llama-3.1-70B", "A100-80GB", 2, 2.0, 0.1, "meta-llama/Meta-Llama-3-70B", "a100",
           "a100_dgx", 64, 8),
    # Vidur has no H100 profile of Llama-3-70B; Llama-2-70B has the same layer shapes (80 layers, 64/8 heads, 8192
    # hidden, 28672 MLP); only the vocabulary (not timed by Vidur) and the rope base differ.
    Config("70b-h100-tp4", "Llama-3.1-70B", "H100", 4, 2.0, 0.1, "meta-llama/Llama-2-70b-hf", "h100", "h100_dgx",
           64, 8),
]


# --------------------------------------------------------------------------------------------------------------
# Attention profile reconstruction


@dataclass(frozen=True)
class AttentionFit:
    """Per-layer attention kernel times (ms) on A100 fitted to :data:`ATTENTION_SAMPLES_CSV`.

    prefill_ms = p[0] + p[1] * TFLOP + p[2] * kv * q_heads / 1e6 + p[3] * chunk * q_heads / 1e6, with TFLOP =
    4 * chunk * (kv + chunk / 2) * head_dim * q_heads / 1e12 (causal attention of a chunk over its context);
    decode_ms = d[0] * min(1, GB / 0.004) + d[1] * GB + d[2] * batch / 100, GB = batch * kv * kv_heads * head_dim
    * 2 (K and V) * 2 bytes / 1e9 (the KV read); save_ms (writing the chunk's KV to the paged cache) = max(0.019,
    s * chunk) for prefills (per token, the same at 8 and 2 KV heads in the samples) and 0.002 + batch * 6e-6 for
    decodes. Weighted least squares on relative error.
    """

    p: tuple[float, float, float, float]
    d: tuple[float, float, float]
    s: float
    prefill_err: float  # largest relative error on the sampled prefill rows with chunk >= 512
    decode_err: float  # largest relative error on the sampled decode rows with batch >= 8 and kv >= 512

    def prefill_ms(self, chunk: np.ndarray, kv: np.ndarray, q_heads: np.ndarray | float) -> np.ndarray:
        tflop = 4.0 * chunk * (kv + chunk / 2) * HEAD_DIM * q_heads / 1e12
        p = self.p
        return p[0] + p[1] * tflop + p[2] * kv * q_heads / 1e6 + p[3] * chunk * q_heads / 1e6

    def decode_ms(self, batch: np.ndarray, kv: np.ndarray, kv_heads: np.ndarray | float) -> np.ndarray:
        gb = batch * kv * kv_heads * HEAD_DIM * 4 / 1e9
        d = self.d
        return d[0] * np.minimum(1.0, gb / 0.004) + d[1] * gb + d[2] * batch / 100

    def save_ms(self, chunk: np.ndarray, batch: np.ndarray, is_prefill: np.ndarray) -> np.ndarray:
        return np.where(is_prefill, np.maximum(0.019, self.s * chunk), 0.002 + 6e-6 * batch)


def attention_samples_text() -> str:
    """The sampled rows of Vidur's A100 attention profile (CSV text; :data:`ATTENTION_SAMPLES_FILE`)."""
    return (importlib.resources.files("fleetplan.datasets") / ATTENTION_SAMPLES_FILE).read_text()


def fit_attention() -> AttentionFit:
    """Fit :class:`AttentionFit` to the sampled rows (raises SystemExit if the fit is poor)."""
    rows = list(csv.DictReader(io.StringIO(attention_samples_text())))
    tp = np.array([int(r["tp"]) for r in rows])
    pre = np.array([r["is_prefill"] == "1" for r in rows])
    batch, chunk, kv = (np.array([float(r[k]) for r in rows]) for k in ("batch", "chunk", "kv"))
    qh = np.array([SAMPLE_HEADS[t][0] for t in tp], dtype=float)
    kvh = np.array([SAMPLE_HEADS[t][1] for t in tp], dtype=float)
    ypre = np.array([float(r["attn_prefill_ms"]) for r in rows])
    ydec = np.array([float(r["attn_decode_ms"]) for r in rows])
    ysave = np.array([float(r["save_ms"]) for r in rows])

    c, k, q = chunk[pre], kv[pre], qh[pre]
    x = np.c_[np.ones(pre.sum()), 4.0 * c * (k + c / 2) * HEAD_DIM * q / 1e12, k * q / 1e6, c * q / 1e6]
    w = 1.0 / ypre[pre]
    p = np.linalg.lstsq(x * w[:, None], ypre[pre] * w, rcond=None)[0]
    dec = ~pre
    gb = batch[dec] * kv[dec] * kvh[dec] * HEAD_DIM * 4 / 1e9
    xd = np.c_[np.minimum(1.0, gb / 0.004), gb, batch[dec] / 100]
    wd = 1.0 / ydec[dec]
    d = np.linalg.lstsq(xd * wd[:, None], ydec[dec] * wd, rcond=None)[0]
    big = pre & (chunk >= 512)
    s = float(np.median(ysave[big] / chunk[big]))
    fit = AttentionFit((float(p[0]), float(p[1]), float(p[2]), float(p[3])), (float(d[0]), float(d[1]), float(d[2])),
                       s, 0.0, 0.0)
    perr = np.abs(fit.prefill_ms(chunk[big], kv[big], qh[big]) - ypre[big]) / ypre[big]
    mid = dec & (batch >= 8) & (kv >= 512)
    derr = np.abs(fit.decode_ms(batch[mid], kv[mid], kvh[mid]) - ydec[mid]) / ydec[mid]
    fit = AttentionFit(fit.p, fit.d, s, float(perr.max()), float(derr.max()))
    if fit.prefill_err > 0.3 or fit.decode_err > 0.3:
        raise SystemExit(f"attention fit too poor (prefill {fit.prefill_err:.0%}, decode {fit.decode_err:.0%})")
    return fit


def h100_speedups(vidur: str) -> tuple[float, float]:
    """(memory-bound, compute-bound) H100 / A100 speed ratios from Vidur's own MLP profiles of Llama-2-70B at tp 4:
    the sum of the four projection GEMMs at 1 token (weight reads) and at 4096 tokens (tensor cores)."""

    def total(dev: str, tokens: int) -> float:
        path = os.path.join(vidur, "data/profiling/compute", dev, "meta-llama/Llama-2-70b-hf/mlp.csv")
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if int(r["num_tensor_parallel_workers"]) == 4 and int(r["num_tokens"]) == tokens:
                    return sum(float(r[f"time_stats.{k}.median"])
                               for k in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"))
        raise SystemExit(f"{path}: no tp-4 row at {tokens} tokens")

    return total("a100", 1) / total("h100", 1), total("a100", 4096) / total("h100", 4096)


def _seq_lengths(max_seq: int) -> list[int]:
    """Vidur's profiling grid of context lengths (vidur/profiling/utils.get_seq_lengths_to_profile)."""
    s = list(range(0, 1025, 32)) + list(range(1024, 4097, 64)) + list(range(4096, 65537, 256))
    return [x for x in s if x < max_seq]


def _chunk_sizes(max_seq: int) -> list[int]:
    """Vidur's grid of prefill chunk sizes (get_attention_prefill_chunk_sizes_to_profile)."""
    s = (list(range(64, 129, 16)) + list(range(128, 1025, 32)) + list(range(1024, 4097, 64))
         + list(range(4096, 16385, 128)))
    return [x for x in s if x <= max_seq]


def write_attention_csv(path: str, cfg: Config, fit: AttentionFit, max_batch: int,
                        speed: tuple[float, float] = (1.0, 1.0)) -> int:
    """Write a Vidur attention.csv for ``cfg`` (its heads per GPU at its tp) on Vidur's profiling grid up to
    :data:`MAX_TOKENS` tokens and ``max_batch`` decodes; ``speed``: (memory, compute) speed-up over A100. Returns the
    number of rows."""
    qh, kvh = cfg.q_heads // cfg.tp, cfg.kv_heads // cfg.tp
    combos: list[tuple[int, int, int, bool]] = []
    for c in _chunk_sizes(MAX_TOKENS):
        combos += [(c, i * c, 1, True) for i in range(MAX_TOKENS // c) if i * c + c <= MAX_TOKENS]
    combos += [(c, 0, 1, True) for c in _seq_lengths(MAX_TOKENS) if c > 0]
    batches = [b for b in list(range(1, 129)) + list(range(136, 1025, 8)) if b <= max_batch]
    combos += [(0, k, b, False) for k in _seq_lengths(MAX_TOKENS) if k > 0 for b in batches]
    a = np.array([(c, k, b, p) for c, k, b, p in combos], dtype=float)
    chunk, kv, batch, pre = a[:, 0], a[:, 1], a[:, 2], a[:, 3] > 0
    mem, comp = speed
    t_pre = np.where(pre, fit.prefill_ms(chunk, kv, qh) / comp, 0.0)
    t_dec = np.where(pre, 0.0, fit.decode_ms(batch, kv, kvh) / mem)
    t_save = fit.save_ms(chunk, batch, pre) / mem
    with open(path, "w") as f:
        f.write("time_stats.attn_kv_cache_save.median,time_stats.attn_prefill.median,time_stats.attn_decode.median,"
                "n_embd,n_q_head,n_kv_head,block_size,num_tensor_parallel_workers,max_model_len,batch_size,"
                "prefill_chunk_size,kv_cache_size,is_prefill,attention_backend\n")
        emb = cfg.q_heads * HEAD_DIM
        for i in range(len(a)):
            f.write(f"{t_save[i]:.5f},{t_pre[i]:.5f},{t_dec[i]:.5f},{emb},{cfg.q_heads},{cfg.kv_heads},16,{cfg.tp},"
                    f"{MAX_TOKENS},{int(batch[i])},{int(chunk[i])},{int(kv[i])},{bool(pre[i])},"
                    "AttentionBackend.FLASHINFER\n")
    return len(a)


# --------------------------------------------------------------------------------------------------------------
# The requests


def requests(seed: int, duration_s: float, rate: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival_s, prompt_tokens, output_tokens) of the run at ``rate`` req/s: a unit-rate Poisson process's times
    (fixed by ``seed``) / rate up to ``duration_s``, lengths drawn from azure-conv with the same seed (a request
    keeps its lengths at every rate), prompts cut so that prompt + output <= :data:`MAX_TOKENS`."""
    mix = token_mix_from_trace(load_trace("azure-conv"))
    n_max = int(rate * duration_s * 1.5 + 100)
    rng = np.random.default_rng([seed, 1])
    t = np.cumsum(rng.exponential(1.0, n_max)) / rate
    inp, out = mix.draw(np.random.default_rng([seed, 2]), n_max)
    keep = t < duration_s
    inp, out = inp[keep], out[keep]
    inp = np.minimum(inp, MAX_TOKENS - out)
    return t[keep], inp.astype(np.int64), out.astype(np.int64)


def p95s(arr: np.ndarray, ttft: np.ndarray, tpot: np.ndarray, out: np.ndarray,
         duration_s: float) -> tuple[float, float, int]:
    """(p95 TTFT s, p95 TPOT s, n) over requests arriving after the first 10% (TPOT of outputs > 1 token)."""
    m = arr >= 0.1 * duration_s
    tt = ttft[m]
    tp = tpot[m & (out > 1)]
    q = lambda x: float(np.quantile(x, 0.95)) if len(x) and np.all(np.isfinite(x)) else math.inf  # noqa: E731
    return q(tt), q(tp), int(m.sum())


# --------------------------------------------------------------------------------------------------------------
# fleetplan: capacity model and replay

SCENARIO = """name: vidur-{name}
options: {{margin: 0.0, memory_utilization: 0.9, engine: {engine}}}
sites:
  - name: aws:us-east-1
    inventory:
      - {{gpu: {gpu}, nodes: 1, gpus_per_node: 8}}
models:
  - name: {model}
    tp: [{tp}]
    slo: {{ttft_p95_s: {ttft}, tpot_p95_s: {tpot}}}
    token_mix: {{trace: azure-conv}}
    demand:
      servegen: {{series: m-small, mean_rate_req_per_s: 1.0, day: mean, gaps: interpolate}}
"""


class Fleetplan:
    """fleetplan's capacity model and replay of one configuration with one engine."""

    def __init__(self, cfg: Config, engine: str, workdir: str):
        path = os.path.join(workdir, f"scenario-{cfg.name}-{re.sub(r'[^a-z0-9]+', '-', engine)}.yaml")
        with open(path, "w") as f:
            f.write(SCENARIO.format(name=cfg.name, engine=engine, gpu=cfg.gpu, model=cfg.model, tp=cfg.tp,
                                    ttft=cfg.ttft_s, tpot=cfg.tpot_s))
        try:
            self.scenario = load_scenario(path)
            self.problem = build_problem(self.scenario)
        except FleetplanError as e:
            raise SystemExit(f"error: {e}") from None
        opts = [o for o in self.problem.options if o.model == cfg.model and o.tp == cfg.tp and o.pp == 1]
        if len(opts) != 1:
            raise SystemExit(f"{cfg.name}: expected one option, found {len(opts)}")
        self.option = opts[0]
        self.capacity_req_per_s = float(self.option.capacity_req_per_s)
        gpu = load_gpus()[next(p.gpu for p in self.problem.pools if p.id == self.option.pool)]
        #: the capacity model's record of the option (binding check, latencies at capacity), recomputed with the
        #: option's resolved engine (the calculation the scenario reader made; same figure)
        self.option_capacity = replica_capacity(load_models()[cfg.model], gpu,
                                                token_mix_from_trace(load_trace("azure-conv")),
                                                SLO(ttft_s=cfg.ttft_s, tpot_s=cfg.tpot_s), tp=cfg.tp,
                                                calib=load_calibration(gpu), engine=self.option.engine or VLLM_V1)
        if abs(self.option_capacity.req_per_s - self.capacity_req_per_s) > 1e-6 * self.capacity_req_per_s:
            raise SystemExit(f"{cfg.name}: recomputed capacity {self.option_capacity.req_per_s} differs from the "
                             f"option's {self.capacity_req_per_s}")
        self.engine = self.option.engine
        self.model = cfg.model

    def steps_s(self, chunk: int | None) -> list[float]:
        """The replay's step times (s) at :data:`DECODE_POINTS`, and the time to prefill :data:`PREFILL_POINTS`
        prompts alone (in chunks of ``chunk`` tokens when given, as the replay's mixed steps cost them)."""
        o = self.option
        sm = FleetBuilder(self.problem, Plan(replicas={o.key: (1,)}), self.scenario).step_model(
            o.model, o.pool, o.tp, o.pp, None, engine=o.engine)
        out = [float(sm.decode(b, c)) for b, c in DECODE_POINTS]
        for n in PREFILL_POINTS:
            k, fixed = chunk or n, float(sm.prefill(1))
            # the replay's mixed steps with no decodes running: a step costs prefill(1), a chunk from context i
            # prefill(i + chunk) - prefill(i) (from 0: prefill(chunk) - prefill(1))
            out.append(sum(fixed + float(sm.prefill(min(n, i + k))) - (float(sm.prefill(i)) if i else fixed)
                           for i in range(0, n, k)))
        return out

    def p95(self, arr: np.ndarray, inp: np.ndarray, out: np.ndarray, duration_s: float) -> tuple[float, float, int]:
        wl = Workload(arr, inp, out, np.full(len(arr), self.model, dtype=object), 0.1 * duration_s, duration_s,
                      "poisson")
        one = window_problem(self.problem, {self.model: len(arr) / duration_s})
        _, res = run_window(FleetBuilder(one, Plan(replicas={self.option.key: (1,)}), self.scenario), wl, 0)
        ttft, tpot, _ = request_latencies(wl, res)
        ttft = np.where(res.dropped, math.inf, ttft)
        return p95s(arr, ttft, tpot, out, duration_s)


# --------------------------------------------------------------------------------------------------------------
# Vidur, driven in its own Python through a small line protocol

DRIVER = r'''
import atexit, json, math, os, sys
sys.path.insert(0, sys.argv[1])
proto = os.fdopen(os.dup(1), "w")  # the answers; everything else Vidur prints goes to stderr
os.dup2(2, 1)
import numpy as np
from vidur.config import (ClusterConfig, MetricsConfig, RandomForrestExecutionTimePredictorConfig, ReplicaConfig,
                          RoundRobinGlobalSchedulerConfig, SarathiSchedulerConfig, SimulationConfig,
                          TraceRequestGeneratorConfig, VllmSchedulerConfig)
from vidur.entities import Batch, Request
from vidur.entities.base_entity import BaseEntity
from vidur.simulator import Simulator
from vidur.utils.random import set_seeds


def reset_ids(cls):  # Vidur numbers its entities per class, process-wide; each run starts from 0
    for sub in cls.__subclasses__():
        sub._id = -1
        reset_ids(sub)


for line in sys.stdin:
    reset_ids(BaseEntity)
    job = json.loads(line)
    if job["scheduler"] == "sarathi":
        sched = SarathiSchedulerConfig(chunk_size=job["chunk"], batch_size_cap=job["batch_cap"])
    else:
        sched = VllmSchedulerConfig(max_tokens_in_batch=job["max_tokens_in_batch"], batch_size_cap=job["batch_cap"])
    pred = RandomForrestExecutionTimePredictorConfig(
        compute_input_file=job["compute_file"], attention_input_file=job["attention_file"],
        all_reduce_input_file=job["all_reduce_file"], send_recv_input_file=job["send_recv_file"],
        prediction_max_prefill_chunk_size=job["pred_max_chunk"], prediction_max_batch_size=job["batch_cap"],
        prediction_max_tokens_per_request=job["max_tokens"], k_fold_cv_splits=2, num_training_job_threads=1,
        num_estimators=[250], max_depth=[32], min_samples_split=[2])
    cfg = SimulationConfig(
        seed=42, log_level="warning",
        cluster_config=ClusterConfig(num_replicas=1, replica_config=ReplicaConfig(
            model_name=job["model"], device=job["device"], network_device=job["network"],
            tensor_parallel_size=job["tp"]), global_scheduler_config=RoundRobinGlobalSchedulerConfig(),
            replica_scheduler_config=sched),
        request_generator_config=TraceRequestGeneratorConfig(trace_file=job["trace"], max_tokens=job["max_tokens"]),
        execution_time_predictor_config=pred,
        metrics_config=MetricsConfig(write_metrics=False, enable_chrome_trace=False, store_plots=False,
                                     store_request_metrics=False, store_batch_metrics=False,
                                     store_utilization_metrics=False, output_dir=job["out_dir"],
                                     cache_dir=job["cache_dir"]))
    set_seeds(42)
    sim = Simulator(cfg)
    atexit.unregister(sim._write_output)
    reqs = sorted((e._request for _, e in sim._event_queue), key=lambda r: r.arrived_at)
    sim.run()
    arr = np.array([r.arrived_at for r in reqs])
    ttft = np.array([r.prefill_completed_at - r.arrived_at if r.completed else math.inf for r in reqs])
    out = np.array([r.num_decode_tokens for r in reqs])
    tpot = np.array([(r.completed_at - r.prefill_completed_at) / (r.num_decode_tokens - 1)
                     if r.completed and r.num_decode_tokens > 1 else 0.0 for r in reqs])
    pred = sim._scheduler._replica_schedulers[0]._replica_stage_schedulers[0]._execution_time_predictor
    steps, rebuilt = [], []  # seconds; the share of them from the attention profile (rebuilt when missing)

    def timed(batch):
        et = pred.get_execution_time(batch, 0)
        att = (et.attention_kv_cache_save_execution_time + et.attention_decode_execution_time
               + et.attention_prefill_execution_time) * et.num_layers * 1e-3
        return et.total_time, att

    for b, c in job.get("decode_points", []):  # one decode step of b sequences at context c
        rs = [Request(0.0, c, 10) for _ in range(b)]
        for r in rs:
            r._is_prefill_complete, r._num_processed_tokens = True, c
        t, att = timed(Batch(0, rs, [1] * b))
        steps.append(t)
        rebuilt.append(att / t)
    for n in job.get("prefill_points", []):  # one prefill of an n-token prompt in chunks of the budget
        r, t, att, done = Request(0.0, n, 10), 0.0, 0.0, 0
        while done < n:
            k = min(job["chunk"] if job["scheduler"] == "sarathi" else n, n - done)
            r._num_processed_tokens = done
            dt, da = timed(Batch(0, [r], [k]))
            t, att, done = t + dt, att + da, done + k
        steps.append(t)
        rebuilt.append(att / t)
    print(json.dumps({"arr": arr.tolist(), "ttft": ttft.tolist(), "tpot": tpot.tolist(), "out": out.tolist(),
                      "steps": steps, "rebuilt": rebuilt}), file=proto, flush=True)
'''


#: Vidur's answers by (model, device, tp, scheduler, chunk, max seqs, seed, duration, rate): two configurations
#: that differ only by their SLO replay the same runs.
_VIDUR_MEMO: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}


class Vidur:
    """A Vidur process (``python``, checkout ``root``) that simulates one configuration with one scheduler."""

    def __init__(self, root: str, python: str, cfg: Config, scheduler: str, chunk: int, batch_cap: int,
                 attention_file: str, workdir: str):
        self.cfg, self.scheduler, self.workdir = cfg, scheduler, workdir
        driver = os.path.join(workdir, f"vidur_driver-{cfg.name}-{scheduler}.py")  # one per process: no rewrite
        with open(driver, "w") as f:  # while another process reads it
            f.write(DRIVER)
        prof = os.path.join(root, "data/profiling")
        self.job = dict(
            scheduler=scheduler, chunk=chunk, max_tokens_in_batch=MAX_TOKENS, batch_cap=batch_cap,
            pred_max_chunk=chunk if scheduler == "sarathi" else MAX_TOKENS, max_tokens=MAX_TOKENS,
            model=cfg.vidur_model, device=cfg.vidur_device, network=cfg.vidur_network, tp=cfg.tp,
            compute_file=os.path.join(prof, "compute", cfg.vidur_device, cfg.vidur_model, "mlp.csv"),
            attention_file=attention_file,
            all_reduce_file=os.path.join(prof, "network", cfg.vidur_network, "all_reduce.csv"),
            send_recv_file=os.path.join(prof, "network", cfg.vidur_network, "send_recv.csv"),
            cache_dir=os.path.join(workdir, "vidur_cache"), out_dir=os.path.join(workdir, "vidur_out"),
            decode_points=DECODE_POINTS, prefill_points=PREFILL_POINTS)
        self.steps_s: list[float] = []
        self.attention_share: list[float] = []
        self.proc = subprocess.Popen([python, driver, root], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=workdir)

    def p95(self, arr: np.ndarray, inp: np.ndarray, out: np.ndarray, duration_s: float) -> tuple[float, float, int]:
        key = (self.cfg.vidur_model, self.cfg.vidur_device, self.cfg.tp, self.scheduler, self.job["chunk"],
               self.job["batch_cap"], duration_s, len(arr), float(arr[-1]) if len(arr) else 0.0, int(inp.sum()))
        if key not in _VIDUR_MEMO:
            _VIDUR_MEMO[key] = self._run(arr, inp, out)
        a, ttft, tpot, o = _VIDUR_MEMO[key]
        return p95s(a, ttft, tpot, o, duration_s)

    def _run(self, arr: np.ndarray, inp: np.ndarray,
             out: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        trace = os.path.join(self.workdir, f"trace-{self.cfg.name}-{self.scheduler}.csv")
        with open(trace, "w") as f:
            f.write("arrived_at,num_prefill_tokens,num_decode_tokens\n")
            for a, i, o in zip(arr, inp, out, strict=True):
                f.write(f"{a:.6f},{int(i)},{int(o)}\n")
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(dict(self.job, trace=trace)) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise SystemExit(f"Vidur ({self.cfg.name}, {self.scheduler}) stopped; its messages are above")
        r = json.loads(line)
        got = np.array(r["arr"])
        if len(got) != len(arr) or not np.allclose(got, arr, atol=1e-5):
            raise SystemExit("Vidur replayed other requests than given")
        self.steps_s = list(r["steps"])
        self.attention_share = list(r["rebuilt"])
        return arr, np.array(r["ttft"]), np.array(r["tpot"]), np.array(r["out"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


# --------------------------------------------------------------------------------------------------------------
# Bisection


def limit_rate(p95_at: Callable[[float], tuple[float, float, int]], cfg: Config, start: float,
               rel_tol: float = 0.03, max_runs: int = 12) -> tuple[float, int]:
    """The largest rate (req/s) at which p95 TTFT <= target and p95 TPOT <= target, by bracketing from ``start``
    (x1.5 / /1.5) then bisection to ``rel_tol``; returns (the largest passing rate found, runs)."""
    cache: dict[float, bool] = {}

    def ok(r: float) -> bool:
        if r not in cache:
            tt, tp, n = p95_at(r)
            cache[r] = tt <= cfg.ttft_s and tp <= cfg.tpot_s
            print(f"    {r:7.3f} req/s: p95 TTFT {tt:7.3f} s, p95 TPOT {tp * 1e3:7.1f} ms, n {n:5d} "
                  f"{'holds' if cache[r] else 'misses'}", flush=True)
        return cache[r]

    lo, hi = None, None
    r = start
    while len(cache) < max_runs and (lo is None or hi is None):
        if ok(r):
            lo = r
            r *= 1.5
        else:
            hi = r
            r /= 1.5
    if lo is None:
        return 0.0, len(cache)
    if hi is None:
        return lo, len(cache)
    while hi / lo > 1 + rel_tol and len(cache) < max_runs:
        mid = math.sqrt(lo * hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo, len(cache)


# --------------------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vidur", help="path of a Vidur checkout (required: fleetplan does not ship Vidur)")
    ap.add_argument("--vidur-python", default=sys.executable, help="a Python where Vidur's requirements import")
    ap.add_argument("--configs", nargs="+", choices=[c.name for c in CONFIGS], help="only these configurations")
    ap.add_argument("--duration-s", type=float, default=600.0, help="seconds of arrivals per run")
    ap.add_argument("--seed", type=int, default=0, help="seed of the arrivals and lengths (>= 0)")
    ap.add_argument("--workdir", help="folder for traces, rebuilt profiles and Vidur's cache (default: a temp dir)")
    ap.add_argument("--write-docs", action="store_true", help="rewrite the table in docs/vidur.md")
    ap.add_argument("--steps-only", action="store_true",
                    help="only the step times of both simulators (one short Vidur run per scheduler), no bisection")
    ap.add_argument("--fleetplan-only", action="store_true",
                    help="only fleetplan's capacity model and replay (no Vidur checkout needed): the model / replay "
                         "ratios, the replay's limit per seed of --seeds")
    ap.add_argument("--seeds", type=int, nargs="+",
                    help="with --fleetplan-only: the replay's limit for each of these seeds (default: --seed)")
    a = ap.parse_args()
    if a.seeds and not a.fleetplan_only:
        raise SystemExit("--seeds goes with --fleetplan-only (a Vidur run takes one --seed)")
    if a.fleetplan_only:
        if a.vidur or a.steps_only:
            raise SystemExit("--fleetplan-only runs no Vidur: drop --vidur / --steps-only")
        fleetplan_only(a)
        return
    if not a.vidur:
        raise SystemExit("bench_vidur needs a Vidur checkout: give --vidur PATH (https://github.com/microsoft/vidur) "
                         "and --vidur-python for a Python with its requirements; see docs/vidur.md")
    if not os.path.isdir(os.path.join(a.vidur, "vidur")) or not os.path.isdir(os.path.join(a.vidur, "data")):
        raise SystemExit(f"--vidur {a.vidur}: not a Vidur checkout (no vidur/ and data/ in it)")
    if not a.duration_s >= 60:
        raise SystemExit(f"--duration-s {a.duration_s:g}: give at least 60 s")
    if a.seed < 0:
        raise SystemExit(f"--seed {a.seed}: give a seed >= 0")
    workdir = a.workdir or tempfile.mkdtemp(prefix="bench-vidur-")
    os.makedirs(workdir, exist_ok=True)
    fit = fit_attention()
    speed = h100_speedups(a.vidur)
    print(f"attention rebuilt from {attention_samples_text().count(chr(10)) - 1} sampled rows of Vidur's A100 "
          f"Llama-3-8B profile: prefill within {fit.prefill_err:.0%} of the sampled rows (chunk >= 512), decode "
          f"within {fit.decode_err:.0%} (batch >= 8, context >= 512); H100 / A100 from Vidur's MLP profiles: "
          f"{speed[0]:.2f}x memory-bound, {speed[1]:.2f}x compute-bound")
    configs = [c for c in CONFIGS if not a.configs or c.name in a.configs]
    rows = []
    t_all = time.perf_counter()
    for cfg in configs:
        t0 = time.perf_counter()
        v1 = Fleetplan(cfg, "{mode: vllm-v1}", workdir)
        pf = Fleetplan(cfg, "{mode: prefill-first}", workdir)
        eng = v1.engine
        if eng is None or not eng.max_num_batched_tokens or not eng.max_num_seqs:
            raise SystemExit(f"{cfg.name}: the vllm-v1 option has no resolved token budget / max seqs ({eng})")
        budget, seqs = int(eng.max_num_batched_tokens), int(eng.max_num_seqs)
        print(f"\n{cfg.name}: {cfg.model} {cfg.gpu} tp{cfg.tp}, TTFT {cfg.ttft_s:g} s, TPOT {cfg.tpot_s * 1e3:g} ms; "
              f"token budget {budget}, max seqs {seqs}; capacity model: vllm-v1 {v1.capacity_req_per_s:.3f}, "
              f"prefill-first {pf.capacity_req_per_s:.3f} req/s", flush=True)
        att = os.path.join(workdir, f"attention-{cfg.name}.csv")
        write_attention_csv(att, cfg, fit, seqs, speed if cfg.vidur_device == "h100" else (1.0, 1.0))
        res: dict[str, float] = {"model_v1": v1.capacity_req_per_s, "model_pf": pf.capacity_req_per_s}
        start = max(v1.capacity_req_per_s, 0.05)
        sims: list[tuple[str, Fleetplan | Vidur]] = [("fleet_v1", v1), ("fleet_pf", pf)]
        steps = {"fleet_v1": v1.steps_s(budget), "fleet_pf": pf.steps_s(None)}
        shares: dict[str, list[float]] = {}
        for key, scheduler in (("vidur_sarathi", "sarathi"), ("vidur_vllm", "vllm")):
            sims.append((key, Vidur(a.vidur, a.vidur_python, cfg, scheduler, budget, seqs, att, workdir)))
        for key, sim in sims:
            if a.steps_only:
                if isinstance(sim, Vidur):
                    sim.p95(*requests(a.seed, 60.0, 0.5 * start), 60.0)
                    steps[key] = sim.steps_s
                    shares[key] = sim.attention_share
                    sim.close()
                continue
            print(f"  {key}:", flush=True)
            rate, _ = limit_rate(lambda r, s=sim: s.p95(*requests(a.seed, a.duration_s, r), a.duration_s), cfg, start)
            res[key] = rate
            if isinstance(sim, Vidur):
                steps[key] = sim.steps_s
                shares[key] = sim.attention_share
                sim.close()
        res["seconds"] = time.perf_counter() - t0
        if not a.steps_only:
            rows.append((cfg, budget, res))
        heads = [f"decode b{b} c{c}" for b, c in DECODE_POINTS] + [f"prefill {n}" for n in PREFILL_POINTS]
        print("  step times, ms (Vidur: the attention profile's share):", flush=True)
        for k in ("vidur_sarathi", "fleet_v1", "vidur_vllm", "fleet_pf"):
            if steps.get(k):
                sh = shares.get(k)
                print(f"    {k:14s} " + ", ".join(
                    f"{h} {v * 1e3:.1f}" + (f" ({sh[i]:.0%})" if sh else "")
                    for i, (h, v) in enumerate(zip(heads, steps[k], strict=True))), flush=True)
    print(f"\n({time.perf_counter() - t_all:.0f} s)")
    if a.steps_only:
        return
    table = render(rows)
    print(table)
    if a.write_docs:
        write_docs(table)


def fleetplan_only(a: argparse.Namespace) -> None:
    """``--fleetplan-only``: per configuration, fleetplan's capacity model (vllm-v1 and prefill-first) and its
    replay's limit rate for each seed of ``--seeds``, with the model / replay ratios (the lowest and highest over the
    seeds). ``--write-docs`` rewrites the fleetplan columns of docs/vidur.md's table (replay: the first seed's, the
    seed Vidur ran with) and keeps its Vidur columns."""
    if not a.duration_s >= 60:
        raise SystemExit(f"--duration-s {a.duration_s:g}: give at least 60 s")
    seeds = a.seeds or [a.seed]
    if min(seeds) < 0:
        raise SystemExit(f"--seeds {min(seeds)}: give seeds >= 0")
    workdir = a.workdir or tempfile.mkdtemp(prefix="bench-vidur-")
    os.makedirs(workdir, exist_ok=True)
    configs = [c for c in CONFIGS if not a.configs or c.name in a.configs]
    rows: list[tuple[Config, int, dict[str, float]]] = []
    summary = ["| config | engine | model | replay by seed | model / replay (min-max over seeds) | binding |",
               "|---|---|---|---|---|---|"]
    t_all = time.perf_counter()
    for cfg in configs:
        sims = {"v1": Fleetplan(cfg, "{mode: vllm-v1}", workdir), "pf": Fleetplan(cfg, "{mode: prefill-first}",
                                                                                workdir)}
        eng = sims["v1"].engine
        budget = int(eng.max_num_batched_tokens or 0) if eng is not None else 0
        res: dict[str, float] = {}
        print(f"\n{cfg.name}: {cfg.model} {cfg.gpu} tp{cfg.tp}, TTFT {cfg.ttft_s:g} s, TPOT {cfg.tpot_s * 1e3:g} ms; "
              f"token budget {budget}", flush=True)
        for key, sim in sims.items():
            cap = sim.option_capacity
            res[f"model_{key}"] = sim.capacity_req_per_s
            chunk = (f", token budget {cap.engine.max_num_batched_tokens}" if cap.engine and cap.engine.chunked
                     else "")
            print(f"  model {key}: {sim.capacity_req_per_s:.3f} req/s, binding {cap.limiting} (p95 TTFT "
                  f"{cap.ttft_p95_s:.3f} s, p95 TPOT {cap.tpot_p95_s * 1e3:.1f} ms, batch "
                  f"{cap.batch_at_capacity:.1f}{chunk})", flush=True)
            limits = []
            for seed in seeds:
                print(f"  replay {key}, seed {seed}:", flush=True)
                rate, _ = limit_rate(lambda r, s=sim, sd=seed: s.p95(*requests(sd, a.duration_s, r), a.duration_s),
                                     cfg, max(sim.capacity_req_per_s, 0.05), rel_tol=0.01, max_runs=20)
                limits.append(rate)
            res[f"fleet_{key}"] = limits[0]
            ratios = [sim.capacity_req_per_s / x for x in limits if x > 0]
            summary.append(f"| {cfg.name} | {'vllm-v1' if key == 'v1' else 'prefill-first'} | "
                           f"{sim.capacity_req_per_s:.2f} | {' / '.join(f'{x:.2f}' for x in limits)} | "
                           + (f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-") + f" | {cap.limiting} |")
        rows.append((cfg, budget, res))
    print(f"\n({time.perf_counter() - t_all:.0f} s; seeds {', '.join(map(str, seeds))}, duration "
          f"{a.duration_s:g} s)")
    print("\n".join(summary))
    if a.write_docs:
        kept = doc_vidur_rates()
        for cfg, _, res in rows:
            if cfg.name not in kept:
                raise SystemExit(f"docs/vidur.md has no Vidur rates of {cfg.name}: run it with --vidur first")
            res["vidur_sarathi"], res["vidur_vllm"], res["vidur_budget"] = kept[cfg.name]
        write_docs(render(rows))


def render(rows: list[tuple[Config, int, dict[str, float]]]) -> str:
    """The markdown table of limit rates and ratios."""
    out = ["| config | budget | Vidur sarathi | Vidur vllm | replay vllm-v1 | replay prefill-first | model vllm-v1 | "
           "model prefill-first | replay v1 / sarathi | model v1 / sarathi | replay pf / vllm | model pf / vllm | "
           "model v1 / replay v1 | model pf / replay pf |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def ratio(x: float, y: float) -> str:
        return f"{x / y:.2f}" if y > 0 else "-"

    for cfg, budget, r in rows:
        vb = r.get("vidur_budget", budget)  # a kept Vidur column may have run another budget: both are shown
        shown = f"{budget}" if vb == budget else f"{budget} (Vidur {vb:.0f})"
        out.append(f"| {cfg.name} (TTFT {cfg.ttft_s:g} s, TPOT {cfg.tpot_s * 1e3:g} ms) | {shown} | "
                   f"{r['vidur_sarathi']:.2f} | {r['vidur_vllm']:.2f} | {r['fleet_v1']:.2f} | {r['fleet_pf']:.2f} | "
                   f"{r['model_v1']:.2f} | {r['model_pf']:.2f} | {ratio(r['fleet_v1'], r['vidur_sarathi'])} | "
                   f"{ratio(r['model_v1'], r['vidur_sarathi'])} | {ratio(r['fleet_pf'], r['vidur_vllm'])} | "
                   f"{ratio(r['model_pf'], r['vidur_vllm'])} | {ratio(r['model_v1'], r['fleet_v1'])} | "
                   f"{ratio(r['model_pf'], r['fleet_pf'])} |")
    return "\n".join(out)


def _docs_path() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "vidur.md")


def doc_vidur_rates() -> dict[str, tuple[float, float, float]]:
    """The Vidur limit rates (sarathi, vllm; req/s) of each configuration in docs/vidur.md's table, and the token
    budget its sarathi run used (kept by ``--fleetplan-only --write-docs``, which runs no Vidur)."""
    with open(_docs_path()) as f:
        text = f.read()
    block = text.split("<!-- bench_vidur table -->", 1)[-1].split("<!-- end bench_vidur table -->", 1)[0]
    out = {}
    for ln in block.strip().split("\n"):
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if cells and cells[0].split() and cells[0].split()[0] in {c.name for c in CONFIGS}:
            out[cells[0].split()[0]] = (float(cells[2]), float(cells[3]), float(cells[1].split()[-1].strip("()")))
    return out


def write_docs(table: str) -> None:
    """Put ``table``'s rows into the table between the markers of docs/vidur.md: a configuration's row replaces its
    earlier row, the rows of configurations not run are kept, in the order of :data:`CONFIGS`."""
    path = _docs_path()
    with open(path) as f:
        text = f.read()
    begin, end = "<!-- bench_vidur table -->", "<!-- end bench_vidur table -->"
    if begin not in text or end not in text:
        raise SystemExit(f"{path}: no table markers {begin} ... {end}")
    head, rest = text.split(begin, 1)
    old, tail = rest.split(end, 1)
    lines = table.split("\n")

    def by_config(block: list[str]) -> dict[str, str]:
        return {ln.split("|")[1].split()[0]: ln for ln in block if ln.startswith("| ") and ln.split("|")[1].split()
                and ln.split("|")[1].split()[0] in {c.name for c in CONFIGS}}

    rows = by_config(old.strip().split("\n"))
    rows.update(by_config(lines))
    body = lines[:2] + [rows[c.name] for c in CONFIGS if c.name in rows]
    with open(path, "w") as f:
        f.write(head + begin + "\n" + "\n".join(body) + "\n" + end + tail)


if __name__ == "__main__":
    main()
