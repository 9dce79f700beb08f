"""The one configuration record of ``fleetplan serve`` (:class:`ServiceSettings`) and where it comes from
(:func:`load_settings`): command-line flags, then ``FLEETPLAN_*`` environment variables, then a YAML config file,
then the defaults below, the first that gives a key winning. The service, its tests and the benchmarks build the
same record (directly, or through the loader as the command does).

A config file holds the record's keys (``interval_s: 300``; the re-planner's policy under ``online:``, e.g.
``online: {cooldown_s: 600}``) and, for secrets, ``token_file``, ``read_token_file`` and ``db_url_file`` (files
whose first line is the value); relative file paths in it are relative to its folder. An environment variable is
``FLEETPLAN_`` + the key in capitals (``FLEETPLAN_INTERVAL_S=300``, ``FLEETPLAN_ONLINE__COOLDOWN_S=600``;
``FLEETPLAN_TOKEN``, ``FLEETPLAN_READ_TOKEN``, ``FLEETPLAN_DB_URL``; ``FLEETPLAN_CONFIG`` names the config file);
its value is read as a YAML scalar (``300``, ``true``, ``null``), as text for text keys. A bad value is one error
naming the key, where it came from and the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from fleetplan.costmodels.capacity_cache import CACHE_DIR_ENV
from fleetplan.errors import InputError
from fleetplan.fileio import InputModel, input_error, parse_yaml, read_yaml, yaml12_numbers
from fleetplan.solvers.online.config import OnlineConfig
from fleetplan.solvers.solve import MIN_TIME_LIMIT_S

#: Shortest period of the re-plan loop, seconds. A fresh user's ``--interval 0.001`` ran 1,640 rounds in 15 s and
#: stored 319 MB of plans (about 194 KB each on the default scenario); retention runs every 10 minutes.
MIN_INTERVAL_S = 1.0

#: prefix of the environment variables the loader reads
ENV_PREFIX = "FLEETPLAN_"
#: Prefixes of FLEETPLAN_* variables that are not service settings: the project's own test switches (read by its
#: tests, e.g. FLEETPLAN_TEST_POSTGRES_URL, FLEETPLAN_PACKAGING_TEST), never taken for a misspelled setting.
TEST_SWITCHES = ("FLEETPLAN_TEST_", "FLEETPLAN_PACKAGING_TEST")
#: FLEETPLAN_* variables of every fleetplan command, not of the service alone: the capacity cache's folder.
COMMON_VARIABLES = (CACHE_DIR_ENV,)
#: keys that name a file holding a secret, and the key each one fills (the file's first line)
SECRET_FILES = {"token_file": "token", "read_token_file": "read_token", "db_url_file": "db_url"}

#: keys that are paths of files (in a config file, relative to the file's folder)
PATH_KEYS = ("plan_file", "deploy_file", "kubeconfig", "actuate_log")

_F = Field  # the record's fields below are one per line: Field(default, constraints, description)


class ServiceSettings(InputModel):
    """Settings of ``fleetplan serve`` (frozen). Built directly (tests, benchmarks) or by :func:`load_settings`;
    an invalid value raises InputError naming the key. Units in the names (``_s``: seconds)."""

    model_config = ConfigDict(frozen=True)

    # ---- what and where
    scenario: str | None = _F(None, description="scenario YAML file or shipped name (None: the shipped default)")
    plan_file: str | None = _F(None, description="an offline plan (`fleetplan plan --out plan.json`) to start from "
                               "when the database holds no plan: its replicas of the current window, counted as "
                               "ready (None: a cold-start plan)")
    db_url: str = _F("sqlite:///fleetplan.db", min_length=1, repr=False, description="SQLAlchemy URL "
                     "(sqlite:///file.db or postgresql://user@host/db) or SQLite file path; one with a password "
                     "belongs in db_url_file or FLEETPLAN_DB_URL, not on the command line")
    db_timeout_s: float = _F(30.0, gt=0, le=600, description="longest wait for a database lock or connection "
                             "before a write fails with 503, seconds")
    host: str = _F("127.0.0.1", min_length=1, description="address to listen on (loopback by default)")
    port: int = _F(8080, ge=1, le=65535, description="port to listen on")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = _F("info", description="log level")

    # ---- auth
    token: SecretStr | None = _F(None, description="bearer token of the write endpoints (at least 8 characters); "
                                 "None only with insecure_no_auth")
    read_token: SecretStr | None = _F(None, description="a token that may read per-tenant rates but not write")
    insecure_no_auth: bool = _F(False, description="accept writes without a token (an explicit opt-in)")

    # ---- rounds
    interval_s: float = _F(300.0, ge=0, description="seconds between heuristic rounds, at least 1 (0: only on POST "
                           "/v1/replan)")
    resolve_every_s: float = _F(3600.0, ge=0, description="seconds between full MILP re-solves (0: none)")
    # At least the solvers' own least limit: a smaller one started the service, and every re-solve then failed.
    resolve_time_limit_s: float = _F(30.0, ge=MIN_TIME_LIMIT_S, le=3600, description="time limit of one re-solve, "
                                     "seconds")

    # ---- input limits
    max_body_bytes: int = _F(1_000_000, ge=1024, description="largest request body accepted, bytes (413 above)")
    max_observations_per_request: int = _F(1000, ge=1, le=1000, description="most observations in one POST")
    rate_ceiling_factor: float = _F(10.0, gt=0, description="an observation is refused (422) when the sum over its "
                                    "model's live tenants, measured at one time, would exceed this multiple of "
                                    "what the whole fleet could serve of the model")
    fleet_ceiling_factor: float = _F(10.0, gt=0, description="... or when the observed demand of all models would "
                                     "fill more than this many whole fleets (each model's sum / what the whole "
                                     "fleet could serve of it, added over models)")
    max_clock_skew_s: float = _F(5.0, ge=0, description="how far ahead of the service's clock an observation's at_s "
                                 "may be, seconds (one from the future would hold the forecast)")
    max_observation_age_s: float = _F(1800.0, ge=0, description="how far behind the service's clock an "
                                      "observation's at_s may be, seconds: the forecast's horizon (older ones no "
                                      "longer set the floor)")

    # ---- Prometheus
    prometheus_url: str | None = _F(None, description="Prometheus base URL to pull vLLM metrics from at every round "
                                    "and on POST /v1/replan")
    prometheus_window_s: float | None = _F(None, ge=1, le=86400, description="seconds one pull covers (None: "
                                           "interval_s, or 300 when that is 0)")

    # ---- operation
    max_pending_writes: int = _F(32, ge=1, description="most write requests queued for the write lock at once; one "
                                 "more gets 429 with Retry-After")
    lease_ttl_s: float = _F(15.0, ge=1, le=3600, description="the leader's lease lasts this long without renewal "
                            "(renewed every third of it), seconds: a standby takes over that long after the "
                            "leader died")
    observation_retention_s: float = _F(21600.0, ge=0, description="observations are kept this long, seconds; older "
                                        "ones are folded into the forecaster state stored with the plans and removed "
                                        "(a DELETE can remove only those still kept)")
    plan_retention_s: float = _F(604800.0, ge=0, description="plans and their diffs are kept this long, seconds ...")
    max_plans: int = _F(2016, ge=1, description="... and at most this many (a week of 5-minute rounds); the newest "
                        "always stays")

    # ---- actuation
    actuate: Literal["k8s"] | None = _F(None, description="apply each adopted plan to Kubernetes: patch the replicas "
                                        "of the workloads `fleetplan export k8s` wrote (starts first, stops once "
                                        "they are ready); only the leader acts")
    dry_run: bool = _F(True, description="with actuate: only record what would change (false: patch)")
    deploy_file: str | None = _F(None, description="with actuate: deployment file mapping sites to kubectl contexts "
                                 "and namespaces")
    kubeconfig: str | None = _F(None, description="with actuate: kubeconfig file (default: $KUBECONFIG or "
                                "~/.kube/config)")
    actuate_log: str | None = _F(None, description="with actuate: append every change (JSON lines) to this file")
    ready_timeout_s: float = _F(900.0, ge=1, le=86400, description="with actuate: longest wait for started replicas "
                                "to be ready before stops are deferred, seconds")
    watch_nodes: bool = _F(False, description="with actuate: before every round, count each site's ready GPU nodes "
                           "(nvidia.com/gpu.product) and mark the pools' missing nodes down (as POST /v1/inventory)")

    # ---- policy
    online: OnlineConfig = _F(default_factory=OnlineConfig,
                              description="the re-planner's policy (OnlineConfig: forecast, cooldown, budget, ...)")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise input_error(exc, type(self), data, source="service settings") from None

    @field_validator("interval_s")
    @classmethod
    def _interval(cls, v: float) -> float:
        if 0 < v < MIN_INTERVAL_S:
            raise ValueError(f"{v:g} s is below {MIN_INTERVAL_S:g} s; every round stores a plan (about 200 KB on the "
                             "default scenario), so a sub-second period fills the database by hundreds of MB a "
                             "minute: give seconds (300 = 5 minutes), or 0 for rounds only on POST /v1/replan")
        return v

    @field_validator("online", mode="before")
    @classmethod
    def _online(cls, v: Any) -> Any:
        return online_config(v) if isinstance(v, Mapping) else v

    @model_validator(mode="after")
    def _rules(self) -> ServiceSettings:
        if self.token is None and not self.insecure_no_auth:
            raise ValueError("write endpoints need a bearer token: set FLEETPLAN_TOKEN or give --token-file "
                             "(token_file in a config file), or start with --insecure-no-auth to accept "
                             "unauthenticated writes")
        if self.token is not None and self.insecure_no_auth:
            raise ValueError("give either a token or --insecure-no-auth, not both")
        for name in ("token", "read_token"):
            secret = getattr(self, name)
            if secret is not None and len(secret.get_secret_value()) < 8:
                raise ValueError(f"the {name.replace('_', ' ')} must have at least 8 characters")
        if self.actuate is None and self.watch_nodes:
            raise ValueError("--watch-nodes (config key watch_nodes) goes with --actuate k8s (config key actuate: "
                             "k8s): the nodes are read from the clusters the deployment file names")
        if self.actuate is None and (self.deploy_file or self.kubeconfig or self.actuate_log):
            raise ValueError("--deploy, --kubeconfig and --actuate-log (config keys deploy_file, kubeconfig, "
                             "actuate_log) go with --actuate k8s (config key actuate: k8s)")
        return self

    def secret(self, name: str) -> str | None:
        """The value of secret ``name`` ('token' or 'read_token'), or None."""
        v = getattr(self, name)
        return None if v is None else v.get_secret_value()


def online_config(d: Mapping[str, Any]) -> OnlineConfig:
    """The policy record of a mapping ({OnlineConfig field: value}); InputError naming ``online.<key>`` for an unknown
    key (with the closest known one) or a bad value."""
    known = {f.name for f in dataclasses.fields(OnlineConfig)}
    unknown = sorted(set(d) - known)
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        raise InputError(f"unknown key 'online.{unknown[0]}'" + (f"; did you mean 'online.{close[0]}'?" if close
                                                                  else ""), field=f"online.{unknown[0]}")
    try:
        return OnlineConfig(**d)
    except InputError as exc:
        raise InputError(exc.message, field=f"online.{exc.field}", value=exc.value) from None


def _first_line(path: str, key: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"no such {what} file {p}", source=str(p), field=key)
    lines = p.read_text().strip().splitlines()
    if not lines or not lines[0].strip():
        raise InputError(f"the {what} file is empty", source=str(p), field=key)
    return lines[0].strip()


_WHAT = {"token_file": "token", "read_token_file": "read token", "db_url_file": "database URL"}


def _text_keys() -> set[str]:
    out = set()
    for name, f in ServiceSettings.model_fields.items():
        ann = str(f.annotation)
        if "str" in ann and "float" not in ann and "int" not in ann:
            out.add(name)
    return out | set(SECRET_FILES)


def _env_value(key: str, raw: str, text: bool) -> Any:
    if text:
        return raw
    return yaml12_numbers(parse_yaml(raw, source=f"environment variable {ENV_PREFIX}{key.upper()}"))


def settings_from_env(environ: Mapping[str, str]) -> dict:
    """The record's keys given by ``FLEETPLAN_*`` variables of ``environ`` (module docstring)."""
    out: dict[str, Any] = {}
    text = _text_keys()
    for key in [*ServiceSettings.model_fields, *SECRET_FILES]:
        if key == "online":
            continue
        raw = environ.get(ENV_PREFIX + key.upper())
        if raw is not None and raw != "":
            out[key] = _env_value(key, raw, key in text)
    online: dict[str, Any] = {}
    for f in dataclasses.fields(OnlineConfig):
        raw = environ.get(f"{ENV_PREFIX}ONLINE__{f.name.upper()}")
        if raw is not None and raw != "":
            online[f.name] = _env_value(f"online__{f.name}", raw, f.type in ("str", str))
    if online:
        out["online"] = online
    known = {ENV_PREFIX + k.upper() for k in [*ServiceSettings.model_fields, *SECRET_FILES] if k != "online"}
    known |= {f"{ENV_PREFIX}ONLINE__{f.name.upper()}" for f in dataclasses.fields(OnlineConfig)}
    known.add(ENV_PREFIX + "CONFIG")
    for name in sorted(n for n in environ if n.startswith(ENV_PREFIX) and n not in known
                       and not n.startswith(TEST_SWITCHES) and n not in COMMON_VARIABLES):
        # A variable that is one typo away from a setting (or from a variable of every command) would be ignored
        # silently; one far from every setting may belong to something else.
        if close := difflib.get_close_matches(name, [*known, *COMMON_VARIABLES], n=1, cutoff=0.85):
            raise InputError(f"environment variable {name} is not a setting of fleetplan serve; did you mean "
                             f"{close[0]}?", field=name, value=environ[name])
    return out


