"""The re-planner service's engine, without HTTP: the Replanner, the store, the periodic loop and the metrics.

:class:`ReplanService` owns one :class:`~fleetplan.solvers.online.Replanner` behind a lock. Writes are
serialized: an observation is committed to the store, then fed to the forecaster, under the same lock, so every
stored plan's ``last_observation_id`` says exactly which observations its forecaster state holds. On start it
resumes from the last stored plan and replays the observations stored after it; with no stored plan it makes a
cold-start plan and stores it. A background thread runs a heuristic round every ``interval_s`` (pulling
Prometheus first when configured) and a full MILP re-solve every ``resolve_every_s`` in a worker thread, adopted
only when :meth:`Replanner.consider` finds it worth its migrations.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from fleetplan.datasets.catalog import get_model
from fleetplan.errors import FleetplanError, InputError, UnknownNameError
from fleetplan.placement.planio import plan_to_dict
from fleetplan.placement.problem import Problem
from fleetplan.placement.scenario import build_problem, load_scenario
from fleetplan.service.prometheus import pull_observations
from fleetplan.service.store import Store
from fleetplan.solvers.online import (
    OnlineConfig,
    OnlineResult,
    Replanner,
    estimate_demand,
    load_times,
    window_problem,
)
from fleetplan.solvers.solve import solve

log = logging.getLogger("fleetplan.service")


@dataclass
class ServiceSettings:
    """Settings of ``fleetplan serve``.

    Attributes:
        scenario: scenario file or shipped name (None: the shipped default).
        db_url: SQLAlchemy URL or SQLite file path.
        token: bearer token for write endpoints; None only together with ``insecure_no_auth``.
        insecure_no_auth: accept writes without a token (must be asked for explicitly).
        interval_s: seconds between heuristic rounds (0: no periodic rounds; POST /v1/replan still works).
        resolve_every_s: seconds between full MILP re-solves (0: none).
        resolve_time_limit_s: time limit of one re-solve, seconds.
        max_body_bytes: largest request body accepted, bytes (413 above).
        max_observations_per_request: most observations in one POST.
        prometheus_url: Prometheus base URL to pull vLLM metrics from at every round, or None.
        online: the re-planner's policy (see OnlineConfig).
    """

    scenario: str | None = None
    db_url: str = "sqlite:///fleetplan.db"
    token: str | None = None
    insecure_no_auth: bool = False
    interval_s: float = 300.0
    resolve_every_s: float = 3600.0
    resolve_time_limit_s: float = 30.0
    max_body_bytes: int = 1_000_000
    max_observations_per_request: int = 1000
    prometheus_url: str | None = None
    online: OnlineConfig = field(default_factory=OnlineConfig)

    def __post_init__(self) -> None:
        if self.token is None and not self.insecure_no_auth:
            raise InputError("write endpoints need a bearer token: set FLEETPLAN_TOKEN or give --token-file, or "
                             "start with --insecure-no-auth to accept unauthenticated writes", field="token")
        if self.token is not None and len(self.token) < 8:
            raise InputError("the token must have at least 8 characters", field="token")
        for name in ("interval_s", "resolve_every_s", "resolve_time_limit_s"):
            if getattr(self, name) < 0:
                raise InputError(f"{name} must be >= 0 seconds", field=name, value=getattr(self, name))
        if self.max_body_bytes < 1024:
            raise InputError("max_body_bytes must be >= 1024", field="max_body_bytes", value=self.max_body_bytes)


def load_problem(scenario: str | None) -> tuple[Problem, dict]:
    """(Problem, load time per option) of a scenario: load times from the catalog's weight bytes and the
    scenario's load bandwidth (options.load_bandwidth_bytes_per_s)."""

    sc = load_scenario(scenario)
    problem = build_problem(sc)
    weights = {}
    for m in problem.models:
        try:
            weights[m.name] = get_model(m.name).weight_bytes(sc.options["weight_dtype"])
        except FleetplanError:
            continue  # a user-file model: load_times charges its memory footprint
    return problem, load_times(problem, sc.options["load_bandwidth_bytes_per_s"], weights)


