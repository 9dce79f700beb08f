"""The HTTP API of ``fleetplan serve`` (FastAPI; OpenAPI at /docs and /openapi.json).

GET /v1/plan (the current plan), GET /v1/plan/diff (start/stop actions since the previous plan),
GET /v1/plans?since= (plans adopted since a time), POST /v1/observations, POST /v1/replan, GET /healthz,
GET /metrics (Prometheus text). Write endpoints need ``Authorization: Bearer <token>`` unless the service was
started with ``insecure_no_auth``. Request bodies above ``max_body_bytes`` get 413; invalid bodies get 422 with
the field named in ``detail[].loc``.
"""

from __future__ import annotations

import hmac
import json
from contextlib import asynccontextmanager
from datetime import datetime

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fleetplan import __version__
from fleetplan.errors import FleetplanError, InputError
from fleetplan.service.runtime import ReplanService, ServiceSettings


class Observation(BaseModel):
    """One interval's counters for one model and tenant. Give ``arrivals``, or ``completions`` with the queue
    sizes at the interval's start and end (demand = completions + queue growth)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str = Field(min_length=1, max_length=200, description="planned model name")
    tenant: str = Field("default", min_length=1, max_length=200)
    interval_s: float = Field(gt=0, le=86400, description="length of the interval, seconds")
    at_s: float | None = Field(None, ge=0, description="unix time of the interval's end (default: receipt)")
    arrivals: float | None = Field(None, ge=0, description="requests that arrived in the interval")
    completions: float | None = Field(None, ge=0, description="requests that finished in the interval")
    waiting_start: float | None = Field(None, ge=0, description="requests waiting at the start")
    waiting_end: float | None = Field(None, ge=0, description="requests waiting at the end")
    running_start: float | None = Field(None, ge=0, description="requests running at the start")
    running_end: float | None = Field(None, ge=0, description="requests running at the end")
    prompt_tokens: float | None = Field(None, ge=0, description="prompt tokens of the interval")
    generation_tokens: float | None = Field(None, ge=0, description="generated tokens of the interval")

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

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    observations: list[Observation] = Field(min_length=1, max_length=1000)


class ReplanRequest(BaseModel):
    """Body of POST /v1/replan: whether to run a full MILP re-solve, and its time limit in seconds."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    full: bool = Field(False, description="run a full MILP re-solve (adopted only if worth its migrations)")
    time_limit_s: float | None = Field(None, gt=0, le=600, description="time limit of the re-solve, seconds")


class _BodyLimit:
    """ASGI middleware: reads a request body up to ``max_bytes`` and answers 413 beyond it (by Content-Length
    when given, else by counting the chunks)."""

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
        return float(since)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise InputError("since must be unix seconds or an ISO 8601 time such as 2025-01-31T12:00:00Z",
                         field="since", value=since) from None


def _err422(loc: list, exc: Exception) -> JSONResponse:
    return JSONResponse(status_code=422, content={"detail": [{"loc": loc, "msg": str(exc), "type": "value_error"}]})


def create_app(settings: ServiceSettings, service: ReplanService | None = None, *, background: bool = True) -> FastAPI:
    """The FastAPI app over a :class:`ReplanService` (made from ``settings`` when not given).

    ``background`` starts the periodic re-plan loop with the app (tests drive rounds with POST /v1/replan).
    Raises InputError for settings without a token and without ``insecure_no_auth``.
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

    @app.exception_handler(RequestValidationError)
    async def _invalid_body(request, exc: RequestValidationError):
        """422 with the field named; the offending input is echoed only when it is JSON-safe (an infinity or NaN
        would make the error response itself unserializable)."""
        import math

        from fastapi.encoders import jsonable_encoder
        from fastapi.responses import JSONResponse

        def safe(v):
            if isinstance(v, float) and not math.isfinite(v):
                return str(v)
            if isinstance(v, dict):
                return {k: safe(x) for k, x in v.items()}
            if isinstance(v, list | tuple):
                return [safe(x) for x in v]
            return v

        return JSONResponse(status_code=422, content={"detail": safe(jsonable_encoder(exc.errors(), custom_encoder={
            float: lambda f: f if math.isfinite(f) else str(f)}))})
    bearer = HTTPBearer(auto_error=False)
    bearer_dep = Depends(bearer)

    def require_token(creds: HTTPAuthorizationCredentials | None = bearer_dep) -> None:
        if settings.token is None:
            return
        if creds is None or not hmac.compare_digest(creds.credentials.encode(), settings.token.encode()):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    @app.get("/healthz")
    def healthz():
        ok = svc.store.ping()
        body = {"status": "ok" if ok else "degraded", "database": "ok" if ok else "unreachable",
                "plan_id": svc.plan_row["id"] if svc.plan_row else None, "resumed": svc.resumed}
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/v1/plan")
    def get_plan():
        row = svc.plan_row
        if row is None:
            raise HTTPException(404, "no plan yet")
        return {"id": row["id"], "created_at_s": row["created_at_s"], **row["body"]}

    @app.get("/v1/plan/diff")
    def get_diff():
        row = svc.plan_row
        d = svc.store.diff_for(row["id"]) if row else None
        if d is None:
            raise HTTPException(404, "no plan yet")
        return d

    @app.get("/v1/plans")
    def list_plans(since: str = Query("0", description="unix seconds or ISO 8601 time"),
                   limit: int = Query(100, ge=1, le=1000)):
        try:
            t = _parse_since(since)
        except InputError as exc:
            return _err422(["query", "since"], exc)
        rows = svc.store.plans_since(t, limit)
        return {"plans": [{k: r[k] for k in ("id", "created_at_s", "at_s", "window", "reason", "cost_usd_per_hour",
                                             "migrations", "valid", "summary")} for r in rows]}

    @app.post("/v1/observations", status_code=202, dependencies=[Depends(require_token)])
    def post_observations(batch: ObservationBatch):
        if len(batch.observations) > settings.max_observations_per_request:
            return _err422(["body", "observations"], InputError(
                f"at most {settings.max_observations_per_request} observations per request"))
        try:
            ids = svc.observe([o.model_dump() for o in batch.observations])
        except InputError as exc:
            field = exc.field or "observations"
            loc = ["body"]
            for part in field.replace("]", "").split("."):
                name, _, idx = part.partition("[")
                loc.append(name)
                if idx:
                    loc.append(int(idx))
            return _err422(loc, exc)
        return {"accepted": len(ids), "ids": ids}

    @app.post("/v1/replan", dependencies=[Depends(require_token)])
    def post_replan(req: ReplanRequest | None = None):
        req = req or ReplanRequest()
        try:
            if req.full:
                adopted, msg = svc.resolve(req.time_limit_s)
            else:
                svc.replan()
                adopted, msg = True, "heuristic round adopted"
        except FleetplanError as exc:
            raise HTTPException(409, str(exc)) from None
        row = svc.plan_row
        return {"adopted": adopted, "message": msg, "plan_id": row["id"], "summary": row["summary"],
                "cost_usd_per_hour": row["cost_usd_per_hour"], "diff": svc.store.diff_for(row["id"])}

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics():
        return PlainTextResponse(svc.metrics_text(), media_type="text/plain; version=0.0.4")

    return app
