"""The engine record (costmodels/engine.py): defaults from vLLM's get_batch_defaults, validation, flags, LRU hits."""

import pytest
import yaml
from scenario_support import default_with_one_model

from fleetplan.cli.main import main
from fleetplan.costmodels.engine import (
    PREFILL_FIRST,
    VLLM_V1,
    EngineConfig,
    engine_from_mapping,
    lru_block_hit_rate,
    vllm_defaults,
)
from fleetplan.errors import InputError
from fleetplan.export.deployment import workloads
from fleetplan.fileio import validate_input
from fleetplan.outputs.planio import load_plan_file
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario
from fleetplan.scenario.schemas import EngineSchema


def test_vllm_defaults_by_gpu():
    # vLLM 0.10-0.11 EngineArgs.get_batch_defaults, API server: H100 80 GB -> 8192/1024; A100 80 GB is excluded
    # by name -> 2048/256; L4 24 GB -> 2048/256.
    assert vllm_defaults(80, "H100-SXM") == (8192, 1024)
    assert vllm_defaults(80, "A100-80GB") == (2048, 256)
    assert vllm_defaults(24, "L4") == (2048, 256)
    r = VLLM_V1.resolved(80, "H100")
    assert (r.max_num_batched_tokens, r.max_num_seqs) == (8192, 1024)
    # a stated knob is kept
    assert EngineConfig(max_num_batched_tokens=512).resolved(80, "H100").max_num_batched_tokens == 512


def test_flags():
    assert VLLM_V1.resolved(40, "A100").vllm_flags() == [
        "--max-num-batched-tokens", "2048", "--max-num-seqs", "256", "--enable-prefix-caching"]
    assert PREFILL_FIRST.vllm_flags() == ["--no-enable-chunked-prefill", "--enable-prefix-caching"]
    assert EngineConfig(prefix_caching=False).vllm_flags()[-1] == "--no-enable-prefix-caching"


@pytest.mark.parametrize("kw,field", [({"mode": "sarathi"}, "engine.mode"),
                                      ({"max_num_batched_tokens": 0}, "engine.max_num_batched_tokens"),
                                      ({"max_num_seqs": 2.5}, "engine.max_num_seqs"),
                                      ({"prefix_hit_rate": 1.0}, "engine.prefix_hit_rate"),
                                      ({"prefix_caching": False, "prefix_hit_rate": 0.3}, "engine.prefix_hit_rate")])
def test_bad_values_name_the_field(kw, field):
    with pytest.raises(InputError) as e:
        EngineConfig(**kw)
    assert e.value.field == field


def test_mapping():
    assert engine_from_mapping(None) == VLLM_V1
    assert engine_from_mapping({"mode": "prefill-first"}).chunked is False
    with pytest.raises(InputError, match="unknown engine field"):
        engine_from_mapping({"chunk": 4})


def test_lru_hit_rate_by_hand():
    # capacity 3 blocks. r1 [1,2] -> 0 hits (cache 1,2); r2 [1,2,3] -> 1,2 hit (cache 1,2,3);
    # r3 [4,1] -> 4 misses so 1 is not a prefix hit (cache after: 3,4,1 -> 2 evicted); r4 [1,2] -> 1 hits, 2 misses.
    # hits 0+2+0+1 = 3 of 2+3+2+2 = 9 blocks.
    assert lru_block_hit_rate([[1, 2], [1, 2, 3], [4, 1], [1, 2]], 3) == pytest.approx(3 / 9)
    with pytest.raises(InputError):
        lru_block_hit_rate([[1]], 0)


def test_scenario_engine_reaches_options_plan_rows_and_vllm_flags(tmp_path):
    # A one-model scenario with options.engine: vLLM V1 with a stated 1024-token budget and prefix caching off.
    # Every option is sized with that engine (no budget search: the budget is stated), the plan JSON's replica
    # rows carry it, and the exported servers pass exactly its flags.
    import json

    import yaml
    from click.testing import CliRunner

    raw = yaml.safe_load((__import__("pathlib").Path(__file__).parents[1] / "datasets" / "scenarios"
                          / "default.yaml").read_text())
    raw["models"] = [m for m in raw["models"] if m["name"] == "Llama-3.1-8B"]
    raw["options"]["engine"] = {"max_num_batched_tokens": 1024, "prefix_caching": False}
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(raw))
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(main, ["plan", str(scen), "--no-baselines", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["replicas"]
    assert rows and all(row["engine"]["mode"] == "vllm-v1" and row["engine"]["max_num_batched_tokens"] == 1024
                        and row["engine"]["prefix_caching"] is False for row in rows)
    problem, plan, scenario, _ = load_plan_file(out)
    for w in workloads(problem, plan, scenario):
        for s in w.servers:
            a = s.args()
            assert a[a.index("--max-num-batched-tokens") + 1] == "1024"
            assert "--no-enable-prefix-caching" in a and "--no-enable-chunked-prefill" not in a


def test_a_models_own_engine_key_without_options_engine_is_vllm_v1(tmp_path):
    # docs/engine.md: "as soon as an engine key is given, an unset mode is vllm-v1". A models[].engine without
    # options.engine was laid over the prefill-first default and kept its mode (its stated budget went unused).
    scen = default_with_one_model(tmp_path, "Llama-3.1-8B", {"max_num_batched_tokens": 1024})
    p = build_problem(load_scenario(scen))
    engines = [o.engine for o in p.options] + [s.engine for s in p.share_options]
    assert engines and all(e is not None and e.mode == "vllm-v1" and e.max_num_batched_tokens == 1024
                           for e in engines)


def test_a_token_budget_on_a_prefill_first_engine_is_refused_not_ignored():
    # prefill-first has no token budget (whole prefills): a stated budget would be recorded and used nowhere.
    with pytest.raises(InputError, match="vllm-v1 scheduler") as e:
        engine_from_mapping({"mode": "prefill-first", "max_num_batched_tokens": 1024})
    assert e.value.field == "engine.max_num_batched_tokens" and "1024" in str(e.value)
    # the same when the budget comes from the options' engine and a model switches to prefill-first
    with pytest.raises(InputError, match="drop max_num_batched_tokens"):
        engine_from_mapping({"mode": "prefill-first"}, engine_from_mapping({"max_num_batched_tokens": 1024}))
    assert engine_from_mapping({"max_num_batched_tokens": 1024}).max_num_batched_tokens == 1024


def test_an_unquoted_engine_version_is_refused_with_the_fix_to_quote_it():
    for text, shown in (("version: 0.11", "0.11"), ("version: 0.10", "0.1")):  # YAML reads 0.10 as the float 0.1
        with pytest.raises(InputError) as e:
            validate_input(EngineSchema, yaml.safe_load(text), source="s.yaml", prefix="engine")
        assert f"{shown} must be text" in str(e.value) and 'quote the version, e.g. version: "0.10"' in str(e.value)
    ok = validate_input(EngineSchema, yaml.safe_load('version: "0.10"'), source="s.yaml", prefix="engine")
    assert ok.to_engine().version == "0.10"
