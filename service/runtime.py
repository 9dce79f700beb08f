"""The re-planner service's engine, without HTTP: the Replanner, the store, the periodic loop and the metrics.

:class:`ReplanService` owns one :class:`~fleetplan.solvers.online.Replanner`. Writes are serialized by a write
lock: an observation is checked (finite, dated between the forecast's horizon and the service's clock, in its
tenant's time order, the tenant cap, the ceilings on its model's sum over tenants and on the fleet's total),
committed to the store, then fed to the forecaster at the service's clock, so every stored plan's
``last_observation_id`` says exactly which observations its forecaster state holds. A round or re-solve is staged on
a clone of the Replanner, its plan and diff are committed, and only then is the clone swapped in and the plan
published (stage, commit, swap): a failed write changes nothing. Readers (GET /v1/plan, /v1/plan/diff, /metrics)
read the published copy and never wait on the database. At most ``max_pending_writes`` writes queue for the lock
(one more: :class:`Busy`, HTTP 429) and one re-solve runs at a time.

Several services on one database elect a leader (:mod:`fleetplan.service.leader`). The leader resumes from the last
stored plan and replays the observations stored after it (with no stored plan it makes a cold-start plan); a
background thread renews its lease, runs a heuristic round every ``interval_s`` (pulling Prometheus first when
configured), a full MILP re-solve every ``resolve_every_s`` in a worker thread (adopted only when
:meth:`Replanner.consider` finds it worth its migrations), and retention every 10 minutes. A standby serves the newest
stored plan, stores and feeds the observations it is sent, refuses leader-only requests (:class:`Standby`, HTTP 503)
and takes over when the lease expires. Any exception in the loop is logged with its traceback, counted in /metrics,
and the round retried with backoff (1, 2, 4, ... s, at most ``interval_s``).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace

from sqlalchemy.exc import SQLAlchemyError

from fleetplan.datasets.catalog.names import resolve_name
from fleetplan.errors import FleetplanError, InputError, UnknownNameError
from fleetplan.outputs.planio import load_plan_file, plan_to_dict
from fleetplan.placement.problem import Problem
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import Scenario, load_scenario, scenario_models
from fleetplan.service.leader import Lease, NotLeader
from fleetplan.service.prometheus import pull_observations
from fleetplan.service.settings import ServiceSettings
from fleetplan.service.store import Store, body_digest
from fleetplan.solvers.online.forecast import Forecaster, estimate_demand
from fleetplan.solvers.online.replanner import Replanner
from fleetplan.solvers.online.state import Action, OnlineResult, load_times
from fleetplan.solvers.solve import solve

log = logging.getLogger("fleetplan.service")


def load_problem(scenario: str | None) -> tuple[Problem, dict]:
    """(Problem, load time per option) of a scenario: load times from the catalog's weight bytes and the
    scenario's load bandwidth (options.load_bandwidth_bytes_per_s)."""

    return scenario_problem(load_scenario(scenario))


def scenario_problem(sc: Scenario) -> tuple[Problem, dict]:
    """(Problem, {option key: seconds a new replica loads before it serves}) of a loaded scenario, as the service
    plans it (:func:`load_problem` for one given by name or path). Load time = the model's weight bytes per GPU /
    the scenario's ``options.load_bandwidth_bytes_per_s``. Raises InputError (or a subclass) for a scenario the
    planner cannot build a problem from."""
    problem = build_problem(sc)
    # The planner's own models (config.json, base_model, files.models) with their per-model weight dtypes.
    weights = {name: model.weight_bytes(wd) for name, (model, wd, _kvd) in scenario_models(sc).items()}
    return problem, load_times(problem, sc.options["load_bandwidth_bytes_per_s"], weights)


def fleet_capacity_req_per_s(problem: Problem) -> dict[str, float]:
    """{model: req/s} the whole inventory could serve if every GPU of every pool ran that model's most capable
    option there (floor(pool GPUs / option GPUs) replicas): an upper bound of any plan's capacity."""
    cap = {m.name: 0.0 for m in problem.models}
    pools = problem.pool_by_id
    best: dict[tuple[str, str], float] = {}
    for o in problem.options:
        n = pools[o.pool].gpus // o.gpus
        best[(o.model, o.pool)] = max(best.get((o.model, o.pool), 0.0), n * o.capacity_req_per_s)
    for (m, _), v in best.items():
        cap[m] += v
    return cap


def fleet_history(store: Store, day_start_s: float, day_length_s: float = 86400.0) -> dict:
    """The stored plans of one day as ``fleetplan simulate --fleet`` steps: ``{"steps": [{"at_s", "replicas":
    [{"model", "pool", "tp", "pp", "count"}], "shared": [{"pool", "models"}]}]}`` with ``at_s`` in seconds from
    ``day_start_s`` (unix s). The plan in force at the day's start (the newest stored before it) is the step at 0;
    every plan whose round time lies in the day follows, in storage order (a later plan at the same time replaces
    the earlier one). Raises InputError when no plan was in force during the day."""
    steps: list[dict] = []
    for row in store.plans_at(day_start_s, day_start_s + day_length_s):
        body = row["body"]
        at = max(0.0, float(row["at_s"]) - day_start_s)
        step = {"at_s": at,
                "replicas": [{"model": r["model"], "pool": r["pool"], "tp": r["tp"], "pp": r["pp"],
                              "count": int(r["counts"][0])} for r in body.get("replicas", []) if r["counts"][0]],
                "shared": [{"pool": g["pool"], "models": list(g["models"])} for g in body.get("shared_gpus", [])]}
        if steps and steps[-1]["at_s"] == at:
            steps[-1] = step
        else:
            steps.append(step)
    if not steps:
        raise InputError("no stored plan was in force on that day", field="day", value=day_start_s)
    return {"day_start_s": day_start_s, "steps": steps}


def start_from_plan(replanner: Replanner, plan_file: str, now_s: float) -> OnlineResult:
    """Install the offline plan in ``plan_file`` (its window of ``now_s``; :meth:`Replanner.start_from`) and
    return it as the first online plan. Raises InputError when the file is not a valid plan or does not fit the
    service's scenario."""
    _, plan, _, _ = load_plan_file(plan_file)
    try:
        return replanner.start_from(plan, now_s)
    except InputError as exc:
        raise InputError(f"{exc} (was the plan made for another scenario? give the same --scenario)",
                         source=plan_file, field=exc.field) from None


class Standby(FleetplanError):
    """A leader-only request (a round, a re-solve, a DELETE) sent to a standby (HTTP 503 with Retry-After): send it
    to the leader (``leader`` names it), or retry: a standby takes over once the leader's lease expires."""

    def __init__(self, leader: str | None) -> None:
        super().__init__(f"this replica is a standby (the leader is {leader or 'unknown'}); send this request to the "
                         "leader or retry: a standby takes over when the leader's lease expires")
        self.leader = leader


