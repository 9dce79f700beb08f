"""The HTTP API of ``fleetplan serve`` (FastAPI; OpenAPI at /docs and /openapi.json, a response model and the error
codes for every endpoint).

GET /v1/leader (which replica leads), GET /v1/plan (the current plan), GET /v1/plan/diff (start/stop actions since
the previous plan), GET /v1/plans?since= (plans adopted since a time), POST /v1/observations, DELETE
/v1/observations (by id or time range; rebuilds the forecaster and repairs the fleet), POST /v1/replan (pulls
Prometheus first when configured), GET and POST /v1/inventory (nodes or sites down or back; the fleet is repaired
in the same request), GET /healthz (liveness), GET /readyz (readiness), GET /metrics (Prometheus
text). Write endpoints need ``Authorization: Bearer <token>``
unless the service was started with ``insecure_no_auth``; the per-tenant rates inside GET /v1/plan are shown only
with the write token or the read token. Request bodies above ``max_body_bytes`` get 413; invalid bodies 422 with
the field named in ``detail[].loc`` (never 500: malformed strings included); database faults 503 with the reason.
POST /v1/observations takes an ``Idempotency-Key`` header: a retry with the same key and body stores nothing again.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from fleetplan import __version__
from fleetplan.errors import FleetplanError, InputError
from fleetplan.fileio import DuplicateJsonKey, loads_unique
from fleetplan.service.runtime import Busy, ReplanService, Standby
from fleetplan.service.schemas import (
    Health,
    Inventory,
    InventoryUpdate,
    LeaderInfo,
    ObservationBatch,
    ObservationsAccepted,
    ObservationsDeleted,
    PlanDiff,
    PlanList,
    PlanResponse,
    Readiness,
    ReplanRequest,
    ReplanResponse,
    codes,
)
from fleetplan.service.settings import ServiceSettings
from fleetplan.service.store import IdempotencyConflict

log = logging.getLogger("fleetplan.service")

def duplicate_key(body: bytes) -> list | None:
    """The location (``["body", "observations", 0, "arrivals"]``) of the first key a JSON object of ``body`` gives
    twice, or None (none repeated, or not JSON: the request's own parser then says what is wrong). Python's JSON
    reader keeps the last value silently: ``{"arrivals": 5, "arrivals": 50000}`` would be stored as 50000. The same
    check as every JSON file the CLI reads (:func:`fleetplan.fileio.loads_unique`)."""
    try:
        loads_unique(body)
    except DuplicateJsonKey as exc:
        return ["body", *exc.path]
    except (ValueError, RecursionError):
        return None
    return None


class _BodyLimit:
    """ASGI middleware: reads a request body up to ``max_bytes`` and answers 413 beyond it (by Content-Length
    when given, else by counting the chunks); a JSON body that repeats a key in one object gets 422 naming it."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _reject(self, send) -> None:
        body = json.dumps({"detail": f"request body larger than {self.max_bytes} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await self._reject(send)
        chunks, size, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await self._reject(send)
            chunks.append(chunk)
            more = msg.get("more_body", False)
        data = b"".join(chunks)
        headers = dict(scope["headers"])
        where = duplicate_key(data) if data and _is_json(headers.get(b"content-type", b"").decode("latin-1")) else None
        if where is not None:
            body = json.dumps(_safe({"detail": [{"loc": where, "type": "duplicate_key", "msg": (
                f"key {where[-1]!r} is given twice in one JSON object; a JSON reader would keep one of them "
                "silently: send it once")}]})).encode()
            await send({"type": "http.response.start", "status": 422, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


def _parse_since(since: str) -> float:
    try:
        t = float(since)
    except ValueError:
        try:
            t = datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise InputError("since must be unix seconds or an ISO 8601 time such as 2025-01-31T12:00:00Z",
                             field="since") from None
    if not math.isfinite(t):
        raise InputError("since must be a finite time", field="since")
    return t


def _safe(v):
    """A JSON-safe copy of an error detail: non-finite floats as text, strings with lone surrogates repaired."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, str):
        return v.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(v, dict):
        return {_safe(k): _safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_safe(x) for x in v]
    if v is None or isinstance(v, bool | int | float):
        return v
    return _safe(str(v))


def _err422(loc: list, exc: Exception) -> JSONResponse:
    return JSONResponse(status_code=422, content=_safe({"detail": [{"loc": loc, "msg": str(exc),
                                                                    "type": "value_error"}]}))


def _loc(field: str | None) -> list:
    loc: list = ["body"]
    for part in (field or "observations").replace("]", "").split("."):
        name, _, idx = part.partition("[")
        loc.append(name)
        if idx:
            loc.append(int(idx))
    return loc


#: longest ``input`` echoed in a 422 (as JSON text); a longer one is cut, so a refused 1 MB body is not sent back
ECHO_MAX_CHARS = 500
#: query parameters that are unix times (a NaN or infinity is refused as not a time)
_TIME_QUERIES = ("from_s", "to_s")


def _capped(item: dict) -> dict:
    """A validation error item whose ``input`` is at most ECHO_MAX_CHARS characters of JSON (else cut, as text)."""
    if "input" not in item:
        return item
    text = json.dumps(item["input"], ensure_ascii=False)
    if len(text) <= ECHO_MAX_CHARS:
        return item
    return {**item, "input": f"{text[:ECHO_MAX_CHARS]}... ({len(text):,} characters; cut)"}


def _is_json(content_type: str | None) -> bool:
    """Whether FastAPI parses a body of this Content-Type as JSON (application/json or a +json type)."""
    media = (content_type or "").split(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _explained(item: dict) -> dict:
    """A validation error item with a message a user can act on where pydantic's is misleading."""
    loc = item.get("loc") or []
    if item.get("type") == "finite_number" and len(loc) == 2 and loc[0] == "query" and loc[1] in _TIME_QUERIES:
        return {**item, "msg": f"{loc[1]}={item.get('input')} is not a time: give unix seconds from 0 to 1e11"}
    return item


def _redacted(body: dict) -> dict:
    """The plan body without per-tenant rates (the forecaster's per-tenant EWMA and newest rates)."""
    online = dict(body["online"])
    state = dict(online["state"])
    fc = {k: v for k, v in state.get("forecaster", {}).items() if k not in ("ewma", "latest")}
    fc["tenants"] = "redacted: send the token to see per-tenant rates"
    state["forecaster"] = fc
    online["state"] = state
    return {**body, "online": online}


def _install_error_handlers(app: FastAPI) -> None:
    """Every refused request gets a documented status and a JSON body that names what is wrong (never a 500)."""

    @app.exception_handler(RequestValidationError)
    async def _invalid_body(request, exc: RequestValidationError):
        """422 with the field named; the offending input is echoed only in a JSON-safe form (an infinity, a NaN or
        a lone surrogate would make the error response itself unserializable)."""
        raw = list(exc.errors())
        ct = request.headers.get("content-type")
        if not _is_json(ct) and any((e.get("loc") or ("",))[0] == "body" for e in raw):
            # FastAPI reads a body without a JSON Content-Type as bytes, and pydantic then says "Input should be a
            # valid dictionary": the fix is the header, not the body
            return JSONResponse(status_code=422, content={"detail": [{
                "loc": ["body"], "type": "content_type",
                "msg": _safe(f"send the body as JSON with the header Content-Type: application/json (got "
                             f"{repr(ct) if ct else 'no Content-Type'})")}]})
        errors = jsonable_encoder(_safe(raw), custom_encoder={
            float: lambda f: f if math.isfinite(f) else str(f), bytes: lambda b: b.decode("utf-8", "replace")})
        return JSONResponse(status_code=422, content={"detail": _safe([_capped(_explained(e)) for e in errors])})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, exc: StarletteHTTPException):
        """A body FastAPI cannot parse (bytes that are not UTF-8, say) is an invalid request like any other: 422
        naming the body, not an undocumented 400."""
        if exc.status_code == 400:
            return JSONResponse(status_code=422, content={"detail": [
                {"loc": ["body"], "msg": _safe(str(exc.detail)), "type": "body_unparsable"}]})
        return await http_exception_handler(request, exc)

    @app.exception_handler(SQLAlchemyError)
    async def _database_down(request, exc: SQLAlchemyError):
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:300] if str(exc) else "error"
        log.error("database error on %s %s: %s", request.method, request.url.path, reason)
        return JSONResponse(status_code=503, content={"detail": _safe(f"database unavailable: {reason}")},
                            headers={"Retry-After": "5"})

    @app.exception_handler(Standby)
    async def _standby(request, exc: Standby):
        return JSONResponse(status_code=503, content={"detail": _safe(str(exc))}, headers={"Retry-After": "1"})

    @app.exception_handler(Busy)
    async def _busy(request, exc: Busy):
        return JSONResponse(status_code=429, content={"detail": _safe(str(exc))},
                            headers={"Retry-After": str(int(math.ceil(exc.retry_after_s)))})



class Auth:
    """The bearer-token checks of one app: ``write`` (a dependency: 401 unless the write token is given) and
    ``reader`` (True when the request may see per-tenant rates; 401 for a token that is given but wrong)."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.token, self.read_token = settings.secret("token"), settings.secret("read_token")
        bearer = HTTPBearer(auto_error=False)
        self.write = Depends(self._require(bearer))
        self.reader = Depends(self._reader(bearer))

    @staticmethod
    def _matches(creds: HTTPAuthorizationCredentials | None, token: str | None) -> bool:
        return (creds is not None and token is not None
                and hmac.compare_digest(creds.credentials.encode("utf-8", "replace"), token.encode()))

    def _require(self, bearer: HTTPBearer):
        def require_token(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:  # noqa: B008
            if self.token is not None and not self._matches(creds, self.token):
                raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
        return require_token

    def _reader(self, bearer: HTTPBearer):
        def reader(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> bool:  # noqa: B008
            if self.token is None:
                return True
            if creds is None:
                return False
            if self._matches(creds, self.token) or self._matches(creds, self.read_token):
                return True
            raise HTTPException(401, "wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
        return reader


def health_routes(svc: ReplanService) -> APIRouter:
    """GET /healthz (liveness) and GET /readyz (readiness)."""
    router = APIRouter()

    @router.get("/healthz", response_model=Health, responses=codes(503))
    def healthz():
        """Liveness: 200 while the process answers and its re-plan loop (when started) runs; 503 when the loop
        has stopped. Database faults are reported by /readyz."""
        loop = svc.loop_state()
        row = svc.plan_row
        body = {"status": "ok" if loop != "stopped" else "loop stopped", "loop": loop,
                "plan_id": row["id"] if row else None, "resumed": svc.resumed, "role": svc.role}
        return JSONResponse(body, status_code=200 if loop != "stopped" else 503)

    @router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness, "description": "not ready"}})
    def readyz():
        """Readiness: the database accepts a write, the last committed plan is younger than three intervals,
        and the loop is alive (each when it applies); 503 with the failed checks otherwise."""
        ok, body = svc.readiness()
        return JSONResponse(_safe(body), status_code=200 if ok else 503)

    return router


def leader_routes(svc: ReplanService) -> APIRouter:
    """GET /v1/leader: which replica leads, from the lease row."""
    router = APIRouter()

    @router.get("/v1/leader", response_model=LeaderInfo, responses=codes(503))
    def leader():
        """This replica's role and the lease as stored (its holder leads; ``expires_in_s`` below 0: it expired and
        a standby takes over at its next look, within a second)."""
        return {"role": svc.role, "replica": svc.lease.holder, **svc.lease.look()}

    return router


def plan_routes(svc: ReplanService, auth: Auth) -> APIRouter:
    """GET /v1/plan, GET /v1/plan/diff and GET /v1/plans: reads (never queued behind writes)."""
    router = APIRouter()
    reader_dep = auth.reader

    @router.get("/v1/plan", response_model=PlanResponse, responses=codes(401, 404))
    def get_plan(full: bool = reader_dep):
        """The current plan. Per-tenant rates (``online.state.forecaster``) only with the token or read token."""
        row = svc.plan_row
        if row is None:
            raise HTTPException(404, "no plan yet")
        body = row["body"] if full else _redacted(row["body"])
        return JSONResponse({"id": row["id"], "created_at_s": row["created_at_s"], **body})

    @router.get("/v1/plan/diff", response_model=PlanDiff, responses=codes(404))
    def get_diff():
        """The start/stop actions between the previous stored plan and the current one."""
        pub = svc.published
        if pub is None:
            raise HTTPException(404, "no plan yet")
        return JSONResponse(pub.diff)

    @router.get("/v1/plans", response_model=PlanList, responses=codes(422, 503))
    def list_plans(since: str = Query("0", max_length=64, description="unix seconds or ISO 8601 time"),
                   limit: int = Query(100, ge=1, le=1000)):
        """Plans adopted at or after ``since``, oldest first (at most ``limit``)."""
        try:
            t = _parse_since(since)
        except InputError as exc:
            return _err422(["query", "since"], exc)
        rows = svc.store.plans_since(t, limit)
        return {"plans": [{k: r[k] for k in ("id", "created_at_s", "at_s", "window", "reason", "cost_usd_per_hour",
                                             "migrations", "valid", "summary")} for r in rows]}

    return router


def observation_routes(svc: ReplanService, settings: ServiceSettings, auth: Auth) -> APIRouter:
    """POST /v1/observations and DELETE /v1/observations (write token; admitted through the write queue)."""
    router = APIRouter()

    @router.post("/v1/observations", status_code=202, response_model=ObservationsAccepted,
              dependencies=[auth.write], responses=codes(401, 409, 413, 422, 429, 503))
    def post_observations(batch: ObservationBatch, idempotency_key: Annotated[str | None, Header(
            alias="Idempotency-Key", min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$",
            description="a retry with the same key and body stores nothing again (kept a day)")] = None):
        """Store observations (committed before the answer) and feed them to the forecaster."""
        if len(batch.observations) > settings.max_observations_per_request:
            return _err422(["body", "observations"], InputError(
                f"at most {settings.max_observations_per_request} observations per request"))
        try:
            with svc.admission():
                ids, replayed = svc.observe_once([o.model_dump() for o in batch.observations],
                                                 idempotency_key=idempotency_key)
        except InputError as exc:
            return _err422(_loc(exc.field), exc)
        except IdempotencyConflict as exc:
            raise HTTPException(409, str(exc)) from None
        headers = {"Idempotent-Replayed": "true"} if replayed else {}
        return JSONResponse({"accepted": len(ids), "ids": ids}, status_code=202, headers=headers)

    @router.delete("/v1/observations", response_model=ObservationsDeleted, dependencies=[auth.write],
                responses=codes(401, 409, 413, 422, 429, 503))
    def delete_observations(
            ids: str | None = Query(None, max_length=10_000, pattern=r"^[0-9]{1,18}(,[0-9]{1,18})*$",
                                    description="comma-separated observation ids"),
            from_s: float | None = Query(None, ge=0, le=1e11, allow_inf_nan=False,
                                         description="delete observations with at_s >= this"),
            to_s: float | None = Query(None, ge=0, le=1e11, allow_inf_nan=False,
                                       description="... and at_s <= this (unix s; not before from_s)")):
        """Delete the observations that match every filter given (ids, at_s >= from_s, at_s <= to_s) and rebuild
        the forecaster from those that remain (stored as a new plan with the placement unchanged, in the same
        transaction as the delete, so a restart never replays them)."""
        if ids is None and from_s is None and to_s is None:
            return _err422(["query", "ids"], InputError("give ids, or from_s and/or to_s"))
        if from_s is not None and to_s is not None and to_s < from_s:
            return _err422(["query", "to_s"], InputError(
                f"to_s={to_s:g} is before from_s={from_s:g}: the range is empty; give from_s <= to_s"))
        id_list = [int(x) for x in ids.split(",")] if ids is not None else None
        try:
            with svc.admission():
                return svc.delete_observations(ids=id_list, from_s=from_s, to_s=to_s)
        except (Busy, Standby):
            raise
        except FleetplanError as exc:
            raise HTTPException(409, str(exc)) from None

    return router


def replan_routes(svc: ReplanService, auth: Auth) -> APIRouter:
    """POST /v1/replan: a heuristic round or a full re-solve (one at a time) on the leader."""
    router = APIRouter()

    @router.post("/v1/replan", response_model=ReplanResponse, dependencies=[auth.write],
              responses=codes(401, 409, 413, 422, 429, 503))
    def post_replan(req: ReplanRequest | None = None):
        """Pull Prometheus (when configured, whatever the interval), then run a heuristic round, or a full
        re-solve with ``full``; 409 when the round's plan is refused."""
        req = req or ReplanRequest()
        pulled = svc.try_pull_prometheus()
        try:
            if req.full:  # one at a time: 429 while another runs
                adopted, msg = svc.resolve(req.time_limit_s)
            else:
                with svc.admission():
                    svc.replan()
                adopted, msg = True, "heuristic round adopted"
        except (Busy, Standby):
            raise
        except FleetplanError as exc:
            raise HTTPException(409, str(exc)) from None
        pub = svc.published
        if pub is None:
            raise HTTPException(503, "no plan is published yet; retry when /readyz answers 200")
        row = pub.row
        return {"adopted": adopted, "message": msg, "plan_id": row["id"], "summary": row["summary"],
                "cost_usd_per_hour": row["cost_usd_per_hour"], "diff": pub.diff, "prometheus": pulled}

    return router


def inventory_routes(svc: ReplanService, auth: Auth) -> APIRouter:
    """GET /v1/inventory (the pools as the fleet stands) and POST /v1/inventory (nodes or sites down or back: the
    fleet is repaired in the same request, on the leader)."""
    router = APIRouter()

    @router.get("/v1/inventory", response_model=Inventory)
    def get_inventory():
        """Every pool: its nodes, the indices reported down, and the GPUs usable now."""
        return {"pools": svc.inventory()}

    @router.post("/v1/inventory", response_model=Inventory, dependencies=[auth.write],
                 responses=codes(401, 413, 422, 429, 503))
    def post_inventory(update: InventoryUpdate):
        """Mark nodes of pools (or whole sites) unavailable or back. Replicas on nodes that go down stop serving
        at once; the re-planner replaces them in the same request (not limited by the migration budget) and
        commits the plan before answering."""
        try:
            _check_pools(svc, update)
            out = svc.set_inventory({p.pool: list(p.nodes_down) for p in update.pools},
                                    {s.site: s.up for s in update.sites})
        except (Busy, Standby):
            raise
        except InputError as exc:
            return _err422(_loc(exc.field), exc)
        return {"pools": svc.inventory(), **out}

    return router


def _check_pools(svc: ReplanService, update: InventoryUpdate) -> None:
    """InputError at the request's own field (``pools[i].pool``, ``pools[i].nodes_down``) for a pool the service's
    scenario lacks (listing its pools: they are named SITE/catalog GPU, e.g. aws:us-east-1/H100-SXM-80GB) or a node
    index beyond the pool's nodes; the re-planner checks the same, but cannot name the request's entry."""
    pools = svc.problem.pool_by_id
    for i, p in enumerate(update.pools):
        pool = pools.get(p.pool)
        if pool is None:
            raise InputError(f"unknown pool {p.pool!r}: pools are named SITE/GPU by the catalog GPU name; known pools: "
                             f"{', '.join(sorted(pools))}", field=f"pools[{i}].pool", value=p.pool)
        bad = [n for n in p.nodes_down if n >= pool.nodes]
        if bad:
            raise InputError(f"pool {p.pool} has nodes 0..{pool.nodes - 1}; node {bad[0]} is not one of them",
                             field=f"pools[{i}].nodes_down", value=bad[0])


def metrics_routes(svc: ReplanService) -> APIRouter:
    """GET /metrics: Prometheus text (from memory only)."""
    router = APIRouter()

    @router.get("/metrics", response_class=PlainTextResponse,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text exposition format 0.0.4"}})
    def metrics():
        """The current plan, forecasts and the service's counters in Prometheus text format (never waits on the
        database)."""
        return PlainTextResponse(svc.metrics_text(), media_type="text/plain; version=0.0.4")

    return router


def create_app(settings: ServiceSettings, service: ReplanService | None = None, *, background: bool = True) -> FastAPI:
    """The FastAPI app over a :class:`ReplanService` (made from ``settings`` when not given).

    ``background`` starts the periodic re-plan loop with the app (tests drive rounds with POST /v1/replan).
    Raises InputError for settings the service cannot start with (the database, the scenario).
    """
    svc = service or ReplanService(settings)

    @asynccontextmanager
    async def lifespan(_app):
        if background:
            svc.start_background()
        yield
        svc.close()

    app = FastAPI(title="fleetplan re-planner", version=__version__, lifespan=lifespan,
                  description="Keeps a live plan for an LLM-serving GPU fleet and revises it as load changes.")
    app.state.service = svc
    app.add_middleware(_BodyLimit, max_bytes=settings.max_body_bytes)
    _install_error_handlers(app)
    auth = Auth(settings)
    for router in (health_routes(svc), leader_routes(svc), plan_routes(svc, auth),
                   observation_routes(svc, settings, auth), replan_routes(svc, auth), inventory_routes(svc, auth),
                   metrics_routes(svc)):
        app.include_router(router)
    return app
