"""A plan file (``fleetplan plan --out plan.json``; read back by simulate, export and serve) as a pydantic model,
so a hand-edited or truncated file is refused with the field path before anything is recomputed. What each field
means and how the derived figures are re-checked: :mod:`fleetplan.outputs.planio`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from fleetplan.costmodels.latency import TpDegree
from fleetplan.fileio import InputModel, input_field

#: Most replicas, instances or committed GPUs one plan-file entry may give per window: a sanity bound (the largest
#: fleets planned have about 20,000 GPUs in all), so a mistyped 10**300 is refused with a short message before any
#: check builds per-GPU lists of that size. ``placement.validate`` also refuses counts beyond the pool's GPUs.
MAX_PLAN_COUNT = 1_000_000


_Count = Annotated[int, Field(ge=0, le=MAX_PLAN_COUNT)]


_Rate = Annotated[float, Field(ge=0)]


class PlanReplicaEntry(InputModel):
    """One option's replica counts per window in a plan file."""

    model: str = input_field(description="model name")
    pool: str = input_field(description="pool id, 'site/GPU'")
    site: str = input_field(description="site of the pool (recomputed and re-checked)")
    gpu: str = input_field(description="GPU type of the pool (recomputed and re-checked)")
    tp: TpDegree = input_field(description="tensor-parallel degree")
    pp: int = input_field(ge=1, le=64, description="pipeline stages")
    capacity_req_per_s: float = input_field(ge=0, description="capacity of one replica (recomputed, re-checked)")
    capacity_source: str = input_field(description="where the capacity came from (recomputed, re-checked)")
    counts: list[_Count] = input_field(description="replicas per window, whole numbers >= 0",
                                       fix="give whole numbers >= 0 of replicas, one per window, no more "
                                           "than the pool's GPUs")
    capacity_error: dict | None = input_field(None, description="the capacity's expected error {relative, basis} "
                                              "(not re-checked)")
    class_capacity_req_per_s: dict[str, float] | None = input_field(None, description="capacity per request "
                                                                     "class (recomputed, re-checked)")
    engine: dict[str, str | int | float | bool | dict[str, str | int | float | None] | None] | None = input_field(
        None, description="the serving engine the capacity assumes: mode, version, max_num_batched_tokens, "
        "max_num_seqs, prefix_caching, prefix_hit_rate, speculative (recomputed)")


class PlanSharedEntry(InputModel):
    """One shared GPU of a plan file: the models packed on it and what each serves per window."""

    pool: str = input_field(description="pool id, 'site/GPU'")
    site: str = input_field(description="site of the pool (recomputed and re-checked)")
    gpu: str = input_field(description="GPU type of the pool (recomputed and re-checked)")
    models: list[str] = input_field(min_length=1, description="models sharing the GPU")
    served_req_per_s: dict[str, list[_Rate]] = input_field(description="req/s each model is served per window")
    capacity_req_per_s: dict[str, float] | None = input_field(
        None, description="req/s the GPU serves of each model alone (recomputed and re-checked; absent in files "
        "written before it was added)")
    load_share: list[float] | None = input_field(
        None, description="per window the share of the GPU's compute its load takes (recomputed and re-checked; "
        "absent in files written before it was added)")
    capacity_source: dict[str, str] = input_field(description="where each capacity came from (re-checked)")
    capacity_error: dict[str, dict] | None = input_field(None, description="each model's capacity error {relative, "
                                                         "basis} (not re-checked)")


class PlanCommitmentEntry(InputModel):
    """One committed pool's commitment in a plan file: the GPUs committed are read; the rest is recomputed."""

    pool: str = input_field(description="committed pool id")
    gpus: _Count = input_field(description="GPUs committed for the whole horizon, a whole number >= 0",
                               fix="give a whole number >= 0 of GPUs, no more than the pool's")
    deployed_share: float | None = input_field(None, description="share of the committed GPU-hours with a replica "
                                               "deployed, whatever its load (re-checked)")
    load_share: float | None = input_field(None, description="share of the committed GPU-hours busy with load: "
                                           "the figure to compare with the break-even (re-checked)")
    committed_usd_per_gpu_hour: float = input_field(description="committed rate (re-checked)")
    committed_price_source: str = input_field(description="where the committed rate came from (re-checked)")
    on_demand_usd_per_gpu_hour: float | None = input_field(None, description="on-demand rate (re-checked)")
    on_demand_price_source: str | None = input_field(None, description="where it came from (re-checked)")
    break_even_utilization: float | None = input_field(None, description="committed / on-demand rate (re-checked)")


class PlanPdEntry(InputModel):
    """One prefill or decode option's replica counts per window in a (disaggregated) plan file."""

    model: str = input_field(description="model name")
    role: Literal["prefill", "decode"] = input_field(description="prefill or decode")
    pool: str = input_field(description="pool id")
    site: str = input_field(description="site of the pool (re-checked)")
    gpu: str = input_field(description="GPU type of the pool (re-checked)")
    tp: TpDegree = input_field(description="tensor-parallel degree")
    decode_site: str = input_field(description="a prefill option's decode site ('' for a decode option)")
    capacity_req_per_s: float = input_field(ge=0, description="capacity of one instance (re-checked)")
    kv_transfer_s: float = input_field(ge=0, description="KV transfer time added to TTFT (re-checked)")
    capacity_source: str = input_field(description="where the capacity came from (re-checked)")
    counts: list[_Count] = input_field(description="instances per window, whole numbers >= 0",
                                       fix="give whole numbers >= 0 of instances, one per window, no more "
                                           "than the pool's GPUs")


