"""The re-planner service's HTTP API (FastAPI TestClient, SQLite file store): auth, validation, body limits, plans,
diffs, metrics, resume from the store, the Prometheus pull and the CLI's token rule."""

from __future__ import annotations

import json
import warnings

import httpx
import pytest
from click.testing import CliRunner
from service_support import AUTH, T0, TOKEN, Clock

from fleetplan.cli.main import main
from fleetplan.errors import InputError
from fleetplan.placement.validate import validate
from fleetplan.service.app import create_app
from fleetplan.service.prometheus import match_model, pull_observations
from fleetplan.service.runtime import ReplanService, ServiceSettings
from fleetplan.service.store import Store, normalize_url

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette asks for httpx2, a package not needed here
    from fastapi.testclient import TestClient



def make(shipped, db, *, token=TOKEN, clock=None, **kw):
    problem, loads = shipped
    s = ServiceSettings(db_url=db, token=token, insecure_no_auth=token is None, interval_s=0, resolve_every_s=0, **kw)
    svc = ReplanService(s, problem, loads, clock=clock or Clock())
    return TestClient(create_app(s, svc, background=False)), svc


def obs(model="Llama-3.1-8B", **kw):
    d = {"model": model, "interval_s": 60.0, "arrivals": 60.0}
    d.update(kw)
    return d


def test_writes_need_the_token_reads_do_not(shipped, tmp_path):
    client, _ = make(shipped, f"sqlite:///{tmp_path / 'a.db'}")
    with client as c:
        body = {"observations": [obs()]}
        assert c.post("/v1/observations", json=body).status_code == 401
        assert c.post("/v1/observations", json=body, headers={"Authorization": "Bearer wrong-token"}).status_code == 401
        assert c.post("/v1/replan").status_code == 401
        r = c.post("/v1/observations", json=body, headers=AUTH)
        assert r.status_code == 202 and r.json()["accepted"] == 1
        assert c.get("/v1/plan").status_code == 200 and c.get("/healthz").json()["status"] == "ok"
        assert c.get("/docs").status_code == 200 and "/v1/observations" in c.get("/openapi.json").json()["paths"]
    with pytest.raises(InputError, match="insecure-no-auth"):
        ServiceSettings(token=None)
    client, _ = make(shipped, f"sqlite:///{tmp_path / 'b.db'}", token=None)
    with client as c:
        assert c.post("/v1/observations", json={"observations": [obs()]}).status_code == 202


def test_invalid_bodies_get_422_with_the_field_named_and_nothing_stored(shipped, tmp_path):
    client, svc = make(shipped, f"sqlite:///{tmp_path / 'a.db'}")
    with client as c:
        cases = [
            ({"observations": [obs(interval_s=-1)]}, ["body", "observations", 0, "interval_s"]),
            ({"observations": [obs(), obs(model="Llama-3.1-8x")]}, ["body", "observations", 1, "model"]),
            ({"observations": [obs(arrivals=None)]}, ["body", "observations", 0]),
            ({"observations": [obs(colour="red")]}, ["body", "observations", 0, "colour"]),
            ({"observations": []}, ["body", "observations"]),
            ({"obs": []}, ["body", "observations"]),
        ]
        for body, loc in cases:
            r = c.post("/v1/observations", json=body, headers=AUTH)
            assert r.status_code == 422, body
            assert any(d["loc"] == loc for d in r.json()["detail"]), (loc, r.json())
        # Non-finite numbers (1e400 parses as infinity; NaN is accepted by Python's JSON reader) are refused, so
        # one bad sample cannot poison the forecast.
        for raw, field in (('1e400', "arrivals"), ('NaN', "interval_s")):
            body = '{"observations": [{"model": "Llama-3.1-8B", "interval_s": 60, "arrivals": 5}]}'
            body = body.replace('"arrivals": 5', f'"arrivals": {raw}') if field == "arrivals" else body.replace(
                '"interval_s": 60', f'"interval_s": {raw}')
            r = c.post("/v1/observations", content=body, headers={**AUTH, "Content-Type": "application/json"})
            assert r.status_code == 422, (raw, r.text)
            assert any(d["loc"][-1] == field for d in r.json()["detail"])
        r = c.post("/v1/observations", json={"observations": [obs(model="Llama-3.1-8x")]}, headers=AUTH)
        assert "did you mean 'Llama-3.1-8B'" in r.json()["detail"][0]["msg"]
        assert svc.store.count_observations() == 0
        assert c.get("/v1/plans", params={"since": "yesterday"}).status_code == 422


