"""Measured performance profiles named by a scenario (``models[].profiles``) or on the command line (``--profile``),
read into :class:`~fleetplan.costmodels.profile_capacity.MeasuredProfile` records keyed by (model, GPU, tp).
"""

from __future__ import annotations

import copy
from pathlib import Path

from fleetplan.costmodels.latency import TP_DEGREES
from fleetplan.costmodels.profile_capacity import PROFILE_FORMATS, MeasuredProfile
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.profiles import load_profile, profile_files
from fleetplan.errors import FleetplanError, InputError, UnknownNameError
from fleetplan.scenario.read import (
    Scenario,
    scenario_catalog_file,
    scenario_from_raw,
    scenario_model,
    scenario_models,
    scenario_spec,
)


def scenario_profiles(scenario: Scenario) -> dict[str, dict[tuple[str, int], MeasuredProfile]]:
    """The measured profiles the scenario's models name (``models[].profiles``), read once:
    {catalog model name: {(catalog GPU name, tp): MeasuredProfile}}. The planner (:func:`build_problem`) and the
    simulator (:mod:`fleetplan.simulator.replay`) both take their capacity source from here.

    Raises InputError naming the entry for an unreadable file or two profiles of one (GPU, tp), UnknownNameError
    for an unknown GPU.
    """
    spec = scenario_spec(scenario)
    base = Path(scenario.base_dir) if scenario.base_dir else None
    out: dict[str, dict[tuple[str, int], MeasuredProfile]] = {}
    for i, m in enumerate(spec.models):
        if not m.profiles:
            continue
        model = scenario_model(m, f"{scenario.source}: models[{i}]", base, scenario_catalog_file(scenario, "models"))
        got = out.setdefault(model.name, {})
        for j, ps in enumerate(m.profiles):
            where = f"{scenario.source}: models[{i}].profiles[{j}]"
            try:
                gpu = get_gpu(ps.gpu, scenario_catalog_file(scenario, "gpus"))
                files = [f for pattern in ps.files for f in profile_files(pattern, base)]
                prof = load_profile(files, ps.format, tp=ps.tp, model=model.name, gpu=gpu.name,
                                    source=", ".join(ps.files))
            except FleetplanError as exc:
                raise InputError(str(exc), source=where, field="profiles") from None
            if (gpu.name, ps.tp) in got:
                raise InputError(f"two profiles of {model.name} on {gpu.name} tp {ps.tp}; give one (several "
                                 "vllm bench serve runs go in one entry's file list)", source=where, field="gpu",
                                 value=ps.gpu)
            got[(gpu.name, ps.tp)] = prof
    return out


def parse_profile_option(text: str) -> tuple[str, str, int, str | None, str]:
    """Parse ``fleetplan plan --profile MODEL@GPU[:tpN][:FORMAT]=FILE`` into (model, gpu, tp, format or None, file
    pattern). Raises InputError with the expected form."""
    form = ("give MODEL@GPU[:tpN][:FORMAT]=FILE, e.g. Llama-3.1-8B@H100:tp1=bench/*.json or "
            "Llama-3.1-8B@A100:tp2:guidellm=report.json")
    head, eq, file = text.partition("=")
    model, at, rest = head.partition("@")
    if not (eq and at and model.strip() and rest.strip() and file.strip()):
        raise InputError(f"--profile {text!r}: {form}", field="--profile", value=text)
    gpu, *mods = rest.split(":")
    tp, fmt = 1, None
    for mod in mods:
        if mod.startswith("tp") and mod[2:].isdigit():
            tp = int(mod[2:])
            if tp not in TP_DEGREES:
                raise InputError(f"--profile {text!r}: tp{tp} is not a tensor-parallel degree; give tp "
                                 f"{', '.join(map(str, TP_DEGREES))}", field="--profile", value=text)
        elif mod in PROFILE_FORMATS:
            fmt = mod
        else:
            raise InputError(f"--profile {text!r}: {mod!r} is neither tpN nor a format ({', '.join(PROFILE_FORMATS)}); "
                             f"{form}", field="--profile", value=text)
    return model.strip(), gpu.strip(), tp, fmt, file.strip()


def with_profiles(scenario: Scenario, options: list[str]) -> Scenario:
    """``scenario`` with the ``--profile`` options added to its models' ``profiles`` keys (file paths made
    absolute: they are relative to the working directory, not to the scenario). The raw mapping changes too, so a
    plan file embeds the profiles and its replay uses the same source. Raises InputError for a malformed option,
    UnknownNameError for a model the scenario does not have."""
    if not options:
        return scenario
    raw = copy.deepcopy(scenario.raw)
    spec = scenario_spec(scenario)
    models_file = scenario_catalog_file(scenario, "models")
    names = list(scenario_models(scenario))
    for text in options:
        model, gpu, tp, fmt, file = parse_profile_option(text)
        want = model if model in names else get_model(model, models_file).name
        if want not in names:
            raise UnknownNameError("scenario model", model, [m.name for m in spec.models], field="--profile")
        entry: dict = {"gpu": gpu, "tp": tp, "file": str(Path(file).absolute())}
        if fmt:
            entry["format"] = fmt
        raw["models"][names.index(want)].setdefault("profiles", []).append(entry)
    return scenario_from_raw(raw, source=scenario.source, base=scenario.base_dir,
                             window_length_s=scenario.options["window_length_s"])