def load_settings(flags: Mapping[str, Any] | None = None, *, config_file: str | None = None,
                  environ: Mapping[str, str] | None = None) -> ServiceSettings:
    """The record from ``flags`` ({key: value}, 'online.KEY' for the policy; only what was given), then
    ``environ`` (default os.environ), then ``config_file`` (default $FLEETPLAN_CONFIG), then the defaults. Secrets
    named by ``*_file`` keys are read here. Raises InputError naming the key and its source."""
    environ = os.environ if environ is None else environ
    config_file = config_file or environ.get(ENV_PREFIX + "CONFIG") or None
    layers: list[tuple[str, dict]] = []
    if config_file:
        data = read_yaml(config_file, what="config file")
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise InputError("a config file holds a mapping of keys (interval_s: 300, online: {...})",
                             source=config_file)
        base = Path(config_file).parent
        for key in (*SECRET_FILES, *PATH_KEYS):  # a relative path in the file is relative to the file
            if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
                data[key] = str(base / data[key])
        layers.append((config_file, data))
    layers.append(("environment", settings_from_env(environ)))
    given: dict[str, Any] = {}
    for k, v in (flags or {}).items():
        if v is None:
            continue
        if k.startswith("online."):
            given.setdefault("online", {})[k.split(".", 1)[1]] = v
        else:
            given[k] = v
    layers.append(("flags", given))
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for source, layer in layers:
        for k, v in layer.items():
            if k == "online" and isinstance(v, Mapping) and isinstance(merged.get("online"), Mapping):
                merged["online"] = {**merged["online"], **v}
            else:
                merged[k] = v
            origin[k] = source
    for key, target in SECRET_FILES.items():
        path = merged.pop(key, None)
        if path is None:
            continue
        if target in merged and origin.get(target) == "flags" and origin.get(key) != "flags":
            continue  # a value given on the command line beats a file named elsewhere
        if origin.get(target) == origin.get(key) and target in merged:
            raise InputError(f"give either {target} or {key}, not both", source=origin[key], field=key)
        merged[target] = _first_line(str(path), key, _WHAT[key])
        origin[target] = origin[key]
    try:
        if isinstance(merged.get("online"), Mapping):
            merged["online"] = online_config(merged["online"])
        return ServiceSettings(**merged)
    except InputError as exc:
        key = (exc.field or "").split(".")[0].split("[")[0]
        where = origin.get(key, "service settings")
        if where == "environment":
            where = f"environment variable {ENV_PREFIX}{(exc.field or key).upper().replace('.', '__')}"
        raise InputError(exc.message, source=where, field=exc.field, value=exc.value) from None