def test_body_size_limit(shipped, tmp_path):
    client, svc = make(shipped, f"sqlite:///{tmp_path / 'a.db'}", max_body_bytes=4096)
    with client as c:
        big = {"observations": [obs(tenant="t" * 150) for _ in range(40)]}  # ~ 40 × 230 bytes > 4096
        assert len(json.dumps(big)) > 4096
        assert c.post("/v1/observations", json=big, headers=AUTH).status_code == 413

        def chunks():  # no Content-Length: counted while read
            data = json.dumps(big).encode()
            for i in range(0, len(data), 1000):
                yield data[i:i + 1000]

        assert c.post("/v1/observations", content=chunks(), headers={**AUTH, "Content-Type": "application/json"}
                      ).status_code == 413
        assert c.post("/v1/observations", json={"observations": [obs()]}, headers=AUTH).status_code == 202
        assert svc.store.count_observations() == 1


def test_burst_replan_plan_diff_history_and_metrics(shipped, tmp_path):
    clock = Clock()
    client, svc = make(shipped, f"sqlite:///{tmp_path / 'a.db'}", clock=clock)
    with client as c:
        first = c.get("/v1/plan").json()
        assert first["id"] == 1 and first["validation"]["ok"] and first["online"]["reason"] == "initial"
        # 1,440 arrivals in 60 s = 24 req/s of Llama-3.1-8B (the default curve has ~1.8 req/s at 20:00)
        r = c.post("/v1/observations", json={"observations": [obs(arrivals=1440.0, at_s=clock.t)]}, headers=AUTH)
        assert r.status_code == 202
        clock.t += 1
        r = c.post("/v1/replan", headers=AUTH)
        assert r.status_code == 200 and r.json()["plan_id"] == 2
        plan = c.get("/v1/plan").json()
        assert plan["validation"]["ok"] and plan["online"]["unmet_req_per_s"]["Llama-3.1-8B"] == 0.0
        cap = sum(x["capacity_req_per_s"] * x["counts"][0] * 0.9 for x in plan["replicas"]
                  if x["model"] == "Llama-3.1-8B")
        assert cap >= 24.0  # met within one round
        diff = c.get("/v1/plan/diff").json()
        assert diff["plan_id"] == 2 and diff["previous_plan_id"] == 1
        starts = sum(a["count"] for a in diff["actions"] if a["action"] == "start")
        assert 0 < starts <= 8 and all(a["model"] == "Llama-3.1-8B" for a in diff["actions"])
        assert all(a["ready_at_s"] > clock.t for a in diff["actions"])  # weights still loading
        hist = c.get("/v1/plans", params={"since": 0}).json()["plans"]
        assert [p["id"] for p in hist] == [1, 2] and hist[1]["migrations"] == starts
        assert c.get("/v1/plans", params={"since": "2999-01-01T00:00:00Z"}).json()["plans"] == []
        m = c.get("/metrics")
        assert m.headers["content-type"].startswith("text/plain")
        text = m.text
        assert "# TYPE fleetplan_plan_cost_usd_per_hour gauge" in text
        assert f"fleetplan_plan_cost_usd_per_hour {plan['online']['cost_usd_per_hour']!r}" in text
        assert 'fleetplan_forecast_req_per_s{model="Llama-3.1-8B"} 24.0' in text
        assert "fleetplan_observations_total 1.0" in text and "fleetplan_rounds_total 1.0" in text
        assert 'fleetplan_replicas_loading{model="Llama-3.1-8B"' in text
        # the stored plan validates against its own one-window problem
        res = svc.replanner.current
        assert validate(res.problem, res.plan).ok