class PlanKvFlowEntry(InputModel):
    """The req/s of one model prefilled at one site and decoded at another (or the same) per window."""

    model: str = input_field(description="model name")
    prefill_site: str = input_field(description="where the prefill runs")
    decode_site: str = input_field(description="where the decode runs")
    route_class: str = input_field(description="egress route class (re-checked)")
    link: str = input_field(description="the link the KV cache crosses (re-checked)")
    req_per_s: list[_Rate] = input_field(description="req/s per window")
    kv_gb_per_day: float = input_field(ge=0, description="KV cache GB a day (re-checked)")
    prompt_gb_per_day: float = input_field(ge=0, description="prompt GB a day (re-checked)")


class PlanScenarioEntry(InputModel):
    """The scenario a plan file embeds (the plan is re-validated against it)."""

    name: str = input_field(description="scenario name")
    source: str = input_field(description="the scenario file the plan was made from")
    base: str | None = input_field(None, description="folder relative paths of the scenario are resolved against")
    raw: dict = input_field(description="the scenario's mapping, as read")
    window_length_s: float | None = input_field(None, description="window length, seconds")


class PlanFile(InputModel):
    """A plan file (``outputs/planio.py`` describes each field). The reader uses the replicas, the shared GPUs,
    the unserved demand and the embedded scenario; every figure derived from them (costs, GPU-hours, pools, windows,
    validation, ...) is recomputed and must agree with the file; the solver's report (status, bound, gap) and the
    baselines' costs are checked against the recomputed cost (see ``outputs/planio.py``)."""

    fleetplan_plan_version: Literal[1] = input_field(description="plan file format version")
    name: str = input_field(description="scenario name (re-checked)")
    status: str = input_field(description="the solve's status (a placement.status.Status value)")
    backend: str = input_field("", description="solver backend")
    cost_usd_per_day: float | None = input_field(None, description="cost per day (recomputed, re-checked)")
    gpu_hours_per_day: float | None = input_field(None, description="GPU-hours per day (recomputed, re-checked)")
    lower_bound_usd_per_day: float | None = input_field(None, description="the solver's proven lower bound")
    gap: float | None = input_field(None, description="relative optimality gap (as the solver reported it)")
    requested_gap: float | None = input_field(None, ge=0, description="the relative gap the solve was asked for "
                                              "(status optimal: gap <= it; re-checked)")
    solve_time_s: float = input_field(0.0, ge=0, description="solve time, seconds")
    message: str = input_field("", description="the solver's message")
    cost_breakdown_usd_per_day: dict[str, float] | None = input_field(None, description="recomputed, re-checked")
    utilization: dict[str, float] | None = input_field(None, description="recomputed, re-checked")
    window_length_s: float = input_field(gt=0, description="window length, seconds (re-checked)")
    n_windows: int = input_field(ge=1, description="windows (re-checked)")
    pools: list[dict] = input_field(description="pools and their prices (recomputed, re-checked)")
    replicas: list[PlanReplicaEntry] = input_field(description="replica counts per option and window")
    shared_gpus: list[PlanSharedEntry] = input_field(description="shared GPUs")
    windows: list[dict] = input_field(description="per-window figures (recomputed, re-checked)")
    notes: list[str] = input_field([], description="notes of the scenario (re-checked)")
    best_effort: bool = input_field(False, description="demand left unserved (re-checked)")
    unserved_req_per_s: dict[str, list[_Rate]] = input_field({}, description="unserved req/s per model and window")
    commitments: list[PlanCommitmentEntry] | None = input_field(None, description="committed pools: the GPUs "
                                                                "committed (the rest re-checked)")
    prefill_decode: list[PlanPdEntry] | None = input_field(None, description="disaggregated plans: prefill and "
                                                           "decode instances per window")
    kv_flows: list[PlanKvFlowEntry] | None = input_field(None, description="disaggregated plans: req/s per KV "
                                                         "route and window")
    kv_break_even: dict | None = input_field(None, description="the run's break-even KV egress price (not "
                                             "re-checked: it needs a re-solve)")
    arrivals: dict[str, dict] | None = input_field(None, description="models sized for a peak factor × the window "
                                                   "rate (re-checked)")
    arrival_process: list[dict] | None = input_field(None, description="per model the arrival process its capacity "
                                                     "assumes and its trace's burstiness (not re-checked)")
    capacity_margins: list[dict] | None = input_field(None, description="each model-window's margin against its "
                                                      "capacity error (not re-checked)")
    robust: dict | None = input_field(None, description="plan --robust: the derating planned with (the rebuilt "
                                      "problem applies it) and the plain plan's cost")
    suggested_benchmark: dict | None = input_field(None, description="plan --suggest-benchmark's run (not "
                                                   "re-checked)")
    options_not_used: list[dict] | None = input_field(None, description="every option the plan does not use and why "
                                                      "(not re-checked: derived from the build's notes)")
    class_unserved_req_per_s: dict[str, dict[str, list[_Rate]]] | None = input_field(
        None, description="best-effort plans of class models: unserved req/s per class and window")
    verify: dict | None = input_field(None, description="the run's replay verification report (`plan --verify`; "
                                      "not re-checked: it needs replays)")
    baselines: dict[str, dict] | None = input_field(None, description="baseline plans of the run (not re-checked)")
    validation: dict | None = input_field(None, description="the validator's report (recomputed, re-checked)")
    scenario: PlanScenarioEntry | None = input_field(None, description="the embedded scenario (required to read "
                                                     "the plan)")