class ReplanService:
    """See the module docstring. ``clock`` returns unix seconds (tests pass a fake one)."""

    def __init__(self, settings: ServiceSettings, problem: Problem | None = None, load_time_s: dict | None = None,
                 clock=time.time) -> None:
        self.settings = settings
        if problem is None:
            problem, load_time_s = load_problem(settings.scenario)
        self.problem = problem
        self.clock = clock
        self.lock = threading.RLock()
        self.store = Store(settings.db_url)
        self.replanner = Replanner(problem, settings.online, load_time_s or {})
        self.model_names = [m.name for m in problem.models]
        self.last_obs_id = 0
        self.plan_row: dict | None = None
        self.counters = {"observations": 0, "rounds": 0, "migrations": 0, "resolves_adopted": 0,
                         "resolves_kept": 0, "resolves_failed": 0, "prometheus_errors": 0}
        self.last_round_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleetplan-resolve")
        self._future: Future | None = None
        self.resumed = False
        self._start()

    # ---- start / resume ------------------------------------------------------------------------------------
    def _start(self) -> None:
        with self.lock:
            row = self.store.last_plan()
            now = self.clock()
            if row is not None:
                state = row["body"]["online"]["state"]
                self.replanner.restore(state, now)
                self.last_obs_id = row["last_observation_id"]
                for r in self.store.observations_after(self.last_obs_id):
                    self._feed(r["model"], r["tenant"], r["demand_req_per_s"], r["at_s"])
                    self.last_obs_id = r["id"]
                self.plan_row = row
                self.resumed = True
                log.info("resumed from stored plan %s", row["id"])
            else:
                self._record(self.replanner.initial(now))

    def _feed(self, model: str, tenant: str, rate: float, at_s: float) -> None:
        if model in self.replanner.models:
            self.replanner.forecaster.observe(model, rate, at_s, tenant)

    # ---- records -------------------------------------------------------------------------------------------
    def _summary(self, res: OnlineResult) -> dict:
        pools = self.problem.pool_by_id
        reps = {}
        for (m, pool, tp, pp), (n,) in sorted(res.plan.replicas.items()):
            p = pools[pool]
            reps[f"{m} @ {p.gpu}@{p.site} tp{tp}" + (f"xpp{pp}" if pp > 1 else "")] = n
        for g in res.plan.shared:
            p = pools[g.pool]
            label = f"{'+'.join(g.models)} @ {p.gpu}@{p.site} shared"
            reps[label] = reps.get(label, 0) + 1
        return {"replicas": reps, "gpus": sum(k[2] * k[3] * n[0] for k, n in res.plan.replicas.items())
                + len(res.plan.shared),
                "unmet_req_per_s": {m: v for m, v in res.unmet_req_per_s.items() if v > 0}}

    def _record(self, res: OnlineResult) -> dict:
        """Store ``res`` with its diff; it becomes the current plan. Refuses (FleetplanError) an invalid plan."""
        if not res.report.ok:
            raise FleetplanError("refusing to adopt a plan that fails validation: " + "; ".join(res.report.violations))
        body = plan_to_dict(res.problem, res.plan)
        body["online"] = {
            "at_s": res.at_s, "window": res.window, "reason": res.reason, "message": res.message,
            "forecast_req_per_s": res.forecast_req_per_s, "unmet_req_per_s": res.unmet_req_per_s,
            "loading": [{"model": k[0], "pool": k[1], "tp": k[2], "pp": k[3], "ready_at_s": list(v)}
                        for k, v in sorted(res.loading.items())],
            "cost_usd_per_hour": res.cost_usd_per_hour, "round_time_s": res.round_time_s,
            "migrations": res.migrations, "state": self.replanner.snapshot()}
        actions = [a.to_dict() for a in res.actions]
        prev = self.plan_row["id"] if self.plan_row else None
        summary = self._summary(res)
        pid = self.store.add_plan(at_s=res.at_s, window=res.window, reason=res.reason,
                                  cost_usd_per_hour=res.cost_usd_per_hour, migrations=res.migrations,
                                  valid=res.report.ok, last_observation_id=self.last_obs_id, summary=summary,
                                  body=body, actions=actions, previous_plan_id=prev)
        self.plan_row = {"id": pid, "created_at_s": self.clock(), "at_s": res.at_s, "window": res.window,
                         "reason": res.reason, "cost_usd_per_hour": res.cost_usd_per_hour,
                         "migrations": res.migrations, "valid": True, "last_observation_id": self.last_obs_id,
                         "summary": summary, "body": body}
        self.counters["migrations"] += res.migrations
        return self.plan_row

    # ---- writes --------------------------------------------------------------------------------------------
    def observe(self, items: list[dict], source: str = "api") -> list[int]:
        """Validate, store (committed) and feed observations; returns their ids.

        Raises UnknownNameError (field ``observations[i].model``) for a model the scenario does not plan, and
        InputError for counters that give no estimate. Nothing is stored when any item is bad.
        """
        now = self.clock()
        rows = []
        for i, o in enumerate(items):
            if o["model"] not in self.replanner.models:
                raise UnknownNameError("model", o["model"], self.model_names, field=f"observations[{i}].model")
            try:
                rate = estimate_demand(o["interval_s"], arrivals=o.get("arrivals"),
                                       completions=o.get("completions"), waiting_start=o.get("waiting_start"),
                                       waiting_end=o.get("waiting_end"), running_start=o.get("running_start"),
                                       running_end=o.get("running_end"))
            except InputError as exc:
                raise InputError(str(exc), field=f"observations[{i}].{exc.field}") from None
            at = o.get("at_s")
            rows.append({"at_s": float(now if at is None else at), "model": o["model"],
                         "tenant": o.get("tenant") or "default", "interval_s": float(o["interval_s"]),
                         "demand_req_per_s": rate, "source": source, "body": o})
        with self.lock:
            ids = self.store.add_observations(rows)
            for r, i in zip(rows, ids, strict=True):
                self._feed(r["model"], r["tenant"], r["demand_req_per_s"], r["at_s"])
                self.last_obs_id = max(self.last_obs_id, i)
            self.counters["observations"] += len(ids)
        return ids

    def replan(self) -> dict:
        """One heuristic round now; stores and returns the new plan row."""
        with self.lock:
            res = self.replanner.round(self.clock())
            self.counters["rounds"] += 1
            self.last_round_s = res.round_time_s
            return self._record(res)

    def _solve_candidate(self, time_limit_s: float):

        with self.lock:
            now = self.clock()
            w = self.replanner.forecaster.window_at(now)
            demand = {m: self.replanner.forecaster.forecast(m, w, now) for m in self.model_names}
        prob = window_problem(self.problem, demand)
        return solve(prob, "highs", time_limit_s=time_limit_s, threads=1, lp_bound=False)

    def resolve(self, time_limit_s: float | None = None) -> tuple[bool, str]:
        """Full MILP re-solve now (blocking); adopted only if worth its migrations. Returns (adopted, message)."""
        try:
            cand = self._solve_candidate(time_limit_s or self.settings.resolve_time_limit_s)
        except FleetplanError as exc:
            self.counters["resolves_failed"] += 1
            return False, f"re-solve failed: {exc}"
        return self._offer(cand)

    def _offer(self, cand) -> tuple[bool, str]:
        with self.lock:
            adopted, res, msg = self.replanner.consider(cand, self.clock())
            if adopted:
                self.counters["resolves_adopted"] += 1
                self._record(res)
            else:
                self.counters["resolves_kept"] += 1
            return adopted, msg

    # ---- periodic loop -------------------------------------------------------------------------------------
    def pull_prometheus(self) -> int:
        """Pull one interval of vLLM metrics and store them as observations; returns how many."""

        obs, unknown = pull_observations(self.settings.prometheus_url, self.settings.interval_s or 300.0,
                                         self.clock(), self.model_names)
        if unknown:
            log.warning("Prometheus reports models the scenario does not plan: %s", ", ".join(unknown))
        return len(self.observe(obs, source="prometheus")) if obs else 0

    def tick(self, now_s: float, state: dict) -> None:
        """One pass of the periodic loop at ``now_s``; ``state`` keeps the next due times."""
        s = self.settings
        if s.interval_s and now_s >= state.setdefault("next_round", now_s + s.interval_s):
            state["next_round"] = now_s + s.interval_s
            if s.prometheus_url:
                try:
                    self.pull_prometheus()
                except Exception as exc:  # noqa: BLE001 - a metrics outage must not stop re-planning
                    self.counters["prometheus_errors"] += 1
                    log.warning("Prometheus pull failed: %s", exc)
            try:
                self.replan()
            except FleetplanError as exc:
                log.error("round not adopted: %s", exc)
        if s.resolve_every_s and self._future is None and now_s >= state.setdefault(
                "next_resolve", now_s + s.resolve_every_s):
            state["next_resolve"] = now_s + s.resolve_every_s
            self._future = self._pool.submit(self._solve_candidate, s.resolve_time_limit_s)
        if self._future is not None and self._future.done():
            fut, self._future = self._future, None
            try:
                adopted, msg = self._offer(fut.result())
                log.info(msg)
            except Exception as exc:  # noqa: BLE001 - a failed solve keeps the current plan
                self.counters["resolves_failed"] += 1
                log.error("re-solve failed: %s", exc)

    def _loop(self) -> None:
        state: dict = {}
        while not self._stop.wait(0.5):
            self.tick(time.time(), state)

    def start_background(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="fleetplan-replan", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.store.close()

    # ---- metrics -------------------------------------------------------------------------------------------
    def metrics_text(self) -> str:
        """Prometheus text exposition (format 0.0.4) of the current plan and the service's counters."""
        def esc(v: str) -> str:
            return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

        lines: list[str] = []

        def metric(name: str, kind: str, help_: str, samples: list[tuple[dict, float]]) -> None:
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, v in samples:
                lab = ",".join(f'{k}="{esc(x)}"' for k, x in labels.items())
                lines.append(f"{name}{{{lab}}} {float(v)!r}" if lab else f"{name} {float(v)!r}")

        with self.lock:
            cur = self.replanner.current
            row = self.plan_row
            fc = self.replanner.forecaster
            metric("fleetplan_plan_cost_usd_per_hour", "gauge", "GPU and egress cost of the current plan, USD per hour",
                   [({}, row["cost_usd_per_hour"] if row else 0.0)])
            metric("fleetplan_plan_id", "gauge", "id of the current stored plan", [({}, row["id"] if row else 0)])
            reps = cur.plan.replicas if cur else {}
            metric("fleetplan_replicas", "gauge", "replicas in the current plan (loading ones included)",
                   [({"model": k[0], "pool": k[1], "tp": k[2], "pp": k[3]}, n[0]) for k, n in sorted(reps.items())])
            load = cur.loading if cur else {}
            now = self.clock()
            metric("fleetplan_replicas_loading", "gauge", "replicas still loading their weights",
                   [({"model": k[0], "pool": k[1], "tp": k[2], "pp": k[3]}, sum(1 for t in v if t > now))
                    for k, v in sorted(load.items())])
            metric("fleetplan_shared_gpus", "gauge", "shared GPUs in the current plan",
                   [({}, len(cur.plan.shared) if cur else 0)])
            metric("fleetplan_round_seconds", "gauge", "wall time of the last re-plan round", [({}, self.last_round_s)])
            metric("fleetplan_rounds_total", "counter", "heuristic rounds run", [({}, self.counters["rounds"])])
            metric("fleetplan_migrations_total", "counter", "replica starts and stops adopted",
                   [({}, self.counters["migrations"])])
            metric("fleetplan_observations_total", "counter", "observations stored",
                   [({}, self.counters["observations"])])
            metric("fleetplan_resolves_total", "counter", "full MILP re-solves by outcome",
                   [({"outcome": o}, self.counters[f"resolves_{o}"]) for o in ("adopted", "kept", "failed")])
            metric("fleetplan_prometheus_errors_total", "counter", "failed Prometheus pulls",
                   [({}, self.counters["prometheus_errors"])])
            w = fc.window_at(now)
            metric("fleetplan_forecast_req_per_s", "gauge", "demand forecast for the current window",
                   [({"model": m}, fc.forecast(m, w, now)) for m in self.model_names])
            metric("fleetplan_forecast_error_ratio", "gauge",
                   "exponentially weighted mean of |forecast - observed| / observed",
                   [({"model": m}, v) for m, v in sorted(fc.error.items())])
            metric("fleetplan_unmet_demand_req_per_s", "gauge", "forecast the current plan cannot cover",
                   [({"model": m}, v) for m, v in sorted((cur.unmet_req_per_s if cur else {}).items())])
        return "\n".join(lines) + "\n"