def test_resume_from_the_stored_plan_and_replay_later_observations(shipped, tmp_path):
    db = f"sqlite:///{tmp_path / 'a.db'}"
    clock = Clock()
    client, svc = make(shipped, db, clock=clock)
    with client as c:
        c.post("/v1/observations", json={"observations": [obs(arrivals=600.0, at_s=clock.t)]}, headers=AUTH)
        c.post("/v1/replan", headers=AUTH)
        stored = c.get("/v1/plan").json()
        # acknowledged after the last plan: must be replayed into the forecaster on restart
        c.post("/v1/observations", json={"observations": [obs(model="Qwen2.5-7B", arrivals=900.0, at_s=clock.t)]},
               headers=AUTH)
        fc_before = svc.replanner.forecaster.to_dict()
    client2, svc2 = make(shipped, db, clock=clock)
    with client2 as c:
        assert svc2.resumed and c.get("/healthz").json()["resumed"]
        again = c.get("/v1/plan").json()
        assert again["id"] == stored["id"] and again["replicas"] == stored["replicas"]
        assert svc2.replanner.counts() == svc.replanner.counts()
        assert svc2.replanner.forecaster.to_dict() == fc_before
        assert svc2.store.count_observations() == 2 and svc2.store.count_plans() == 2


def test_prometheus_pull_uses_vllm_names_and_queue_growth(shipped, tmp_path):
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        q = request.url.params["query"]
        seen.append(q)
        values = {"vllm:request_success_total": 600.0, "vllm:num_requests_waiting": 60.0,
                  "vllm:num_requests_running": 0.0, "vllm:prompt_tokens_total": 6e5,
                  "vllm:generation_tokens_total": 1.2e5}
        name = next(k for k in values if k in q)
        result = [{"metric": {"model_name": "meta-llama/Llama-3.1-8B-Instruct"}, "value": [T0, str(values[name])]},
                  {"metric": {"model_name": "some/other-model"}, "value": [T0, "5"]}]
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": result}})

    client = httpx.Client(transport=httpx.MockTransport(handler))
    problem, _ = shipped
    names = [m.name for m in problem.models]
    got, unknown = pull_observations("http://127.0.0.1:9090", 300, T0, names, client=client)
    assert unknown == ["some/other-model"] and len(got) == 1 and got[0]["model"] == "Llama-3.1-8B"
    assert any("increase(vllm:request_success_total[300s])" in q for q in seen)
    _, svc = make(shipped, f"sqlite:///{tmp_path / 'a.db'}")
    svc.observe(got, source="prometheus")
    # demand = (600 completions + 60 queue growth) / 300 s = 2.2 req/s (completions alone: 2.0)
    (row,) = svc.store.observations_after(0)
    assert row["demand_req_per_s"] == pytest.approx(2.2) and row["source"] == "prometheus"
    assert match_model("Qwen/Qwen2.5-7B-Instruct", names) == "Qwen2.5-7B"
    assert match_model("nothing", names) is None
    # `fleetplan export` serves a model under the scenario's name: the default scenario's Mixtral-8x7B (an alias of
    # the catalog's Mixtral-8x7B-v0.1, aliases.csv) is reported under that name and still counted for its model.
    assert match_model("Mixtral-8x7B", names) == "Mixtral-8x7B-v0.1"


def test_store_url_forms(tmp_path):
    assert normalize_url("postgresql://u@127.0.0.1/db") == "postgresql+psycopg://u@127.0.0.1/db"
    assert normalize_url(str(tmp_path / "x.db")).startswith("sqlite:///")
    with pytest.raises(InputError, match="not supported"):
        normalize_url("mysql://x")
    s = Store(str(tmp_path / "x.db"))
    assert s.ping() and s.last_plan() is None and s.add_observations([]) == []


def test_cli_serve_refuses_to_run_without_a_token(tmp_path, monkeypatch):

    monkeypatch.delenv("FLEETPLAN_TOKEN", raising=False)
    r = CliRunner().invoke(main, ["serve", "--db", f"sqlite:///{tmp_path / 'x.db'}"])
    assert r.exit_code == 2 and "insecure-no-auth" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["serve", "--token-file", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "no such token file" in r.output
