"""The engine record (costmodels/engine.py): defaults from vLLM's get_batch_defaults, validation, flags, LRU hits."""

import pytest

from fleetplan.costmodels.engine import (
    PREFILL_FIRST,
    VLLM_V1,
    EngineConfig,
    engine_from_mapping,
    lru_block_hit_rate,
    vllm_defaults,
)
from fleetplan.errors import InputError


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
