"""The model catalog (``datasets/data/models/models.csv``, user rows, and Hugging Face ``config.json`` files):
architectures as :class:`~fleetplan.costmodels.hardware.Model` records, and rows as the file writes them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from fleetplan.costmodels.hardware import Model, architecture_params, check_params
from fleetplan.datasets.catalog.rows import (
    NUMBER,
    Rows,
    cell_number,
    int_cell,
    merge_rows,
    read_user_rows,
    require_columns,
    shipped_rows,
)
from fleetplan.errors import InputError
from fleetplan.fileio import read_json

MODEL_COLUMNS = ("model", "attention_type", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
                 "head_dim")


def _head_dim(row: dict[str, str], rows: Rows, i: int, mla: bool) -> int:
    """head_dim; for MLA rows like 'qk 192 (=128 nope+64 rope), v 128' the V head dim (128) is used.

    MLA's KV cache does not use head_dim (it caches kv_lora_rank + qk_rope_head_dim per layer), so the choice
    only affects the record's descriptive field; the V head dim is the per-head width of the attention output.
    """
    text = row.get("head_dim", "")
    if mla and not NUMBER.fullmatch(text):
        m = re.search(r"\bv\s*(\d+)", text)
        if m:
            return int(m.group(1))
    v = int_cell(row, "head_dim", rows, i, required=True, low=8, high=1024,
                  fix="give the per-head dimension (hidden_size / num_attention_heads unless the config says)")
    assert v is not None
    return v


_SLIDING = re.compile(r"\+\s*sliding window\s+(\d+)", re.IGNORECASE)


def _attention(row: dict[str, str], rows: Rows, i: int) -> tuple[str, str, str]:
    """(attention_type cell as written, its kind GQA/MHA/MQA/MLA, arch_type dense/moe) of a row; blank cells are
    GQA and dense. Raises InputError naming the row and field for another kind."""
    att_raw = row.get("attention_type", "") or "GQA"
    attention = re.split(r"[\s;(+]", att_raw.strip(), maxsplit=1)[0].upper()
    if attention not in ("GQA", "MHA", "MQA", "MLA"):
        raise InputError(f"attention type {att_raw!r} not understood; start it with GQA, MHA, MQA or MLA",
                         source=rows.source, row=i, field="attention_type", value=att_raw)
    arch = (row.get("arch_type", "") or "dense").lower()
    if arch not in ("dense", "moe"):
        raise InputError(f"arch_type {arch!r} must be 'dense' or 'moe'", source=rows.source, row=i,
                         field="arch_type", value=arch)
    return att_raw, attention, arch


def _shape(row: dict[str, str], rows: Rows, i: int, mla: bool) -> tuple[int, int, int, int | None, int]:
    """(layers, hidden size, attention heads, KV heads (None for MLA), head dim) of a row. Raises InputError naming
    the row and field for a missing or out-of-range cell, or more KV heads than attention heads."""
    layers = int_cell(row, "num_layers", rows, i, required=True, low=1, high=1000, fix="give the layer count")
    hidden = int_cell(row, "hidden_size", rows, i, required=True, low=64, high=200_000, fix="give hidden_size")
    heads = int_cell(row, "num_attention_heads", rows, i, required=True, low=1, high=4096,
                     fix="give num_attention_heads")
    kv_heads = None if mla else int_cell(row, "num_kv_heads", rows, i, required=True, low=1, high=4096,
                                         fix="give num_key_value_heads from config.json (GQA), or the attention "
                                             "head count for MHA")
    if kv_heads is not None and heads is not None and kv_heads > heads:
        raise InputError(f"num_kv_heads {kv_heads} exceeds num_attention_heads {heads}; swap them?",
                         source=rows.source, row=i, field="num_kv_heads", value=kv_heads)
    return layers, hidden, heads, kv_heads, _head_dim(row, rows, i, mla)


def _params_b(row: dict[str, str], rows: Rows, i: int) -> tuple[float, float]:
    """(total, active) parameters of a row in billions: the computed columns where given, else the stated ones
    (their leading number); active defaults to total. Raises InputError naming the row and field."""
    fix_p = "give parameters in billions (e.g. 8.03 for Llama-3.1-8B)"
    total_b = cell_number(row, "params_total_b_computed", rows, i, required=False, low=0.01, high=100_000,
                          fix=fix_p)
    if total_b is None:
        total_b = cell_number(row, "params_total_b_stated", rows, i, required=True, low=0.01, high=100_000,
                              fix=fix_p, leading=True)
    active_b = cell_number(row, "params_active_b_computed", rows, i, required=False, low=0.01, high=100_000,
                           fix=fix_p)
    if active_b is None:
        active_b = cell_number(row, "params_active_b_stated", rows, i, required=False, low=0.01, high=100_000,
                               fix=fix_p, leading=True)
    return total_b, active_b if active_b is not None else total_b


def _opt_int(row: dict[str, str], column: str, rows: Rows, i: int) -> int:
    """An optional whole-number cell; blank is 0."""
    return int_cell(row, column, rows, i, required=False, low=0, high=1_000_000,
                    fix="give a whole number or leave the cell blank") or 0


def _context_and_window(row: dict[str, str], rows: Rows, i: int, att_raw: str) -> tuple[int, int | None]:
    """(longest context in tokens, default 131072; sliding window in tokens or None) of a row. A blank window cell
    takes the window of an attention type 'GQA + sliding window 4096' (every layer windowed, Mistral-7B-v0.1,
    which caps the cached tokens); an alternating full/windowed layout (gpt-oss) does not, so it is not matched."""
    ctx = int_cell(row, "max_context_tokens", rows, i, required=False, low=128, high=100_000_000,
                   fix="give the longest supported context in tokens") or 131072
    window = int_cell(row, "sliding_window_tokens", rows, i, required=False, low=1, high=100_000_000,
                      fix="give the sliding window in tokens or leave blank")
    if window is None:
        m = _SLIDING.search(att_raw)
        window = int(m.group(1)) if m else None
    return ctx, window


def _check_row_params(row: dict[str, str], rows: Rows, i: int, model: Model, att_raw: str) -> None:
    """Where a row (not MLA: its rows lack q_lora_rank and the per-head dims the count needs) gives
    intermediate_size and vocab_size, its parameter count must be within 10% of the architecture's
    (:func:`~fleetplan.costmodels.hardware.check_params`). Raises InputError naming the row."""
    inter = int_cell(row, "intermediate_size", rows, i, required=False, low=1, high=10_000_000,
                     fix="give intermediate_size from config.json")
    vocab = int_cell(row, "vocab_size", rows, i, required=False, low=1, high=100_000_000,
                     fix="give vocab_size from config.json")
    if not (inter and vocab and model.attention_type != "MLA"):
        return
    computed, _ = architecture_params(
        num_layers=model.num_layers, hidden_size=model.hidden_size, num_attention_heads=model.num_attention_heads,
        num_kv_heads=model.num_kv_heads, head_dim=model.head_dim, intermediate_size=inter, vocab_size=vocab,
        attention_bias="bias" in att_raw.lower(), num_experts=model.num_routed_experts,
        experts_per_token=model.experts_per_token, moe_intermediate_size=model.moe_intermediate_size,
        num_shared_experts=_opt_int(row, "num_shared_experts", rows, i))
    try:
        check_params(model.params_total, computed, owner=f"model {model.name}")
    except InputError as exc:
        raise InputError(str(exc).removeprefix("field 'params': "), source=rows.source, row=i,
                         field="params_total_b_stated", value=exc.value) from None


def _check_row_kv(row: dict[str, str], rows: Rows, i: int, model: Model) -> None:
    """A row's stated kv_cache_bytes_per_token_bf16 must equal the architecture's; InputError naming the row."""
    stated_kv = cell_number(row, "kv_cache_bytes_per_token_bf16", rows, i, required=False, low=1, high=1e8,
                            unit="bytes")
    if stated_kv is not None and not math.isclose(stated_kv, model.kv_bytes_per_token("bf16"), rel_tol=1e-9):
        raise InputError(f"states {stated_kv:g} KV bytes/token but the architecture gives "
                         f"{model.kv_bytes_per_token('bf16'):g} (2 x layers x KV heads x head dim x 2 bytes, or "
                         "(kv_lora_rank + qk_rope_head_dim) x layers x 2 for MLA); fix the shape or the figure",
                         source=rows.source, row=i, field="kv_cache_bytes_per_token_bf16", value=stated_kv)


def _model_from_row(row: dict[str, str], rows: Rows, i: int) -> Model:
    """The :class:`Model` of row ``i`` of a models table (:func:`load_models` says which columns mean what), its
    parameter count and stated KV bytes per token checked against the architecture. Raises InputError naming the
    file, row and field."""
    name = row.get("model", "")
    if not name:
        raise InputError("the model name is missing", source=rows.source, row=i, field="model")
    att_raw, attention, arch = _attention(row, rows, i)
    layers, hidden, heads, kv_heads, head_dim = _shape(row, rows, i, attention == "MLA")
    total_b, active_b = _params_b(row, rows, i)
    experts, topk, moe_inter, lora, rope = (_opt_int(row, c, rows, i) for c in (
        "num_routed_experts", "experts_per_token", "moe_intermediate_size", "kv_lora_rank", "qk_rope_head_dim"))
    ctx, window = _context_and_window(row, rows, i, att_raw)
    try:
        model = Model(name=name, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                      num_kv_heads=kv_heads, head_dim=head_dim, params_total=round(total_b * 1e9),
                      params_active=round(active_b * 1e9), attention_type=attention, arch_type=arch,
                      num_routed_experts=experts, experts_per_token=topk, moe_intermediate_size=moe_inter,
                      kv_lora_rank=lora, qk_rope_head_dim=rope, max_context_tokens=ctx,
                      sliding_window_tokens=window, source=row.get("source", ""),
                      vocab_size=int_cell(row, "vocab_size", rows, i, required=False, low=1, high=100_000_000,
                                          fix="give the tokenizer's vocabulary size or leave the cell blank") or 0)
    except InputError as exc:
        raise InputError(str(exc), source=rows.source, row=i, field=exc.field, value=exc.value) from None
    _check_row_params(row, rows, i, model, att_raw)
    _check_row_kv(row, rows, i, model)
    return model


def _models_from(rows: Rows) -> tuple[dict[str, Model], dict[str, str]]:
    require_columns(rows, MODEL_COLUMNS, "model architectures")
    out: dict[str, Model] = {}
    repos: dict[str, str] = {}
    for i, row in rows.rows:
        m = _model_from_row(row, rows, i)
        out[m.name] = m
        if row.get("hf_repo"):
            repos[row["hf_repo"]] = m.name
    return out, repos


@lru_cache(maxsize=1)
def shipped_models() -> tuple[dict[str, Model], dict[str, str]]:
    return _models_from(shipped_rows("models", "models.csv"))


#: config.json ``torch_dtype`` -> fleetplan data type (the dtype the weights were saved in).
_HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "bf16"}


def _hf_name(cfg: dict[str, Any], path: Path) -> str:
    """A config.json's model name: the last part of its ``_name_or_path``, else its folder's name (a downloaded
    repo), else the file name without extension."""
    named = str(cfg.get("_name_or_path") or "").rstrip("/").split("/")[-1]
    if named:
        return named
    return path.parent.name if path.stem == "config" and path.parent.name else path.stem


def model_from_hf_config(path: str | Path, *, name: str | None = None) -> Model:
    """A :class:`Model` from a Hugging Face ``config.json``, its parameter count computed from the architecture.

    Keys read: num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads (default: the attention
    heads, MHA), head_dim (default hidden_size / heads), intermediate_size, vocab_size, tie_word_embeddings,
    attention_bias (Qwen2's q/k/v bias is implied by model_type qwen2), MoE: num_local_experts (Mixtral) /
    num_experts (Qwen-MoE) / n_routed_experts (DeepSeek), num_experts_per_tok, moe_intermediate_size,
    n_shared_experts, first_k_dense_replace; MLA (DeepSeek): kv_lora_rank, q_lora_rank, qk_rope_head_dim,
    qk_nope_head_dim, v_head_dim; max_position_embeddings; sliding_window (when use_sliding_window is not false
    and model_type is mistral); torch_dtype (kept in the record's source). Parameters:
    :func:`fleetplan.costmodels.hardware.architecture_params`.

    Raises:
        InputError: the file is missing, not JSON, not a mapping, or lacks a key the count needs (names the key).
    """
    p = Path(path)
    cfg = _HfConfig(_read_hf_config(p), str(p))
    num = cfg.number
    layers = num("num_hidden_layers", required=True, alt=("n_layer", "num_layers"))
    hidden = num("hidden_size", required=True, alt=("n_embd", "d_model"))
    heads = num("num_attention_heads", required=True, alt=("n_head",))
    kv_heads = num("num_key_value_heads", heads)
    head_dim = num("head_dim", None) or (hidden // heads if heads else 0)
    inter = num("intermediate_size", required=True, alt=("ffn_dim",))
    vocab = num("vocab_size", required=True)
    experts = num("num_local_experts", 0, alt=("num_experts", "n_routed_experts")) or 0
    topk, moe_inter = num("num_experts_per_tok", 0) or 0, num("moe_intermediate_size", 0) or 0
    shared = num("n_shared_experts", 0, alt=("num_shared_experts",)) or 0
    first_dense = num("first_k_dense_replace", 0) or 0
    lora, rope = num("kv_lora_rank", 0) or 0, num("qk_rope_head_dim", 0) or 0
    model_type = str(cfg.cfg.get("model_type", ""))
    total, active = architecture_params(
        num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=inter, vocab_size=vocab, tie_word_embeddings=bool(cfg.cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.cfg.get("attention_bias", model_type == "qwen2")), num_experts=experts,
        experts_per_token=topk, moe_intermediate_size=moe_inter, num_shared_experts=shared,
        first_dense_layers=first_dense, q_lora_rank=num("q_lora_rank", 0) or 0, kv_lora_rank=lora,
        qk_nope_head_dim=num("qk_nope_head_dim", 0) or 0, qk_rope_head_dim=rope, v_head_dim=num("v_head_dim", 0) or 0)
    try:
        return Model(name=name or _hf_name(cfg.cfg, p), num_layers=layers, hidden_size=hidden,
                     num_attention_heads=heads, num_kv_heads=None if lora else kv_heads,
                     head_dim=num("v_head_dim", 0) or head_dim if lora else head_dim, params_total=total,
                     params_active=active, attention_type="MLA" if lora else ("MHA" if kv_heads == heads else "GQA"),
                     arch_type="moe" if experts else "dense", num_routed_experts=experts, experts_per_token=topk,
                     moe_intermediate_size=moe_inter or (inter if experts else 0), kv_lora_rank=lora,
                     qk_rope_head_dim=rope, max_context_tokens=num("max_position_embeddings", 131072),
                     sliding_window_tokens=cfg.sliding_window(model_type), source=cfg.model_source(),
                     vocab_size=int(vocab or 0))
    except InputError as exc:
        raise InputError(str(exc), source=cfg.source, field=exc.field, value=exc.value) from None


def _read_hf_config(p: Path) -> dict[str, Any]:
    """The mapping of a config.json (a multimodal wrapper's ``text_config``, the language model's shape, with the
    wrapper's ``_name_or_path``). Raises InputError naming the file when it is missing, not JSON or not a
    mapping."""
    source = str(p)
    if not p.is_file():
        raise InputError("file not found; give the path of a Hugging Face config.json", source=source)
    cfg = read_json(p, what="Hugging Face config.json")
    if not isinstance(cfg, dict):
        raise InputError("a config.json must hold one JSON object", source=source)
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the language model's shape here
        cfg = {**cfg["text_config"], "_name_or_path": cfg.get("_name_or_path", "")}
    return cfg


@dataclass(frozen=True)
class _HfConfig:
    """A read config.json (``cfg``) and its path (``source``, for errors)."""

    cfg: dict[str, Any]
    source: str

    def number(self, k: str, default: Any = None, *, required: bool = False, alt: tuple[str, ...] = ()) -> Any:
        """The whole number under ``k`` (or the first of ``alt`` given), else ``default``. Raises InputError
        naming the key when it is not a number, or when it is ``required`` and absent."""
        for kk in (k, *alt):
            v = self.cfg.get(kk)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise InputError(f"{kk} must be a number, got {v!r}", source=self.source, field=kk, value=v)
                return int(v)
        if required:
            raise InputError(f"config.json has no {k}; it is needed for the architecture (a decoder-only "
                             "transformer's config has it)", source=self.source, field=k)
        return default

    def sliding_window(self, model_type: str) -> int | None:
        """The sliding window in tokens of a mistral config whose use_sliding_window is not false, else None."""
        window = (self.cfg.get("sliding_window") if model_type == "mistral" and self.cfg.get("use_sliding_window", True)
                  else None)
        return int(window) if isinstance(window, int) else None

    def model_source(self) -> str:
        """The record's source: the file, with the dtype its weights were saved in when it says."""
        dtype = _HF_DTYPES.get(str(self.cfg.get("torch_dtype", "")), "")
        return f"config.json {self.source}" + (f" (saved as {dtype})" if dtype else "")


def load_models(extra: str | Path | None = None) -> dict[str, Model]:
    """Model architectures by catalog name -> :class:`Model` (parameter counts, not billions).

    Parameters: the computed count where the file has one (params_total_b_computed), else the stated one
    (gpt-oss-120b: 117 B stated; DeepSeek-V3: 671 B, its note '(+14 MTP ...)' dropped). MLA (DeepSeek-V3):
    num_kv_heads None, head_dim = the V head dim (128) parsed from 'qk 192 ..., v 128'; its KV cache uses
    kv_lora_rank + qk_rope_head_dim. Mistral-7B-v0.1: sliding_window_tokens 4096 from 'GQA + sliding window 4096'.
    Where a row states kv_cache_bytes_per_token_bf16, it must equal ``Model.kv_bytes_per_token('bf16')``.

    Args:
        extra: a user CSV/YAML file with the models.csv header (required: model, attention_type, num_layers,
            hidden_size, num_attention_heads, num_kv_heads, head_dim and params_total_b_stated or
            params_total_b_computed); optional sliding_window_tokens column. Where a row gives intermediate_size
            and vocab_size (not MLA), its parameter count must be within 10% of the architecture's
            (:func:`fleetplan.costmodels.hardware.check_params`). Or a Hugging Face config.json
            (:func:`model_from_hf_config`), one model.

    Raises:
        InputError: a missing column or bad cell, naming file, row and field.
    """
    shipped, _ = shipped_models()
    if extra is None:
        return dict(shipped)
    if str(extra).lower().endswith(".json"):
        m = model_from_hf_config(extra)
        user = {m.name: m}
    else:
        user, _ = _models_from(read_user_rows(extra))
    return merge_rows(shipped, user, lambda m, name: replace(m, name=name))


#: Columns :func:`model_file_row` writes: the models.csv columns the reader uses.
MODEL_FILE_COLUMNS = ("model", "hf_repo", "arch_type", "attention_type", "num_layers", "hidden_size",
                      "num_attention_heads", "num_kv_heads", "head_dim", "moe_intermediate_size",
                      "num_routed_experts", "experts_per_token", "kv_lora_rank", "qk_rope_head_dim",
                      "max_context_tokens", "sliding_window_tokens", "params_total_b_computed",
                      "params_active_b_computed", "kv_cache_bytes_per_token_bf16", "vocab_size", "source")


def model_file_row(m: Model) -> dict[str, Any]:
    """One model as a models.csv row (:data:`MODEL_FILE_COLUMNS`; None = blank cell): read back by
    :func:`load_models` (``extra``), it gives the same :class:`Model` (parameters in billions, the computed
    columns; the KV bytes per token stated, so the reader re-checks it against the architecture)."""
    return {
        "model": m.name, "hf_repo": model_hf_repo(m.name), "arch_type": m.arch_type,
        "attention_type": m.attention_type, "num_layers": m.num_layers, "hidden_size": m.hidden_size,
        "num_attention_heads": m.num_attention_heads, "num_kv_heads": m.num_kv_heads, "head_dim": m.head_dim,
        "moe_intermediate_size": m.moe_intermediate_size or None, "num_routed_experts": m.num_routed_experts or None,
        "experts_per_token": m.experts_per_token or None, "kv_lora_rank": m.kv_lora_rank or None,
        "qk_rope_head_dim": m.qk_rope_head_dim or None, "max_context_tokens": m.max_context_tokens,
        "sliding_window_tokens": m.sliding_window_tokens, "params_total_b_computed": m.params_total / 1e9,
        "params_active_b_computed": m.params_active / 1e9,
        "kv_cache_bytes_per_token_bf16": int(m.kv_bytes_per_token("bf16")), "vocab_size": m.vocab_size or None,
        "source": m.source,
    }


def model_hf_repo(name: str) -> str | None:
    """The Hugging Face repository the shipped catalog gives for model ``name`` (its catalog name, e.g.
    'Llama-3.1-8B' -> 'meta-llama/Llama-3.1-8B'; models.csv's hf_repo column), or None when it gives none."""
    _, repos = shipped_models()
    return next((repo for repo, model in repos.items() if model == name), None)

