"""Service benchmark: load test of POST /v1/observations on loopback, and re-plan round latency by fleet size.

Run: `.venv/bin/python benchmarks/bench_service.py [--requests 2000] [--concurrency 8] [--keyed] [--overload]
[--db URL] [--delete-sizes 1000,10000,100000] [--retention-hours 12 --retention-rate 10]`.

1. Starts `fleetplan serve` (shipped default scenario, a fresh SQLite file, token auth) on 127.0.0.1 at a free
   port, posts a bounded number of single-observation requests from a few client threads (all traffic to
   127.0.0.1; the loop stops after --requests or --max-seconds), prints requests/s and latency p50/p99, stops it.
   With --keyed every request carries its own Idempotency-Key (the key is stored with the rows). While the load
   runs, GET /metrics is timed too (it reads only memory, so it should not queue behind the writes).
2. Round latency of the heuristic re-planner on synthetic fleets (placement.generators.random_instance) of about
   100, 1,000, 5,000 and 20,000 GPUs (CPU seconds): a cold start, then rounds after demand changes on a third of
   the models; prints the median and worst round and whether every plan passed validate().
3. Stability on a replayed clock (no HTTP, the Replanner itself; shipped default scenario, Llama-3.1-8B observed
   every 5 minutes, the other models following their day curves), for the default policy and for the policy of
   finding 6 (curve_update 'ewma', no cooldown): load alternating 5x / 0.2x the curve every 5 minutes for 4 h
   (goal <= 12 migrations per hour); a one-off 1000x burst at 12:00 (goal: 0 extra migrations the next day against
   the same days without it); a 20x burst then 6 h of silence (the fleet back at the curve's size); a real step
   1 -> 24 req/s at 10:00 (goal: met, no unmet demand, in the round after the first observation).
4. With --overload: 64 clients posting batches of 100 observations: how many are accepted (202) and at what latency,
   how many refused with 429 (the write queue's bound) and the Retry-After they were given.
5. DELETE of the newest observation against the table's size (--delete-sizes): CPU seconds of the rebuild from the
   newest plan before it, against main's full replay of the table, in one process.
6. With --retention-hours: the database's size at each hour of a replayed clock, with retention and without it.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import httpx

from fleetplan.placement.generators import random_instance
from fleetplan.service.runtime import load_problem
from fleetplan.solvers.online.config import OnlineConfig
from fleetplan.solvers.online.replanner import Replanner
from fleetplan.solvers.online.state import OnlineResult, load_times

TOKEN = "bench-token-123"


def load_test(n_requests: int, concurrency: int, max_seconds: float, keyed: bool = False, batch: int = 1,
              db: str | None = None, max_pending_writes: int | None = None) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="fleetplan-bench-")
    db = db or f"sqlite:///{tmp}/bench.db"
    env = {**os.environ, "FLEETPLAN_TOKEN": TOKEN}
    if max_pending_writes is not None:
        env["FLEETPLAN_MAX_PENDING_WRITES"] = str(max_pending_writes)
    proc = subprocess.Popen([sys.executable, "-m", "fleetplan.cli.main", "serve", "--db", db, "--host", "127.0.0.1",
                             "--port", str(port), "--interval", "0", "--resolve-every", "0", "--log-level",
                             "warning"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        t_end = time.monotonic() + 60
        while time.monotonic() < t_end:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        lat: list[float] = []
        statuses: dict[int, int] = {}
        retry_after: list[float] = []
        errors = [0]
        lock = threading.Lock()
        counter = iter(range(n_requests))
        deadline = time.monotonic() + max_seconds
        models = ["Llama-3.1-8B", "Qwen2.5-7B", "Mistral-7B-v0.1", "Llama-3.1-70B"]

        def worker() -> None:
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as c:
                while time.monotonic() < deadline:
                    with lock:
                        k = next(counter, None)
                    if k is None:
                        return
                    body = {"observations": [{"model": models[(k + j) % 4], "tenant": f"t{(k + j) % 7}",
                                              "interval_s": 60, "arrivals": float(k % 500)} for j in range(batch)]}
                    headers = {"Idempotency-Key": f"bench-{k}"} if keyed else {}
                    t0 = time.perf_counter()
                    r = c.post("/v1/observations", json=body, headers=headers)
                    dt = time.perf_counter() - t0
                    with lock:
                        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                        if r.status_code == 202:
                            lat.append(dt)
                        elif r.status_code == 429:
                            retry_after.append(float(r.headers.get("Retry-After", "nan")))
                        else:
                            errors[0] += 1

        metrics_lat: list[float] = []
        done = threading.Event()

        def metrics_reader() -> None:
            with httpx.Client(base_url=base, timeout=10) as c:
                while not done.is_set() and time.monotonic() < deadline:
                    t1 = time.perf_counter()
                    c.get("/metrics")
                    metrics_lat.append(time.perf_counter() - t1)
                    time.sleep(0.05)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        reader = threading.Thread(target=metrics_reader)
        reader.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        done.set()
        reader.join()
        lat.sort()
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
        n_all = sum(statuses.values())
        kind = "PostgreSQL" if db.startswith("postgres") else "SQLite"
        print(f"POST /v1/observations on 127.0.0.1 ({kind}, committed per request, {concurrency} clients, "
              f"{batch} observation(s) per request{', Idempotency-Key on each' if keyed else ''}): "
              f"{n_all} requests in {wall:.2f} s = {n_all / wall:,.0f} req/s; accepted (202) {len(lat)}, latency "
              f"p50 {statistics.median(lat) * 1e3 if lat else float('nan'):.1f} ms, p99 {p99 * 1e3:.1f} ms; "
              f"429 {statuses.get(429, 0)}"
              + (f" (Retry-After {min(retry_after):g}-{max(retry_after):g} s)" if retry_after else "")
              + f"; other {errors[0]} {dict(sorted((k, v) for k, v in statuses.items() if k not in (202, 429)))}")
        if metrics_lat:
            metrics_lat.sort()
            print(f"GET /metrics during the load: {len(metrics_lat)} requests, p50 "
                  f"{statistics.median(metrics_lat) * 1e3:.1f} ms, max {metrics_lat[-1] * 1e3:.1f} ms")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def round_latency() -> None:
    print("Re-plan round latency, CPU seconds (heuristic round, validate() included; synthetic fleets, seed 0; goal "
          "<= 1 s at 20,000 GPUs):")
    for n_models, max_gpus in ((10, 100), (100, 1000), (500, 5000), (2000, 20000)):
        p = random_instance(n_models, 24, seed=0, max_gpus=max_gpus)
        gpus = sum(pool.gpus for pool in p.pools)
        r = Replanner(p, OnlineConfig(forecast_method="blend"), load_time_s=load_times(p, 1e9))
        t0 = time.process_time()
        first = r.initial(0.0)
        cold = time.process_time() - t0
        times, ok = [], first.report.ok
        for k in range(1, 13):
            t = k * 2 * 3600.0
            w = r.forecaster.window_at(t)
            for m in p.models[k % 3::3]:
                r.forecaster.observe(m.name, m.demand_req_per_s[w] * (1.6 if k % 2 else 0.7), t)
            t1 = time.process_time()
            res = r.round(t)
            times.append(time.process_time() - t1)
            ok = ok and res.report.ok
        goal = f" (goal <= 1 s: {'met' if max(times) <= 1.0 else 'NOT met'})" if gpus >= 19000 else ""
        print(f"  {gpus:6d} GPUs, {n_models:4d} models: cold start {cold:7.3f} s; round median "
              f"{statistics.median(times):7.3f} s, worst {max(times):7.3f} s{goal}; all plans valid: {ok}", flush=True)


STEP_S = 300.0
MODEL = "Llama-3.1-8B"
LEGACY = OnlineConfig(curve_update="ewma", cooldown_s=0.0)


def _replicas(res: OnlineResult, model: str) -> int:
    return sum(n[0] for k, n in res.plan.replicas.items() if k[0] == model) + sum(
        1 for g in res.plan.shared if model in g.models)


def _drive(cfg: OnlineConfig, rate_of, t_from: float, t_to: float, observe=lambda t: True,
           r: Replanner | None = None) -> tuple[Replanner, list[OnlineResult]]:
    """Every STEP_S from t_from to t_to: observe MODEL at rate_of(t) (when observe(t)), then a round."""
    if r is None:
        problem, lt = load_problem(None)
        r = Replanner(problem, cfg, lt)
        r.initial(t_from)
    out = []
    t = t_from
    while t < t_to:
        if observe(t):
            r.forecaster.observe(MODEL, rate_of(t), t)
        out.append(r.round(t + 1.0))
        t += STEP_S
    return r, out


def stability() -> None:
    problem, _ = load_problem(None)
    curve = problem.model_by_name[MODEL].demand_req_per_s
    window_s = problem.window_length_s

    def base(t: float) -> float:
        return curve[int(t % 86400 // window_s)]

    print(f"Stability on a replayed clock (default scenario, {MODEL} observed every {STEP_S:g} s):")
    for label, cfg in (("default policy", OnlineConfig()), ("finding-6 policy (ewma curve, no cooldown)", LEGACY)):
        # alternating 5x / 0.2x for 4 h from 08:00
        t0 = 8 * 3600.0
        _, res = _drive(cfg, lambda t: base(t) * (5.0 if int(t // STEP_S) % 2 == 0 else 0.2), t0 - 3600, t0 + 4 * 3600)
        alt = res[12:]
        migr = sum(x.migrations for x in alt)
        counts = [_replicas(x, MODEL) for x in res[11:]]
        moves = [b - a for a, b in zip(counts, counts[1:], strict=False) if b != a]
        flips = sum(1 for a, b in zip(moves, moves[1:], strict=False) if (a > 0) != (b > 0))
        print(f"  [{label}] alternating 5x/0.2x, 4 h: {migr} migrations ({migr / 4:.1f}/h, goal <= 12/h); "
              f"{MODEL} direction changes {flips} in {len(alt)} rounds")

        # 1000x burst at 12:00 on day 0; day 1 compared with the same two days without the burst
        def day1(burst: bool, cfg: OnlineConfig = cfg) -> tuple[int, float, int]:
            r, _ = _drive(cfg, lambda t: 1000 * base(t) if burst and 12 * 3600 <= t < 12 * 3600 + STEP_S else base(t),
                          0.0, 86400.0)
            _, res1 = _drive(cfg, base, 86400.0, 2 * 86400.0, r=r)
            noon = next(x for x in res1 if x.at_s >= 86400 + 12 * 3600)
            return sum(x.migrations for x in res1), noon.forecast_req_per_s[MODEL], _replicas(noon, MODEL)

        (m_b, f_b, n_b), (m_c, f_c, n_c) = day1(True), day1(False)
        print(f"  [{label}] 1000x burst for one round at 12:00: next day {m_b} migrations against {m_c} without it "
              f"(extra {m_b - m_c}, goal 0); forecast at 12:00 next day {f_b:.2f} req/s against {f_c:.2f} "
              f"(true {base(12 * 3600):.2f}), {n_b} replicas against {n_c}")

        # 20x burst for 15 min at 10:00, then silence for 6 h
        t0 = 10 * 3600.0
        _, res = _drive(cfg, lambda t: 20 * base(t), t0 - 3600, t0 + 6.25 * 3600,
                        observe=lambda t, t0=t0: t < t0 + 900)
        peak = max(_replicas(x, MODEL) for x in res)
        last = res[-1]
        need = math.ceil(base(last.at_s) / max(o.capacity_req_per_s * (1 - problem.margin)
                                               for o in problem.options if o.model == MODEL))
        print(f"  [{label}] 20x burst then 6 h of silence: peak {peak} replicas, after 6 h {_replicas(last, MODEL)} "
              f"(the curve {base(last.at_s):.2f} req/s needs about {need}); forecast "
              f"{last.forecast_req_per_s[MODEL]:.2f}")

        # a real step 1 -> 24 req/s at 10:00
        t0 = 10 * 3600.0
        _, res = _drive(cfg, lambda t, t0=t0: 1.0 if t < t0 else 24.0, t0 - 2 * 3600, t0 + 3600)
        first = next(x for x in res if x.at_s >= t0)
        print(f"  [{label}] step 1 -> 24 req/s: first round after it forecasts {first.forecast_req_per_s[MODEL]:.1f} "
              f"req/s, unmet {first.unmet_req_per_s[MODEL]:.2f} req/s (goal 0), {_replicas(first, MODEL)} replicas "
              f"({first.migrations} migrations)")


def delete_cost(sizes: list[int]) -> None:
    """DELETE of the newest observation against the table's size: this service (rebuild from the newest plan that
    predates it) against main's way (a fresh forecaster replaying every remaining observation), CPU seconds in one
    process, one run each."""
    import warnings

    from fleetplan.service.runtime import ReplanService
    from fleetplan.service.settings import ServiceSettings

    problem, lt = load_problem(None)
    print("DELETE of the newest observation (in-process, SQLite; CPU s of this process, one run):")
    for n in sizes:
        tmp = tempfile.mkdtemp(prefix="fleetplan-bench-")
        t = [1_700_000_000.0]
        s = ServiceSettings(db_url=f"sqlite:///{tmp}/d.db", insecure_no_auth=True, interval_s=0, resolve_every_s=0,
                            max_observation_age_s=1e9)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            svc = ReplanService(s, problem, lt, clock=lambda t=t: t[0])
        models = [m.name for m in problem.models]
        for start in range(0, n, 1000):
            items = []
            for k in range(start, min(n, start + 1000)):
                t[0] += 0.01
                items.append({"model": models[k % len(models)], "tenant": f"t{k % 50}", "interval_s": 60,
                              "arrivals": 60.0 * (1 + k % 5), "at_s": t[0]})
            svc.observe(items)
        svc.replan()
        ids = svc.observe([{"model": models[0], "tenant": "late", "interval_s": 60, "arrivals": 600, "at_s": t[0]}])
        c0 = time.process_time()
        w0 = time.perf_counter()
        out = svc.delete_observations(ids=ids)
        c1, w1 = time.process_time(), time.perf_counter()
        staged = svc.replanner.clone()
        fc = staged.fresh_forecaster()
        c2 = time.process_time()
        for r in svc.store.iter_observations():
            svc._feed(fc, r)
        c3 = time.process_time()
        print(f"  {n:7,d} observations: {c1 - c0:6.3f} CPU s ({w1 - w0:6.3f} s wall, {out['replayed']} replayed); "
              f"main's full replay {c3 - c2:6.3f} CPU s ({n:,d} replayed): {(c3 - c2) / max(c1 - c0, 1e-9):,.0f}x")
        svc.close()


def retention_size(hours: int, rate_obs_per_s: float) -> None:
    """Database size per hour on a replayed clock: ``rate_obs_per_s`` observations a second (batches of 100, 10
    tenants x the models), a round every 300 s and retention every 600 s (the service's defaults: observations kept
    6 h, plans 7 days / 2,016), against the same run without retention (main kept every row)."""
    import warnings

    from fleetplan.service.runtime import RETENTION_EVERY_S, ReplanService
    from fleetplan.service.settings import ServiceSettings

    problem, lt = load_problem(None)
    models = [m.name for m in problem.models]
    print(f"Database size on a replayed clock ({rate_obs_per_s:g} observations/s, a round every 300 s; SQLite file "
          "+ WAL):")
    rows = {}
    for keep in (True, False):
        tmp = tempfile.mkdtemp(prefix="fleetplan-bench-")
        t = [1_700_000_000.0 - 1_700_000_000.0 % 86400]
        s = ServiceSettings(db_url=f"sqlite:///{tmp}/r.db", insecure_no_auth=True, interval_s=0, resolve_every_s=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            svc = ReplanService(s, problem, lt, clock=lambda t=t: t[0])
        per_batch_s = 100 / rate_obs_per_s
        sizes = []
        next_round = next_keep = t[0]
        end = t[0] + hours * 3600
        next_hour = t[0] + 3600
        while t[0] < end:
            t[0] += per_batch_s
            svc.observe([{"model": models[j % len(models)], "tenant": f"t{j % 10}", "interval_s": per_batch_s,
                          "arrivals": 2.0 * per_batch_s, "at_s": t[0]} for j in range(100)])
            if t[0] >= next_round:
                svc.replan()
                next_round += 300
            if keep and t[0] >= next_keep:
                svc.retain()
                next_keep += RETENTION_EVERY_S
            if t[0] >= next_hour:
                sizes.append(svc.store.size_bytes() or 0)
                next_hour += 3600
        rows[keep] = (sizes, svc.store.count_observations(), svc.store.count_plans())
        svc.close()
    for keep, (sizes, n_obs, n_plans) in rows.items():
        label = "with retention (6 h of observations)" if keep else "without retention (main)"
        print(f"  {label}: MB at each hour {' '.join(f'{b / 1e6:.1f}' for b in sizes)}; at the end {n_obs:,d} "
              f"observations, {n_plans} plans")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--skip-rounds", action="store_true")
    ap.add_argument("--keyed", action="store_true", help="send an Idempotency-Key with each request")
    ap.add_argument("--skip-stability", action="store_true")
    ap.add_argument("--overload", action="store_true", help="also: 64 clients posting batches of 100 (429 counts)")
    ap.add_argument("--db", default=None, help="database URL of the load tests (default: a new SQLite file)")
    ap.add_argument("--delete-sizes", default="1000,10000,100000", help="table sizes of the DELETE benchmark ('' "
                    "skips it)")
    ap.add_argument("--retention-hours", type=int, default=0, help="hours of the retention benchmark (0 skips it)")
    ap.add_argument("--retention-rate", type=float, default=10.0, help="observations per second of it")
    a = ap.parse_args()
    if not a.skip_stability:
        stability()
    if not a.skip_rounds:
        round_latency()
    if not a.skip_load:
        load_test(a.requests, a.concurrency, a.max_seconds, a.keyed, db=a.db)
    if a.overload:
        load_test(a.requests, 64, a.max_seconds, batch=100, db=a.db)
    if a.delete_sizes:
        delete_cost([int(x) for x in a.delete_sizes.split(",")])
    if a.retention_hours:
        retention_size(a.retention_hours, a.retention_rate)


if __name__ == "__main__":
    main()
