"""The request and response models of the re-planner's HTTP API (the OpenAPI document's schemas) and the error
codes each endpoint documents (:func:`codes`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fleetplan.solvers.online.state import Action

#: a label: 1-200 characters, no control characters (NUL breaks PostgreSQL text; a lone surrogate is refused too)
LABEL_PATTERN = r"^[^\x00-\x1f\x7f]+$"
#: counters above this are no real interval's counts (the rate ceiling refuses far smaller ones)
COUNT_MAX = 1e15


#: why counts may be fractional (said in every count's schema description)
_FRACTIONAL = ("; a fractional count is accepted: Prometheus' increase() and delta() extrapolate counters and gauges "
               "to the interval's edges, so the counts it reports are rarely whole")


def _count(description: str):
    return Field(None, ge=0, le=COUNT_MAX, description=description + _FRACTIONAL)


class Observation(BaseModel):
    """One interval's counters for one model and tenant. Give ``arrivals``, or ``completions`` with the queue
    sizes at the interval's start and end (demand = completions + queue growth). Numbers are JSON numbers (no
    strings, no booleans); counts may be fractional (as Prometheus' increase() reports them). The service also
    refuses a rate above its ceiling (a multiple of the fleet's capacity) and an ``at_s`` far from its clock,
    naming the field."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    model: str = Field(min_length=1, max_length=200, pattern=LABEL_PATTERN, description="planned model name")
    tenant: str = Field("default", min_length=1, max_length=200, pattern=LABEL_PATTERN,
                        description="tenant label (live labels per model are capped; silent ones expire)")
    interval_s: float = Field(ge=1, le=86400, description="length of the interval, seconds (1 s to one day)")
    at_s: float | None = Field(None, ge=0, le=1e11, description="unix time of the interval's end (default: receipt); "
                               "within the service's clock skew of now")
    arrivals: float | None = _count("requests that arrived in the interval")
    completions: float | None = _count("requests that finished in the interval")
    waiting_start: float | None = _count("requests waiting at the start")
    waiting_end: float | None = _count("requests waiting at the end")
    running_start: float | None = _count("requests running at the start")
    running_end: float | None = _count("requests running at the end")
    prompt_tokens: float | None = _count("prompt tokens of the interval")
    generation_tokens: float | None = _count("generated tokens of the interval")

    @model_validator(mode="after")
    def _has_counts(self):
        if self.arrivals is None and self.completions is None:
            raise ValueError("give 'arrivals', or 'completions' with 'waiting_start' and 'waiting_end'")
        if self.arrivals is None and (self.waiting_start is None or self.waiting_end is None):
            raise ValueError("without 'arrivals', give 'waiting_start' and 'waiting_end' with 'completions': "
                             "demand is estimated from queue growth, not completions alone")
        return self


class ObservationBatch(BaseModel):
    """Body of POST /v1/observations: 1 to 1,000 observations; unknown fields and non-finite numbers are refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    observations: list[Observation] = Field(min_length=1, max_length=1000)


class ReplanRequest(BaseModel):
    """Body of POST /v1/replan: whether to run a full MILP re-solve, and its time limit in seconds."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    full: bool = Field(False, description="run a full MILP re-solve (adopted only if worth its migrations)")
    time_limit_s: float | None = Field(None, gt=0, le=600, description="time limit of the re-solve, seconds")


class PoolAvailability(BaseModel):
    """Which nodes of one pool are down (``nodes_down``: indices 0 .. nodes - 1; empty: all up)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    pool: str = Field(min_length=1, max_length=200, description="pool id, as GET /v1/inventory lists them")
    nodes_down: list[Annotated[int, Field(ge=0, le=100_000)]] = Field(max_length=100_000, description="node "
                                                                      "indices that are unavailable now")


class SiteAvailability(BaseModel):
    """A whole site down (``up`` false: every node of its pools) or back (``up`` true: all of them up)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    site: str = Field(min_length=1, max_length=200, description="site name, e.g. gcp:us-central1")
    up: bool


class InventoryUpdate(BaseModel):
    """Body of POST /v1/inventory: pools and/or sites whose availability changed (each replaces what was said
    before for that pool). The re-planner replaces the replicas on nodes that went down in the same request."""

    model_config = ConfigDict(extra="forbid", strict=True)
    pools: list[PoolAvailability] = Field(default_factory=list, max_length=1000)
    sites: list[SiteAvailability] = Field(default_factory=list, max_length=100)

    @model_validator(mode="after")
    def _something(self):
        if not self.pools and not self.sites:
            raise ValueError("give 'pools' and/or 'sites'")
        return self


class PoolInventory(BaseModel):
    """One pool as the fleet stands: its nodes, those down, and the GPUs usable now."""

    pool: str
    site: str
    gpu: str
    nodes: int
    nodes_down: list[int]
    gpus_available: int


class Inventory(BaseModel):
    """GET /v1/inventory and the answer of POST: every pool; with POST, the plan that repaired the fleet."""

    pools: list[PoolInventory]
    plan_id: int | None = None
    lost_replicas: int | None = None
    message: str | None = None


# ---- response models (the OpenAPI document's schemas) ------------------------------------------------------------
class ErrorResponse(BaseModel):
    """A refused request: what is wrong, in one line."""

    detail: str


class ValidationErrorItem(BaseModel):
    """One invalid field: its location (``["body", "observations", 0, "arrivals"]``), a message, a type, and
    usually the ``input`` refused (cut to its first characters, as text, when it is long)."""

    model_config = ConfigDict(extra="allow")
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorResponse(BaseModel):
    """422: every invalid field of the request."""

    detail: list[ValidationErrorItem]


class ObservationsAccepted(BaseModel):
    """202: how many observations were stored (committed) and their ids (a replayed key: the ids first stored)."""

    accepted: int
    ids: list[int]


class ObservationsDeleted(BaseModel):
    """200: observations deleted, their ids, the plan that now holds the rebuilt forecaster state and the repaired
    fleet, how many observations were replayed to rebuild it (those after the newest plan that predates the first
    deleted one), and the id up to which retention folded observations into the stored state (those are gone)."""

    deleted: int
    ids: list[int]
    plan_id: int | None
    replayed: int
    folded_through_id: int


class PlanDiff(BaseModel):
    """The actions that turn the previous stored plan into this one: each one the re-planner's own record
    (:class:`fleetplan.solvers.online.state.Action`), so the schema is derived from it (``models``: a shared GPU's
    residents; diffs stored by earlier versions, which named it ``shared_models``, are read into the same form)."""

    plan_id: int
    previous_plan_id: int | None
    created_at_s: float
    actions: list[Action]


class OnlineBlock(BaseModel):
    """The online re-planner's part of a plan: when and why it was made, the forecast, what is loading (and when
    it serves), what is retiring (replicas that serve until their replacements do, and when they stop), and the
    state needed to resume (``state.forecaster`` lists per-tenant rates only for token holders). Plans stored
    before 2026-12-03 have no ``retiring``."""

    model_config = ConfigDict(extra="allow")
    at_s: float
    window: int
    reason: str
    message: str
    forecast_req_per_s: dict[str, float]
    unmet_req_per_s: dict[str, float]
    loading: list[dict[str, Any]]
    retiring: list[dict[str, Any]] = []
    cost_usd_per_hour: float
    round_time_s: float
    migrations: int
    state: dict[str, Any]


class PlanResponse(BaseModel):
    """The current plan: the plan file format of ``fleetplan plan`` (one window) with its id and online block."""

    model_config = ConfigDict(extra="allow")
    id: int
    created_at_s: float
    fleetplan_plan_version: int | str
    name: str
    status: str
    cost_usd_per_day: float | None
    replicas: list[dict[str, Any]]
    shared_gpus: list[dict[str, Any]]
    windows: list[dict[str, Any]]
    online: OnlineBlock


class PlanSummary(BaseModel):
    """One stored plan without its body."""

    id: int
    created_at_s: float
    at_s: float
    window: int
    reason: str
    cost_usd_per_hour: float
    migrations: int
    valid: bool
    summary: dict[str, Any]


class PlanList(BaseModel):
    """Plans adopted since a time, oldest first."""

    plans: list[PlanSummary]


class ReplanResponse(BaseModel):
    """The outcome of POST /v1/replan: whether a plan was adopted, the current plan and its diff."""

    adopted: bool
    message: str
    plan_id: int
    summary: dict[str, Any]
    cost_usd_per_hour: float
    diff: PlanDiff
    prometheus: str | None = Field(None, description="outcome of the Prometheus pull, when one is configured")


class Health(BaseModel):
    """Liveness: the process answers; ``loop`` is 'running', 'stopped' (503) or 'off' (rounds on request only);
    ``role`` 'leader' or 'standby' (:mod:`fleetplan.service.leader`). It says nothing of the database: see /readyz."""

    status: Literal["ok", "loop stopped"]
    loop: Literal["running", "stopped", "off"]
    plan_id: int | None
    resumed: bool
    role: Literal["leader", "standby"]


class Readiness(BaseModel):
    """Readiness: each check and, for a failed one, why."""

    status: Literal["ready", "not ready"]
    checks: dict[str, bool]
    detail: dict[str, str]
    last_success_age_s: float
    plan_id: int | None
    role: Literal["leader", "standby"]


def codes(*codes: int) -> dict:
    text = {401: "missing or wrong bearer token", 404: "no plan yet", 409: "conflict (see detail)",
            413: "request body too large",
            429: "busy: the write queue is full or a re-solve runs; retry after the Retry-After header's seconds",
            503: "database unavailable, or this replica is a standby and the request needs the leader (see detail); "
                 "retry after the Retry-After header's seconds"}
    out: dict[int | str, dict] = {}
    for code in codes:
        if code == 422:
            out[422] = {"model": ValidationErrorResponse, "description": "invalid request; the field is named"}
        elif code == 429:
            out[429] = {"model": ErrorResponse, "description": text[code],
                        "headers": {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}}}
        else:
            out[code] = {"model": ErrorResponse, "description": text[code]}
    return out


class LeaderInfo(BaseModel):
    """Who leads (:mod:`fleetplan.service.leader`): this replica's role and name, the lease's holder and epoch as
    stored, and in how many seconds the lease expires unless renewed (negative: expired; a standby takes over)."""

    role: Literal["leader", "standby"]
    replica: str
    leader: str | None
    epoch: int | None
    expires_in_s: float | None