class Busy(FleetplanError):
    """The service cannot take this request now (HTTP 429): its write queue is full, or a re-solve is running.
    ``retry_after_s`` is when to try again, seconds."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


#: seconds between retention passes of the loop
RETENTION_EVERY_S = 600.0
#: While the lease or the follow of the database keeps failing, its error is logged at most this often, seconds.
LEASE_ERROR_LOG_S = 30.0

#: Outcomes of a full re-solve (the ``outcome`` label of fleetplan_resolves_total).
RESOLVE_OUTCOMES = ("adopted", "kept", "infeasible", "failed")


def _option_fields(rp: Replanner, key: tuple) -> dict:
    """A live option key as the stored plan names it: model, pool, tp, pp, role and decode site (a prefill or
    decode key has its role second, which the stored 'loading' read as the pool)."""
    o = rp.opts[key]
    return {"model": o.model, "pool": o.pool, "tp": o.tp, "pp": o.pp, "role": o.role, "decode_site": o.decode_site}


def _first_line(exc: BaseException) -> str:
    return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:300] if str(exc) else type(exc).__name__


def action_dict(a: Action) -> dict:
    """An :class:`Action` as stored and served: its fields by name (``models`` a list; the API's schema is the
    record's)."""
    d = asdict(a)
    d["models"] = list(a.models)
    return d


@dataclass(frozen=True)
class Published:
    """What readers see: the last committed plan row (with body), its diff, and the figures /metrics needs. Built
    once per commit and never changed after; a new commit replaces it whole."""

    row: dict
    diff: dict
    replicas: dict
    loading: dict
    shared_gpus: int
    unmet_req_per_s: dict


class ReplanService:
    """See the module docstring. ``clock`` returns unix seconds (tests pass a fake one).

    Raises InputError when the database cannot be opened or the stored state does not match the scenario.
    """

    def __init__(self, settings: ServiceSettings, problem: Problem | None = None, load_time_s: dict | None = None,
                 clock=time.time) -> None:
        self.settings = settings
        if problem is None:
            problem, load_time_s = load_problem(settings.scenario)
        self.problem = problem
        self.clock = clock
        self.write_lock = threading.RLock()  # serializes every change: database write, then state swap
        self.state_lock = threading.Lock()  # short: guards swaps and forecaster reads, never held during I/O
        self.lock = self.write_lock
        self.store = Store(settings.db_url, timeout_s=settings.db_timeout_s)
        self.load_time_s = dict(load_time_s or {})
        self.replanner = Replanner(problem, settings.online, self.load_time_s)
        #: the lease that makes one service per database the leader (:mod:`fleetplan.service.leader`)
        self.lease = Lease(self.store, settings.lease_ttl_s)
        self.store.fence = self.lease.fence
        method = settings.online.forecast_method
        if method != "blend" and importlib.util.find_spec("statsforecast") is None:
            log.warning("forecast method %r needs statsforecast, which is not installed (pip install "
                        "'fleetplan[forecast]'): forecasting with the day-curve/EWMA blend", method)
        else:
            log.info("forecast method %s", method)
        self.model_names = [m.name for m in problem.models]
        #: {model: req/s} the whole inventory could serve (at least 1), the unit of the ceilings
        self.fleet_capacity_req_per_s = {m: max(c, 1.0) for m, c in fleet_capacity_req_per_s(problem).items()}
        self.rate_ceiling_req_per_s = {m: settings.rate_ceiling_factor * c
                                       for m, c in self.fleet_capacity_req_per_s.items()}
        self.last_obs_id = 0
        self.published: Published | None = None
        self.counters = {"inventory_changes": 0, "inventory_errors": 0, "observations": 0, "rounds": 0, "migrations": 0,
                         "prometheus_errors": 0, "round_errors": 0, "loop_errors": 0, "observations_not_fed": 0,
                         "commit_hook_errors": 0, "writes_refused": 0,
                         "retention_errors": 0}
        self.db_bytes: int | None = None  # the database's size at the last retention pass
        self.folded_through_id = 0
        #: {(outcome, reason): count} of full re-solves (outcomes: RESOLVE_OUTCOMES)
        self.resolves: dict[tuple[str, str], int] = {}
        #: writes waiting for the write lock or holding it; beyond settings.max_pending_writes a write gets 429
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._write_s = 0.05  # exponentially weighted seconds per admitted write (for Retry-After)
        self._resolve_lock = threading.Lock()  # one re-solve at a time (the loop's or a request's)
        self._resolve_started_s = 0.0
        self.last_round_s = 0.0
        self.last_success_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleetplan-resolve")
        self._future: Future | None = None
        self.resumed = False
        #: Called with each committed plan row after it is published (e.g. the cluster actuator's submit); a hook
        #: that raises is logged and does not undo the commit.
        self.commit_hooks: list[Callable[[dict], None]] = []
        #: Called before every periodic round when set (``--watch-nodes``): {pool id: node indices down} as the
        #: clusters report them; a change is applied as POST /v1/inventory applies one.
        self.inventory_source: Callable[[], dict[str, list[int]]] | None = None
        try:
            self._start()
        except BaseException:
            self.close()  # no connection outlives a failed start (the caller may remove a new database file)
            raise

    @property
    def plan_row(self) -> dict | None:
        """The last committed plan row (a published copy: never changed after it is served)."""
        return self.published.row if self.published else None

    @property
    def role(self) -> str:
        """'leader' (holds the lease: rounds, re-solves, retention, actuation) or 'standby' (serves reads from the
        database, stores observations, takes over when the lease expires)."""
        return "leader" if self.lease.held else "standby"

    # ---- start / resume ------------------------------------------------------------------------------------
    def _start(self) -> None:
        try:
            leads = self.lease.try_acquire()
        except SQLAlchemyError as exc:  # a read-only or unreachable database: serve what is stored
            log.error("cannot take the lease (%s): serving the stored plan as a standby", _first_line(exc))
            leads = False
        if leads:
            self._lead()
        else:
            log.info("standby: the lease is held by %s; serving its plans from the database", self.lease.leader)
            self._follow(force=True)

    def _resume(self, row: dict) -> None:
        """Load stored plan ``row`` and replay the observations stored after it (at their receipt times) into a new
        Replanner, then swap it in and publish the plan. Call with the write lock held."""
        now = self.clock()
        staged = Replanner(self.problem, self.settings.online, self.load_time_s)
        try:
            staged.restore(row["body"]["online"]["state"], now)
        except InputError as exc:
            # The stored plan does not fit this scenario: say which scenario the database holds and what to do
            # (the bare message named a replica key and 'field replicas', which no input of the operator has).
            stored = str(row["body"].get("name") or "").removesuffix(" (online window)")
            if stored and stored != self.problem.name:
                raise InputError(f"the database holds plans of scenario {stored!r} (newest: plan {row['id']}), and "
                                 f"this service plans {self.problem.name!r}: {exc.message}; give a new database "
                                 f"(--db) for this scenario, or start with --scenario naming the scenario that "
                                 f"database was planned for", field="--scenario", value=self.problem.name) from None
            raise InputError(f"stored plan {row['id']} does not fit this scenario: {exc.message}; give a new "
                             "database (--db) for this scenario, or the scenario that database was planned for",
                             field="--scenario", value=self.problem.name) from None
        last = row["last_observation_id"]
        for r in self.store.iter_observations(after=last):
            self._feed(staged, r)
            last = r["id"]
        diff = self.store.diff_for(row["id"]) or {"plan_id": row["id"], "previous_plan_id": None,
                                                  "created_at_s": row["created_at_s"], "actions": []}
        with self.state_lock:
            self.replanner = staged
            self.last_obs_id = last
            self._publish(row, diff, staged.current)
        self.last_success_s = row["created_at_s"] if self.role == "standby" else now
        self.resumed = True

    def _lead(self) -> None:
        """Act as the leader: resume from the newest stored plan (a takeover sees every plan its predecessor
        committed: the lease fences them), or make the first plan; then hand the current plan to the commit hooks
        (the actuator applies it)."""
        with self.write_lock:
            row = self.store.last_plan()
            now = self.clock()
            if row is not None:
                self._resume(row)
                log.info("leader (lease epoch %s): resumed from stored plan %s", self.lease.epoch, row["id"])
                restored = self.replanner.current
                if restored is not None and restored.message.startswith("repaired on restore"):
                    # Some stored replicas no longer fit the inventory (made smaller since): a round now, committed,
                    # so the plan the API serves is one that can exist (it showed 12 replicas on 8 GPUs until the
                    # first periodic round, while /metrics showed 8).
                    staged = self.replanner.clone()
                    res = staged.round(now, reason="restored")
                    res = replace(res, message="; ".join(x for x in (restored.message, res.message) if x))
                    committed = self._commit(staged, res)
                    log.warning("%s: committed as plan %s", restored.message, committed["id"])
            elif self.settings.plan_file:
                staged = self.replanner.clone()
                self._commit(staged, start_from_plan(staged, self.settings.plan_file, now))
            else:
                staged = self.replanner.clone()
                self._commit(staged, staged.initial(now))
            if row is not None:
                self._run_hooks(self.plan_row)

    def _follow(self, force: bool = False) -> None:
        """Standby: serve the newest stored plan (reloaded when the leader committed another) and feed the
        observations stored since into the forecaster, so checks, metrics and a takeover start from the database's
        state."""
        with self.write_lock:
            row = self.store.last_plan() if force or self.store.newest_plan_id() != (
                self.plan_row["id"] if self.plan_row else None) else None
            if row is not None:
                self._resume(row)
            else:
                self._catch_up()

    def _catch_up(self, below: int | None = None) -> None:
        """Feed the observations stored after ``last_obs_id`` (by another replica: a standby stores what it is
        sent) and, with ``below``, before that id. Call with the write lock held."""
        with self.state_lock:
            for r in self.store.iter_observations(after=self.last_obs_id, page=1000):
                if below is not None and r["id"] >= below:
                    break
                self._feed(self.replanner, r)
                self.last_obs_id = r["id"]

    def _step_down(self, why: str) -> None:
        log.warning("stepping down to standby: %s", why)
        self.lease.epoch = None
        try:
            self._follow(force=True)
        except Exception as exc:  # noqa: BLE001 - the next tick follows again
            log.error("standby could not reload the stored plan: %s", exc)

    def _run_hooks(self, row: dict | None) -> None:
        if row is None:
            return
        for hook in self.commit_hooks:
            try:
                hook(row)
            except Exception:  # the plan is committed either way; the failure is logged and counted, never hidden
                self.counters["commit_hook_errors"] += 1
                log.exception("commit hook failed for plan %s", row["id"])

    def _feed(self, target: Replanner | Forecaster, r: dict) -> None:
        """Feed one stored observation row to ``replanner``'s forecaster at the service's clock when it was received
        (``received_at_s``: a replay rebuilds the state the live feed made); a row it refuses is logged and counted
        (rows were checked before they were stored, so this is for rows written by an older version)."""
        fc = target.forecaster if isinstance(target, Replanner) else target
        if r["model"] not in fc.curve:
            return
        try:
            fc.observe(r["model"], r["demand_req_per_s"], r["at_s"], r["tenant"],
                                         interval_s=r["interval_s"], now_s=r["received_at_s"])
        except InputError as exc:
            self.counters["observations_not_fed"] += 1
            log.warning("observation %s not fed to the forecaster: %s", r.get("id"), exc)

    # ---- records -------------------------------------------------------------------------------------------
    def _summary(self, res: OnlineResult) -> dict:
        pools = self.problem.pool_by_id
        reps = {}
        for (m, pool, tp, pp), (n,) in sorted(res.plan.replicas.items()):
            p = pools[pool]
            reps[f"{m} @ {p.label} tp{tp}" + (f"xpp{pp}" if pp > 1 else "")] = n
        for g in res.plan.shared:
            p = pools[g.pool]
            label = f"{'+'.join(g.models)} @ {p.label} shared"
            reps[label] = reps.get(label, 0) + 1
        return {"replicas": reps, "gpus": sum(k[2] * k[3] * n[0] for k, n in res.plan.replicas.items())
                + len(res.plan.shared),
                "unmet_req_per_s": {m: v for m, v in res.unmet_req_per_s.items() if v > 0}}

    def _publish(self, row: dict, diff: dict, res: OnlineResult | None) -> None:
        pub = Published(row=row, diff=diff,
                        replicas={k: n[0] for k, n in res.plan.replicas.items()} if res else {},
                        loading=dict(res.loading) if res else {},
                        shared_gpus=len(res.plan.shared) if res else 0,
                        unmet_req_per_s=dict(res.unmet_req_per_s) if res else {})
        self.published = pub

    def _commit(self, staged: Replanner, res: OnlineResult, *, delete_observation_ids: list[int] | None = None
                ) -> dict:
        """Store ``res`` (computed on ``staged``) with its diff; only once that is committed, swap ``staged`` in
        and publish the plan. Refuses (FleetplanError) an invalid plan; database errors propagate and change
        nothing. Call with the write lock held."""
        if not res.report.ok:
            raise FleetplanError("refusing to adopt a plan that fails validation: " + "; ".join(res.report.violations))
        body = plan_to_dict(res.problem, res.plan)
        body["online"] = {
            "at_s": res.at_s, "window": res.window, "reason": res.reason, "message": res.message,
            "forecast_req_per_s": dict(res.forecast_req_per_s), "unmet_req_per_s": dict(res.unmet_req_per_s),
            "loading": [{**_option_fields(staged, k), "ready_at_s": list(v)}
                        for k, v in sorted(res.loading.items(), key=lambda kv: tuple(map(str, kv[0])))],
            # replicas that serve until their replacements do (make-before-break): the stops still to come
            "retiring": [{**_option_fields(staged, k), "stop_at_s": list(v)}
                         for k, v in sorted(res.retiring.items(), key=lambda kv: tuple(map(str, kv[0])))],
            "cost_usd_per_hour": res.cost_usd_per_hour, "round_time_s": res.round_time_s,
            "migrations": res.migrations, "state": staged.snapshot()}
        actions = [action_dict(a) for a in res.actions]
        prev = self.plan_row["id"] if self.plan_row else None
        summary = self._summary(res)
        now = self.clock()
        pid = self.store.add_plan(at_s=res.at_s, window=res.window, reason=res.reason,
                                  cost_usd_per_hour=res.cost_usd_per_hour, migrations=res.migrations,
                                  valid=res.report.ok, last_observation_id=self.last_obs_id, summary=summary,
                                  body=body, actions=actions, previous_plan_id=prev,
                                  delete_observation_ids=delete_observation_ids, created_at_s=now,
                                  epoch=self.lease.epoch or 0)
        row = {"id": pid, "created_at_s": now, "at_s": res.at_s, "window": res.window, "epoch": self.lease.epoch,
               "reason": res.reason, "cost_usd_per_hour": res.cost_usd_per_hour,
               "migrations": res.migrations, "valid": True, "last_observation_id": self.last_obs_id,
               "summary": summary, "body": body}
        diff = {"plan_id": pid, "previous_plan_id": prev, "created_at_s": now, "actions": actions}
        with self.state_lock:
            self.replanner = staged
            self._publish(row, diff, res)
        self.counters["migrations"] += res.migrations
        self.last_success_s = now
        self._run_hooks(row)
        return row

    # ---- writes --------------------------------------------------------------------------------------------
    def check_observations(self, items: list[dict], source: str = "api") -> list[dict]:
        """Rows ready to store for observation dicts (the POST /v1/observations schema), or InputError naming
        ``observations[i].<field>``: an unknown model (the scenario's alias of a planned model counts as it),
        counters that give no estimate, a rate that is not finite,
        ``at_s`` more than ``max_clock_skew_s`` ahead of the service's clock or ``max_observation_age_s`` behind it,
        or before the newest observation of its tenant, a new tenant label beyond the cap of live ones, and a sum
        over the model's live tenants above ``rate_ceiling_factor`` × the whole fleet's capacity for the model (or
        over models above ``fleet_ceiling_factor`` whole fleets) once the item is counted."""
        s = self.settings
        now = self.clock()
        rows = []
        cap = s.online.max_tenants_per_model
        with self.state_lock:
            fc = self.replanner.forecaster
            live = {m: fc.tenants(m, now) for m in self.model_names}
            newest: dict[tuple[str, str], float] = {}
            for m in self.model_names:
                for t in live[m]:
                    at_t = fc.newest_at(m, t)
                    if at_t is not None:
                        newest[(m, t)] = at_t
            updates: dict[str, dict[str, tuple[float, float, float]]] = {}
            totals = {m: fc.total(m, now) for m in self.model_names}
            for i, o in enumerate(items):
                m = o["model"]
                if m not in self.replanner.models:
                    # the scenario's name of a planned model (an alias: 'Mixtral-8x7B', 'Llama-3.1-8B-Instruct', the
                    # name `fleetplan export` serves it under) counts as that model
                    try:
                        m = resolve_name("model", m, self.model_names)
                    except UnknownNameError:
                        raise UnknownNameError("model", o["model"], self.model_names,
                                               field=f"observations[{i}].model") from None
                try:
                    rate = estimate_demand(o["interval_s"], arrivals=o.get("arrivals"),
                                           completions=o.get("completions"), waiting_start=o.get("waiting_start"),
                                           waiting_end=o.get("waiting_end"), running_start=o.get("running_start"),
                                           running_end=o.get("running_end"))
                except InputError as exc:
                    raise InputError(str(exc), field=f"observations[{i}].{exc.field}") from None
                count_field = "arrivals" if o.get("arrivals") is not None else "completions"
                if not math.isfinite(rate):
                    raise InputError(f"the rate {rate} is not finite; check the counter and interval_s",
                                     field=f"observations[{i}].{count_field}", value=rate)
                at = o.get("at_s")
                at = now if at is None else float(at)
                if not (math.isfinite(at) and now - s.max_observation_age_s <= at <= now + s.max_clock_skew_s):
                    raise InputError(f"at_s must be within {s.max_observation_age_s:g} s before and "
                                     f"{s.max_clock_skew_s:g} s after the service's clock ({now:.0f}); it is "
                                     f"{at - now:+.0f} s off (an older observation no longer bears on the forecast; "
                                     "one from the future would hold it: check the sender's clock)",
                                     field=f"observations[{i}].at_s", value=at)
                tenant = o.get("tenant") or "default"
                prev = newest.get((m, tenant))
                if prev is not None and at < prev:
                    raise InputError(f"at_s {at:.3f} is {prev - at:.0f} s before the newest observation of tenant "
                                     f"{tenant!r} of {m} ({prev:.3f}): send a tenant's observations in time order",
                                     field=f"observations[{i}].at_s", value=at)
                if tenant not in live[m]:
                    live[m].add(tenant)
                    if len(live[m]) > cap:
                        first = fc.first_expiry_s(m, now)
                        wait = (f"wait {first:.0f} s for the first silent one to expire" if first is not None
                                else "wait for silent ones to expire")
                        raise InputError(f"{m} already has {cap} live tenant labels (the cap); reuse a label or "
                                         f"{wait} (a label expires after 3 of its own reporting intervals, at most "
                                         f"{s.online.tenant_ttl_s:g} s)",
                                         field=f"observations[{i}].tenant", value=tenant)
                interval = float(o["interval_s"])
                span = interval if prev is None or prev >= at else max(interval, at - prev)
                newest[(m, tenant)] = at
                upd = updates.setdefault(m, {})
                upd[tenant] = (rate, at, span)
                totals[m] = fc.total(m, now, updates=upd)
                ceiling = self.rate_ceiling_req_per_s[m]
                if totals[m] > ceiling:
                    raise InputError(
                        f"with this observation ({rate:.6g} req/s) the live tenants of {m} would sum to "
                        f"{totals[m]:.6g} req/s, above the ceiling of {ceiling:.6g} req/s ({s.rate_ceiling_factor:g} "
                        f"x the whole fleet's capacity for {m}); check the counter and interval_s",
                        field=f"observations[{i}].{count_field}", value=rate)
                fleets = sum(v / self.fleet_capacity_req_per_s[k] for k, v in totals.items())
                if fleets > s.fleet_ceiling_factor:
                    raise InputError(
                        f"with this observation the observed demand of all models would fill {fleets:.3g} whole "
                        f"fleets (each model's sum over its tenants / what the whole fleet could serve of it), above "
                        f"the ceiling of {s.fleet_ceiling_factor:g}; check the counters",
                        field=f"observations[{i}].{count_field}", value=rate)
                rows.append({"at_s": at, "model": m, "tenant": tenant, "interval_s": interval,
                             "demand_req_per_s": rate, "source": source, "body": o, "received_at_s": now})
        return rows

    def observe_once(self, items: list[dict], source: str = "api", idempotency_key: str | None = None
                     ) -> tuple[list[int], bool]:
        """Check (:meth:`check_observations`), store (committed) and feed observations; returns (their ids,
        replayed). With ``idempotency_key``, a repeat of a stored request stores and feeds nothing and returns
        the ids first stored with replayed=True (IdempotencyConflict for the key with another body). Nothing is
        stored when any item is bad; database errors propagate (nothing fed)."""
        with self.write_lock:  # checked under the lock, so two requests cannot both take the last tenant slot
            rows = self.check_observations(items, source)
            if idempotency_key is None:
                ids, replayed = self.store.add_observations(rows), False
            else:
                ids, replayed = self.store.add_observations_once(rows, idempotency_key, body_digest(items))
            if replayed:
                return ids, True
            if ids and ids[0] != self.last_obs_id + 1:  # another replica stored observations meanwhile: feed them first
                self._catch_up(below=ids[0])
            with self.state_lock:
                for r, i in zip(rows, ids, strict=True):
                    self._feed(self.replanner, {**r, "id": i})
                    self.last_obs_id = max(self.last_obs_id, i)
            self.counters["observations"] += len(ids)
        return ids, False

    def observe(self, items: list[dict], source: str = "api") -> list[int]:
        """:meth:`observe_once` without a key; returns the new ids."""
        return self.observe_once(items, source)[0]

    def _leader_only(self) -> None:
        if not self.lease.held:
            raise Standby(self.lease.leader)

    def replan(self) -> dict:
        """One heuristic round now, staged and committed; returns the new plan row. Raises :class:`Standby` on a
        standby."""
        self._leader_only()
        with self.write_lock:
            staged = self.replanner.clone()
            res = staged.round(self.clock())
            row = self._commit(staged, res)
            self.counters["rounds"] += 1
            self.last_round_s = res.round_time_s
            return row

    def inventory(self) -> list[dict]:
        """Every pool as the fleet stands (nodes, those down, GPUs usable now), for GET /v1/inventory."""
        rp = self.replanner
        return [{"pool": p.id, "site": p.site, "gpu": p.gpu, "nodes": p.nodes,
                 "nodes_down": sorted(rp.down.get(p.id, ())), "gpus_available": rp.available_gpus(p.id)}
                for p in self.problem.pools]

    def set_inventory(self, pools: dict[str, list[int]], sites: dict[str, bool]) -> dict:
        """Nodes of pools (``pools``: {pool id: node indices down}) and whole sites (``sites``: {site: up}) whose
        availability changed: the re-planner takes the replicas on nodes that went down out and replaces them in
        the same round, beyond the migration budget (:meth:`Replanner.set_unavailable`); the plan is committed
        before the answer, so a restart resumes on the same inventory. Returns {plan_id, lost_replicas,
        message}. Raises :class:`Standby` on a standby, InputError for an unknown pool, site or node."""
        self._leader_only()
        with self.admission(), self.write_lock:
            staged = self.replanner.clone()
            down: dict[str, list[int]] = {}
            for site, up in sites.items():
                for pool, nodes in staged.site_nodes(site).items():
                    down[pool] = [] if up else nodes
            down.update(pools)
            res = staged.set_unavailable(down, self.clock())
            row = self._commit(staged, res)
            self.counters["inventory_changes"] += 1
            log.warning("inventory changed (%s): %d replicas lost, %d migrations to replace them; plan %s",
                        ", ".join(f"{p}: {len(n)} nodes down" for p, n in sorted(down.items())), res.lost,
                        res.migrations, row["id"])
            unmet = {m: v for m, v in res.unmet_req_per_s.items() if v > 1e-9}
            msg = (f"{res.lost} replicas lost, {res.migrations} starts and stops to replace them"
                   + (f"; forecast the fleet left cannot cover: {unmet}" if unmet else ""))
            return {"plan_id": row["id"], "lost_replicas": res.lost, "message": msg}

    def retain(self) -> dict:
        """Apply retention now (:meth:`Store.retain` with the settings' limits); returns its counts. Runs in the
        loop every RETENTION_EVERY_S; deletes run in chunks, so writes wait for one chunk at a time."""
        s = self.settings
        out = self.store.retain(self.clock(), observation_keep_s=s.observation_retention_s,
                                plan_keep_s=s.plan_retention_s, max_plans=s.max_plans)
        self.db_bytes = self.store.size_bytes()
        self.folded_through_id = out["folded_through_id"]
        if out["observations_deleted"] or out["plans_deleted"]:
            log.info("retention: folded %d observations (through id %d), removed %d plans",
                     out["observations_deleted"], out["folded_through_id"], out["plans_deleted"])
        return out

    def delete_observations(self, *, ids: list[int] | None = None, from_s: float | None = None,
                            to_s: float | None = None) -> dict:
        """Delete stored observations by id and/or time range (unix s, ``at_s`` inclusive), rebuild the forecaster
        without them and repair the fleet at once. Returns {deleted, ids, plan_id}.

        The rebuild starts from the newest stored plan whose state predates the first deleted observation (its
        ``last_observation_id`` is below it; none: a fresh forecaster on the day curves) and replays the
        observations stored after it, in id order, at the clock each was received: its time grows with the age of
        the deleted observation, not with the table. The forecasts the rounds of the last ``cooldown_s`` recorded
        for the scale-down stabilization are recomputed from the rebuilt state at each round's own observations, so
        the cooldown does not hold the deleted values; a heuristic round with no migration budget (reason 'rebuild')
        then runs on it, committed in the same transaction as the delete, so a restart never replays them.
        ``replayed`` in the result counts the observations replayed. Raises FleetplanError (409) for ids that
        retention folded into the stored state (at or below ``folded_through_id``): they can no longer be removed, and
        :class:`Standby` on a standby."""
        self._leader_only()
        with self.write_lock:
            folded = self.store.folded_through_id()
            gone = sorted(i for i in (ids or []) if i <= folded)
            if gone:
                raise FleetplanError(f"observations {', '.join(map(str, gone[:10]))}{' ...' if len(gone) > 10 else ''} "
                                     f"were folded into the stored forecast by retention (ids up to {folded}, older "
                                     "than observation_retention_s) and can no longer be deleted")
            doomed = self.store.observation_ids_where(ids=ids, from_s=from_s, to_s=to_s)
            if not doomed:
                return {"deleted": 0, "ids": [], "plan_id": self.plan_row["id"] if self.plan_row else None,
                        "replayed": 0, "folded_through_id": folded}
            now = self.clock()
            first = doomed[0]
            staged = self.replanner.clone()
            fc = staged.fresh_forecaster()
            base = self.store.plan_before_observation(first)
            after = 0
            if base is not None:
                fc.load_dict(base["body"]["online"]["state"].get("forecaster", {}))
                after = int(base["last_observation_id"])
            held_at = {t for v in staged.recent_forecasts.values() for t, _ in v}
            # the rounds whose forecasts held deleted observations: (their last observation id, their time)
            points = sorted((mark, at) for at, mark in self.store.plan_marks(now - staged.config.cooldown_s)
                            if at in held_at and mark >= first)
            redone: dict[float, dict[str, float]] = {}

            def forecast_at(at: float) -> None:
                probe = copy.deepcopy(fc)  # a forecast may fit a model: the replayed state stays as the feed left it
                probe.expire(at)
                w = probe.window_at(at)
                redone[at] = {m: probe.forecast(m, w, at) for m in staged.models}

            k = replayed = 0
            for r in self.store.iter_observations(after=after, skip=set(doomed)):
                while k < len(points) and points[k][0] < r["id"]:
                    forecast_at(points[k][1])
                    k += 1
                self._feed(fc, r)
                replayed += 1
            for _, at in points[k:]:
                forecast_at(at)
            staged.forecaster = fc
            staged.recent_forecasts = {m: [(t, redone[t][m] if t in redone else v) for t, v in hist]
                                       for m, hist in staged.recent_forecasts.items()}
            res = staged.round(now, budget=-1, reason="rebuild")
            row = self._commit(staged, res, delete_observation_ids=doomed)
            return {"deleted": len(doomed), "ids": doomed, "plan_id": row["id"], "replayed": replayed,
                    "folded_through_id": folded}

    @contextlib.contextmanager
    def admission(self):
        """Admit one write request (a block run under it), or raise :class:`Busy` when ``max_pending_writes`` are
        already queued for the write lock: overload answers 429 with a Retry-After (the queue's expected wait),
        never an unbounded wait."""
        limit = self.settings.max_pending_writes
        with self._pending_lock:
            if self._pending >= limit:
                self.counters["writes_refused"] += 1
                wait = max(1.0, math.ceil(self._pending * self._write_s))
                raise Busy(f"the write queue is full ({self._pending} writes waiting; max_pending_writes {limit}); "
                           f"retry in {wait:g} s", retry_after_s=wait)
            self._pending += 1
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            with self._pending_lock:
                self._pending -= 1
                self._write_s = 0.9 * self._write_s + 0.1 * dt / max(1, self._pending + 1)

    def _solve_candidate(self, time_limit_s: float):
        with self.state_lock:
            demand = self.replanner.resolve_demand(self.clock())
            prob = self.replanner.candidate_problem(demand)  # the fleet as it stands: nodes down left out
        return solve(prob, "highs", time_limit_s=time_limit_s, threads=1, lp_bound=False)

    def _count_resolve(self, outcome: str, reason: str) -> None:
        key = (outcome, reason)
        self.resolves[key] = self.resolves.get(key, 0) + 1

    def resolve(self, time_limit_s: float | None = None) -> tuple[bool, str]:
        """Full MILP re-solve now (blocking); adopted only if worth its migrations. Returns (adopted, message).
        Raises :class:`Busy` while another re-solve runs (the loop's or another request's): one at a time."""
        self._leader_only()
        limit = time_limit_s or self.settings.resolve_time_limit_s
        if not self._resolve_lock.acquire(blocking=False):
            left = max(1.0, math.ceil(self._resolve_started_s + self.settings.resolve_time_limit_s - time.time()))
            raise Busy(f"a re-solve is running; retry in {left:g} s", retry_after_s=left)
        try:
            self._resolve_started_s = time.time()
            try:
                cand = self._solve_candidate(limit)
            except FleetplanError as exc:
                self._count_resolve("failed", type(exc).__name__)
                return False, f"re-solve failed: {exc}"
            return self._offer(cand)
        finally:
            self._resolve_lock.release()

    def _offer(self, cand) -> tuple[bool, str]:
        """Offer a re-solve's plan (:meth:`Replanner.consider`) and count its outcome with a reason: 'infeasible'
        (the solver's status: no plan meets the forecast, or none found in the time limit), 'kept' (the saving does
        not pay for the migrations, or the forecast moved during the solve and the plan no longer meets it),
        'adopted', or 'failed' (its new replicas cannot be placed beside those they replace: make-before-break)."""
        if not cand.has_solution:
            self._count_resolve("infeasible", cand.status.value)
            msg = f"re-solve has no plan ({cand.status.value}: {cand.message[:200]})"
            log.warning(msg)
            return False, msg
        with self.write_lock:
            now = self.clock()
            staged = self.replanner.clone()
            adopted, res, msg = staged.consider(cand, now)
            if adopted and res is not None:
                self._commit(staged, res)
                self._count_resolve("adopted", "saving")
            elif staged.verdict == "make_before_break":
                self._count_resolve("failed", "make_before_break")
            else:
                self._count_resolve("kept", staged.verdict or "saving_below_threshold")
            return adopted, msg

    # ---- periodic loop -------------------------------------------------------------------------------------
    def pull_prometheus(self) -> int:
        """Pull one window (``prometheus_window_s``) of vLLM metrics and store them as observations; returns how
        many. Raises httpx.HTTPError or InputError when Prometheus fails, and the store's errors."""
        s = self.settings
        if not s.prometheus_url:
            raise InputError("no Prometheus URL: start fleetplan serve with --prometheus URL", field="prometheus")
        window = s.prometheus_window_s or s.interval_s or 300.0
        obs, unknown = pull_observations(s.prometheus_url, window, self.clock(), self.model_names)
        if unknown:
            log.warning("Prometheus reports models the scenario does not plan: %s", ", ".join(unknown))
        return len(self.observe(obs, source="prometheus")) if obs else 0

    def try_pull_prometheus(self) -> str | None:
        """:meth:`pull_prometheus` when configured; failures are logged and counted, never raised. Returns a
        one-line outcome, or None when no Prometheus is configured."""
        if not self.settings.prometheus_url or not self.lease.held:
            return None
        try:
            return f"pulled {self.pull_prometheus()} observations"
        except Exception as exc:  # noqa: BLE001 - a metrics outage must not stop re-planning
            self.counters["prometheus_errors"] += 1
            log.warning("Prometheus pull failed: %s", exc)
            return f"pull failed: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}"

    def _tick_settle(self, now_s: float) -> None:
        """Commit the stops of replicas whose replacements serve by now (make-before-break), between rounds."""
        due = self.replanner.next_settle_s()
        if due is None or due > now_s:
            return
        try:
            with self.write_lock:
                staged = self.replanner.clone()
                res = staged.settle(now_s)
                if res is not None:
                    self._commit(staged, res)
        except NotLeader as exc:
            self._step_down(str(exc))
        except Exception as exc:  # noqa: BLE001 - the next round settles them; the cause is logged
            self.counters["round_errors"] += 1
            log.error("settling replaced replicas failed: %s", exc, exc_info=True)

    def try_read_inventory(self) -> str | None:
        """Read the clusters' inventory (:attr:`inventory_source`) and apply a change; failures are logged and
        counted, never raised (the fleet keeps the inventory it knew). Returns a one-line outcome or None."""
        if self.inventory_source is None:
            return None
        try:
            got = self.inventory_source()
            changed = {p: n for p, n in got.items() if set(n) != set(self.replanner.down.get(p, ()))}
            if not changed:
                return "inventory unchanged"
            return self.set_inventory(changed, {})["message"]
        except Exception as exc:  # noqa: BLE001 - a cluster that does not answer must not stop re-planning
            self.counters["inventory_errors"] += 1
            log.warning("reading the clusters' nodes failed: %s", exc)
            return f"inventory read failed: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}"

    def tick(self, now_s: float, state: dict) -> None:
        """One pass of the periodic loop at ``now_s``; ``state`` keeps the next due times and the failure streak.
        Never raises: a failed round is logged with its traceback, counted, and retried after 1, 2, 4, ... s
        (at most ``interval_s``)."""
        s = self.settings
        if not self._tick_lease(now_s, state):
            return
        self._tick_retention(now_s, state)
        self._tick_settle(now_s)
        if s.interval_s and now_s >= state.setdefault("next_round", now_s + s.interval_s):
            self.try_pull_prometheus()
            self.try_read_inventory()
            try:
                self.replan()
                if self.replanner.drifted and s.resolve_every_s and self._future is None:
                    state["next_resolve"] = now_s  # the round drifted above the last re-solve's cost: re-solve now
                state["failures"] = 0
                state["next_round"] = now_s + s.interval_s
            except NotLeader as exc:
                self._step_down(str(exc))
                return
            except Exception as exc:  # noqa: BLE001 - the loop survives everything; the cause is logged
                k = state["failures"] = state.get("failures", 0) + 1
                self.counters["round_errors"] += 1
                delay = min(s.interval_s, 2.0 ** (k - 1))
                state["next_round"] = now_s + delay
                log.error("re-plan round failed (%d in a row), retrying in %g s: %s", k, delay, exc, exc_info=True)
        try:
            if s.resolve_every_s and self._future is None and now_s >= state.setdefault(
                    "next_resolve", now_s + s.resolve_every_s) and self._resolve_lock.acquire(blocking=False):
                state["next_resolve"] = now_s + s.resolve_every_s
                self._resolve_started_s = time.time()
                self._future = self._pool.submit(self._solve_candidate, s.resolve_time_limit_s)
            if self._future is not None and self._future.done():
                fut, self._future = self._future, None
                try:
                    adopted, msg = self._offer(fut.result())
                finally:
                    self._resolve_lock.release()
                log.info(msg)
        except Exception as exc:  # noqa: BLE001 - a failed solve keeps the current plan
            self._count_resolve("failed", type(exc).__name__)
            log.error("re-solve failed: %s", exc, exc_info=True)

    def _tick_lease(self, now_s: float, state: dict) -> bool:
        """The lease's part of a tick: the leader renews it when due (stepping down when it was lost) and feeds
        observations other replicas stored; a standby takes the lease when it expired (and leads from the newest
        stored plan) or follows the database (at most once a second). True when this service leads afterwards."""
        try:
            if self.lease.held:
                if self.lease.due() and not self.lease.renew():
                    self._step_down("the lease was taken over")
                    return False
                with self.write_lock:
                    self._catch_up()
                return True
            if self.lease.try_acquire():
                self._lead()
                state.pop("next_round", None)
                return True
            if now_s >= state.get("next_follow", 0.0):
                state["next_follow"] = now_s + 1.0
                self._follow()
        except Exception as exc:  # noqa: BLE001 - a database outage: the lease is retried at the next tick
            self.counters["loop_errors"] += 1
            # Logged when the cause changes and at most every LEASE_ERROR_LOG_S while it lasts (every tick, 0.5 s,
            # logged 54 lines in 30 s of a full disk); every failure is counted (fleetplan_loop_errors_total).
            why = _first_line(exc)
            if why != state.get("lease_error") or now_s >= state.get("lease_error_logged", 0.0) + LEASE_ERROR_LOG_S:
                log.error("lease or follow failed: %s", why)
                state["lease_error"], state["lease_error_logged"] = why, now_s
            if self.lease.held and self.lease.expired():
                # It could not be renewed before it ran out: another replica may lead now. Fencing keeps this one
                # from committing either way; stepping down keeps it from saying it leads.
                self._step_down(f"the lease expired {self.lease.ttl_s:g} s after its last renewal, which the "
                                f"database refused ({why}); it is taken again once the database answers")
            return self.lease.held
        state.pop("lease_error", None)
        return self.lease.held

    def _tick_retention(self, now_s: float, state: dict) -> None:
        if now_s >= state.setdefault("next_retention", now_s):
            state["next_retention"] = now_s + RETENTION_EVERY_S
            try:
                self.retain()
            except Exception as exc:  # noqa: BLE001 - retention is retried at the next pass; the cause is logged
                self.counters["retention_errors"] += 1
                log.error("retention failed: %s", exc, exc_info=True)

    def _loop(self) -> None:
        state: dict = {}
        period = min(0.5, self.settings.interval_s / 2) if self.settings.interval_s else 0.5
        while not self._stop.wait(period):
            try:
                self.tick(time.time(), state)
            except Exception:  # noqa: BLE001 - tick never raises; this is the last line of defence
                self.counters["loop_errors"] += 1
                log.exception("re-plan loop error")

    def start_background(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="fleetplan-replan", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the loop, give up the lease (a standby takes over at its next look) and close the database."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.lease.release()
        self.store.close()

    # ---- health --------------------------------------------------------------------------------------------
    def loop_state(self) -> str:
        """'running', 'stopped' (the thread died or was closed) or 'off' (not started: rounds only on request)."""
        if self._thread is None:
            return "off"
        return "running" if self._thread.is_alive() else "stopped"

    def readiness(self) -> tuple[bool, dict]:
        """(ready, body): the database accepts a write (within 1 s), the last committed plan is younger than three
        intervals (when periodic rounds are on), and the loop thread is alive (when started)."""
        s = self.settings
        checks: dict[str, bool] = {}
        detail: dict[str, str] = {}
        reason = self.store.probe_write(min(1.0, s.db_timeout_s))
        checks["database_writable"] = reason is None
        if reason is not None:
            detail["database"] = reason
        age = self.clock() - self.last_success_s
        if s.interval_s:
            checks["recent_round"] = age <= 3 * s.interval_s
            if not checks["recent_round"]:
                detail["recent_round"] = f"last committed plan is {age:.0f} s old (> 3 x {s.interval_s:g} s)"
        if self._thread is not None:
            checks["loop_alive"] = self._thread.is_alive()
        if self.plan_row is None:
            checks["plan"] = False
            detail["plan"] = "no plan yet (a standby waits for the leader's first plan)"
        ok = all(checks.values())
        return ok, {"status": "ready" if ok else "not ready", "checks": checks, "detail": detail,
                    "last_success_age_s": age, "plan_id": self.plan_row["id"] if self.plan_row else None,
                    "role": self.role}

    # ---- metrics -------------------------------------------------------------------------------------------
    def metrics_text(self) -> str:
        """Prometheus text exposition (format 0.0.4) of the published plan and the service's counters. Reads
        only memory (the published plan, the forecaster under the short state lock): never waits on the
        database."""
        def esc(v: str) -> str:
            return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

        lines: list[str] = []

        def metric(name: str, kind: str, help_: str, samples: list[tuple[dict, float]]) -> None:
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, v in samples:
                lab = ",".join(f'{k}="{esc(x)}"' for k, x in labels.items())
                lines.append(f"{name}{{{lab}}} {float(v)!r}" if lab else f"{name} {float(v)!r}")

        pub = self.published
        row = pub.row if pub else None
        now = self.clock()
        with self.state_lock:
            fc = self.replanner.forecaster
            w = fc.window_at(now)
            forecast = [({"model": m}, fc.forecast(m, w, now)) for m in self.model_names]
            error = [({"model": m}, v) for m, v in sorted(fc.error.items())]
        c = dict(self.counters)
        metric("fleetplan_plan_cost_usd_per_hour", "gauge", "GPU and egress cost of the current plan, USD per hour",
               [({}, row["cost_usd_per_hour"] if row else 0.0)])
        metric("fleetplan_plan_id", "gauge", "id of the current stored plan", [({}, row["id"] if row else 0)])
        metric("fleetplan_leader", "gauge", "1 while this replica holds the lease (runs rounds); 0 on a standby",
               [({}, 1.0 if self.lease.held else 0.0)])
        metric("fleetplan_lease_epoch", "gauge", "epoch of the lease this replica holds (0 on a standby)",
               [({}, self.lease.epoch or 0)])
        reps = pub.replicas if pub else {}
        metric("fleetplan_replicas", "gauge", "replicas in the current plan (loading ones included)",
               [({"model": k[0], "pool": k[1], "tp": k[2], "pp": k[3]}, n) for k, n in sorted(reps.items())])
        load = pub.loading if pub else {}
        metric("fleetplan_replicas_loading", "gauge", "replicas still loading their weights",
               [({"model": k[0], "pool": k[1], "tp": k[2], "pp": k[3]}, sum(1 for t in v if t > now))
                for k, v in sorted(load.items())])
        metric("fleetplan_shared_gpus", "gauge", "shared GPUs in the current plan",
               [({}, pub.shared_gpus if pub else 0)])
        metric("fleetplan_round_seconds", "gauge", "wall time of the last re-plan round", [({}, self.last_round_s)])
        metric("fleetplan_rounds_total", "counter", "heuristic rounds committed", [({}, c["rounds"])])
        metric("fleetplan_round_errors_total", "counter", "periodic rounds that failed (retried with backoff)",
               [({}, c["round_errors"])])
        metric("fleetplan_loop_errors_total", "counter", "errors caught by the re-plan loop outside a round",
               [({}, c["loop_errors"])])
        metric("fleetplan_commit_hook_errors_total", "counter", "hooks (e.g. the cluster actuator) that failed after a "
               "committed plan", [({}, c["commit_hook_errors"])])
        metric("fleetplan_last_success_timestamp_seconds", "gauge", "unix time of the last committed plan",
               [({}, self.last_success_s)])
        metric("fleetplan_loop_up", "gauge", "1 while the periodic re-plan thread runs",
               [({}, 1.0 if self.loop_state() == "running" else 0.0)])
        metric("fleetplan_migrations_total", "counter", "replica starts and stops adopted", [({}, c["migrations"])])
        metric("fleetplan_observations_total", "counter", "observations stored", [({}, c["observations"])])
        metric("fleetplan_inventory_changes_total", "counter", "POST /v1/inventory changes applied",
               [({}, c["inventory_changes"])])
        metric("fleetplan_inventory_errors_total", "counter", "failed reads of the clusters' nodes (--watch-nodes)",
               [({}, c["inventory_errors"])])
        metric("fleetplan_gpus_unavailable", "gauge", "GPUs of each pool on nodes reported down",
               [({"pool": p.id}, len(self.replanner.down.get(p.id, ())) * p.gpus_per_node)
                for p in self.problem.pools])
        resolves = dict(self.resolves)
        for o in RESOLVE_OUTCOMES:  # every outcome has a series from the start (an alert on a rate needs one)
            if not any(k[0] == o for k in resolves):
                resolves[(o, "none")] = 0
        metric("fleetplan_resolves_total", "counter", "full MILP re-solves by outcome and reason: adopted; kept "
               "(saving_below_threshold, stale_forecast, empty_plan); infeasible (the solver's status: infeasible, "
               "no_solution); failed (the error's class, or install)",
               [({"outcome": o, "reason": r}, n) for (o, r), n in sorted(resolves.items())])
        metric("fleetplan_retention_errors_total", "counter", "retention passes that failed (retried 10 minutes later)",
               [({}, c["retention_errors"])])
        metric("fleetplan_observations_folded_through_id", "gauge", "observations up to this id were folded into the "
               "stored forecaster state by retention", [({}, self.folded_through_id)])
        if self.db_bytes is not None:
            metric("fleetplan_database_bytes", "gauge", "size of the database at the last retention pass",
                   [({}, self.db_bytes)])
        metric("fleetplan_writes_refused_total", "counter", "write requests answered 429 (the write queue was full)",
               [({}, c["writes_refused"])])
        metric("fleetplan_writes_pending", "gauge", "write requests queued for or holding the write lock",
               [({}, self._pending)])
        metric("fleetplan_prometheus_errors_total", "counter", "failed Prometheus pulls",
               [({}, c["prometheus_errors"])])
        metric("fleetplan_forecast_req_per_s", "gauge", "demand forecast for the current window", forecast)
        metric("fleetplan_forecast_error_ratio", "gauge",
               "exponentially weighted mean of |forecast - observed| / observed", error)
        metric("fleetplan_unmet_demand_req_per_s", "gauge", "forecast the current plan cannot cover",
               [({"model": m}, v) for m, v in sorted((pub.unmet_req_per_s if pub else {}).items())])
        return "\n".join(lines) + "\n"
