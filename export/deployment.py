"""What to run for a plan: the vLLM servers, the workloads that hold them, and the deployment file.

A plan's decisions become *workloads*, one per (site, model, GPU type, tp × pp) with its replicas per window, and
one per group of shared GPUs with the same residents; each workload runs one vLLM OpenAI-compatible server per
resident model (:class:`VllmServer`). ``fleetplan export k8s`` turns the workloads into Kubernetes manifests
(:mod:`fleetplan.export.k8s`), ``fleetplan export vllm`` into launch commands per node
(:mod:`fleetplan.export.vllm`), and the service's actuator patches their replicas
(:mod:`fleetplan.service.actuate`): all three name a workload by :func:`workload_name`.

Server arguments come from the plan's Problem (the capacity model's numbers, recorded in each option by
``scenario.build.build_problem``) and the scenario's options:

* ``--tensor-parallel-size`` / ``--pipeline-parallel-size``: the option's tp and pp.
* ``--max-num-seqs``: floor of the concurrent sequences the option's KV budget holds (the capacity model's
  ``max_batch``), so the engine never admits a batch the plan did not size memory for.
* ``--max-model-len``: the model's context, capped at the tokens the replica's KV budget holds (rounded down to
  16-token blocks): vLLM refuses to start when one sequence of ``max-model-len`` tokens does not fit its KV cache.
  A sliding-window model holds at most its window, so its context is not capped while the window fits.
* ``--gpu-memory-utilization``: the scenario's ``memory_utilization`` for a dedicated replica. On a shared GPU each
  server gets its footprint (weights + its KV budget) as a share of the GPU, plus an equal part of what is left of
  the scenario's ``memory_utilization``: the shares add up to ``memory_utilization``. vLLM counts its activation
  peak inside that share, so its KV cache comes out somewhat smaller than the planned budget; ``--max-num-seqs``
  still caps the batch at the planned one.
* the engine the capacity assumed (the option's :class:`~fleetplan.costmodels.engine.EngineConfig`, the plan JSON's
  ``engine`` object): ``--max-num-batched-tokens`` (vllm-v1) or ``--no-enable-chunked-prefill`` (prefill-first),
  ``--enable-prefix-caching`` / ``--no-enable-prefix-caching``; ``--max-num-seqs`` is the smaller of the KV
  batch above and the engine's cap. An option built without a record runs the default engine (vLLM V1 with vLLM's
  defaults, as its replay does): no budget flag, ``--enable-prefix-caching``; what is deployed is what was
  planned. Speculative decoding adds
  ``--speculative-config '{"model": DRAFT_REPO, "num_speculative_tokens": k, "method": "draft_model"}'`` (or the
  ngram form; vLLM's speculative decoding docs), the draft's repository from the deployment file or the catalog.
* ``--kv-cache-dtype``: ``auto`` (the model's bf16) for kv_dtype bf16, ``fp8`` for fp8.
* quantization: weight_dtype bf16/fp16 run the checkpoint as it is (``--dtype``); fp8 adds ``--quantization fp8``
  (vLLM quantizes the bf16 checkpoint on load); int8/int4 need a pre-quantized checkpoint, named in the deployment
  file with its method (``models: {NAME: {hf_repo: ..., quantization: awq}}``).

Disaggregated plans (prefill and decode pools, ``Plan.pd_replicas``): one workload per (site, model, GPU type, tp,
role, and for prefill the decode site it ships to), named by :func:`pd_workload_name`. Their servers add vLLM's
disaggregated-prefill flags: ``--kv-transfer-config`` with the KV connector of datasets/data/deploy/vllm.csv
(NixlConnector) and ``kv_role`` ``kv_producer`` (prefill) or ``kv_consumer`` (decode). A decode server's
``--max-num-seqs`` and ``--max-model-len`` come from its option's batch and KV budget; a prefill server has no
``--max-num-seqs`` (the capacity model sizes prefill by compute, one prompt at a time: vLLM's default applies) and its
``--max-model-len`` from the same KV budget as a dedicated replica (memory_utilization × GPUs × memory − weights).
Clients do not call these servers directly: a routing proxy sends each request to a prefill server, then to a decode
server (docs/export.md, "Disaggregated prefill and decode").

The deployment file (YAML, :class:`DeployFile`) maps sites to Kubernetes contexts and namespaces, and may override
the image, a model's checkpoint and a GPU type's node label.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import math
import re
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, PrivateAttr, field_validator

from fleetplan.costmodels.engine import DEFAULT_ENGINE, EngineConfig
from fleetplan.costmodels.hardware import Model
from fleetplan.datasets.catalog.models import model_hf_repo
from fleetplan.datasets.catalog.names import alias_hf_repo, get_model
from fleetplan.datasets.deploy import gpu_product_labels, vllm_defaults
from fleetplan.errors import InputError
from fleetplan.fileio import InputModel, input_field, read_yaml, validate_input
from fleetplan.placement.plan import OptionKey, Plan
from fleetplan.placement.problem import PdKey, Problem, ReplicaOption, time_of_day_s
from fleetplan.scenario.read import Scenario, scenario_catalog_file, scenario_model, scenario_spec

#: KV-cache block size of vLLM's paged attention (tokens); --max-model-len is rounded down to whole blocks.
KV_BLOCK_TOKENS = 16
#: Longest Kubernetes object name the export writes: a Service name and a label value allow 63 characters; 52
#: leaves room for the suffixes controllers add to pod names.
MAX_NAME_CHARS = 52
#: vLLM --dtype for a weight data type that runs unquantized.
_VLLM_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16"}


class SiteTarget(InputModel):
    """Where one site's workloads go."""

    context: str | None = input_field(None, description="kubectl context of the site's cluster (default: the "
                                      "site name)", min_length=1)
    namespace: str | None = input_field(None, description="namespace of the site's workloads (default: the file's "
                                        "namespace)", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63,
                                        fix="give a DNS label: lowercase letters, digits and '-'")


class ModelTarget(InputModel):
    """A model's checkpoint, when not the catalog's."""

    hf_repo: str | None = input_field(None, description="Hugging Face repository ORG/NAME (or a path in the image, "
                                      "/models/NAME) vLLM loads", min_length=1,
                                      pattern=r"^(/\S+|\.{1,2}/\S+|[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+)$",
                                      fix="give a Hugging Face repository id ORG/NAME (e.g. meta-llama/Llama-3.1-8B) "
                                      "or a path in the image (/models/NAME)")
    quantization: str | None = input_field(None, description="vLLM --quantization of that checkpoint (awq, gptq, "
                                           "fp8, ...)", min_length=1)


class DeployFile(InputModel):
    """The deployment file of ``fleetplan export`` and ``fleetplan serve --actuate k8s``."""

    image: str | None = input_field(None, description="vLLM OpenAI server image (default: datasets/data/deploy/"
                                    "vllm.csv)", min_length=1)
    namespace: str = input_field("fleetplan", description="namespace of every site without its own",
                                 pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63,
                                 fix="give a DNS label: lowercase letters, digits and '-'")
    timezone: str = input_field("UTC", description="IANA time zone name of the plan's day (window 0 starts at 00:00 "
                                "there), for the KEDA cron schedule", min_length=1)
    hf_token_secret: str | None = input_field("hf-token", description="Secret whose key 'token' holds a Hugging "
                                              "Face token (optional in the pod; null: no token)")
    sites: dict[str, SiteTarget] = Field(default_factory=dict, description="site name -> its cluster")
    models: dict[str, ModelTarget] = Field(default_factory=dict, description="catalog model name -> checkpoint")
    gpu_labels: dict[str, str] = Field(default_factory=dict, description="catalog GPU name -> nvidia.com/gpu.product "
                                       "node label (for GPU types datasets/data/deploy/gpu_products.csv lacks)")
    #: The file it was read from (None: built in code), for errors found later against a plan.
    _source: str | None = PrivateAttr(default=None)

    @field_validator("timezone")
    @classmethod
    def _iana_timezone(cls, value: str) -> str:
        # KEDA's cron scaler loads the name with Go's time.LoadLocation: an IANA name, not an offset or abbreviation.
        if value not in _iana_timezones():
            raise ValueError(f"{value!r} is not an IANA time zone name, which KEDA's cron scaler needs; "
                             + _timezone_fix(value))
        return value

    @property
    def source(self) -> str | None:
        """The path the file was read from (None for a DeployFile built in code)."""
        return self._source


@functools.cache
def _iana_timezones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def _timezone_fix(value: str) -> str:
    offset = re.fullmatch(r"(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?", value.strip(), flags=re.IGNORECASE)
    if offset and int(offset.group(2)) <= 14 and int(offset.group(3) or 0) == 0:
        hours = int(offset.group(2))
        name = "Etc/UTC" if hours == 0 else f"Etc/GMT{'-' if offset.group(1) == '+' else '+'}{hours}"
        return (f"give the place's zone (e.g. Asia/Karachi), or {name} for a fixed offset of {value.strip()} "
                "(IANA's Etc names reverse the sign)")
    close = difflib.get_close_matches(value, sorted(_iana_timezones()), n=3, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}?"
    return "give a name such as UTC, Europe/Berlin or America/New_York"


def _close_hint(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.5)
    return f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""


def read_deploy_file(path: str | Path | None) -> DeployFile:
    """The checked deployment file at ``path`` (None: all defaults). Raises InputError naming the file and key."""
    if path is None:
        return DeployFile()
    raw = read_yaml(path, what="deployment file")
    deploy = validate_input(DeployFile, raw if raw is not None else {}, source=str(path))
    deploy._source = str(path)
    return deploy


def slug(text: str) -> str:
    """A DNS-label form of ``text``: lowercase, runs of other characters as one '-' ('Llama-3.1-8B' ->
    'llama-3-1-8b', 'aws:us-east-1' -> 'aws-us-east-1')."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _short(name: str) -> str:
    if len(name) <= MAX_NAME_CHARS:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return name[:MAX_NAME_CHARS - 9].rstrip("-") + "-" + digest


def workload_name(model: str, gpu: str, tp: int, pp: int, pool_name: str = "") -> str:
    """Name of a dedicated workload: 'llama-3-1-70b-h100-sxm-80gb-tp2' (+ 'pp2' for pipeline stages, + '-<pool
    name>' for a named pool, e.g. '-spot', where several pools share a site and GPU type); long names are cut and
    end in 8 hex digits of their SHA-256."""
    return _short(f"{slug(model)}-{slug(gpu)}-tp{tp}" + (f"pp{pp}" if pp > 1 else "")
                  + (f"-{slug(pool_name)}" if pool_name else ""))


def pd_workload_name(model: str, gpu: str, tp: int, role: str, site: str, decode_site: str = "",
                     pool_name: str = "") -> str:
    """Name of a prefill or decode workload at ``site``: 'llama-3-1-70b-h100-sxm-80gb-tp2-decode',
    '...-tp2-prefill', and '...-tp2-prefill-to-aws-us-east-1' for prefill replicas that ship to another site's
    decode replicas (+ '-<pool name>' for a named pool; cut as in :func:`workload_name`)."""
    to = f"-to-{slug(decode_site)}" if role == "prefill" and decode_site and decode_site != site else ""
    return _short(f"{slug(model)}-{slug(gpu)}-tp{tp}-{role}{to}" + (f"-{slug(pool_name)}" if pool_name else ""))


def shared_workload_name(models: tuple[str, ...], gpu: str, pool_name: str = "") -> str:
    """Name of the workload of shared GPUs with residents ``models`` (in any order) on ``gpu``:
    'shared-llama-3-1-8b-qwen2-5-7b-a100-sxm4-80gb' (+ '-<pool name>' for a named pool; cut as in
    :func:`workload_name`)."""
    return _short("shared-" + "-".join(slug(m) for m in sorted(models)) + "-" + slug(gpu)
                  + (f"-{slug(pool_name)}" if pool_name else ""))


def engine_flags(engine: EngineConfig | None, draft_repo: str | None = None) -> tuple[str, ...]:
    """The ``vllm serve`` flags of the engine an option was sized with, but ``--max-num-seqs`` (written from the
    KV batch, :func:`_engine_seqs`); None (an option built without the record) is the default engine
    (:data:`~fleetplan.costmodels.engine.DEFAULT_ENGINE`, vLLM's defaults: no budget flag).
    ``draft_repo``: the speculative draft model's repository (``--speculative-config``'s "model")."""
    flags = (engine or DEFAULT_ENGINE).vllm_flags(draft_repo)
    if "--max-num-seqs" in flags:
        i = flags.index("--max-num-seqs")
        del flags[i:i + 2]
    return tuple(flags)


def _engine_seqs(kv_seqs: int | None, engine: EngineConfig | None) -> int | None:
    """``--max-num-seqs``: the KV batch, capped by the engine's own cap when it has one."""
    cap = engine.max_num_seqs if engine is not None else None
    if cap is None:
        return kv_seqs
    return cap if kv_seqs is None else min(kv_seqs, cap)


@dataclass(frozen=True)
class VllmServer:
    """One ``vllm serve`` process.

    Attributes:
        model: catalog name (the plan's and the Kubernetes labels' name of the model).
        served_name: the name clients ask for (``--served-model-name``): the scenario's own spelling of the model,
            e.g. the alias Llama-3.1-8B-Instruct of catalog model Llama-3.1-8B (else ``model``).
        checkpoint: what vLLM loads (a Hugging Face repository).
        port: HTTP port.
        port_name: a per-model port name (Kubernetes Services target it), 'm<index of the model in the problem>'.
        tp, pp: tensor- and pipeline-parallel sizes.
        max_num_seqs, max_model_len: see the module docstring (max_num_seqs None: vLLM's default).
        gpu_memory_utilization: share of each GPU's memory this server may take (0..1).
        dtype, kv_cache_dtype, quantization: vLLM's --dtype, --kv-cache-dtype and --quantization (None: none).
        kv_role: 'kv_producer' (a prefill server) or 'kv_consumer' (a decode server) of a disaggregated plan, with
            ``kv_connector``; None for a colocated server.
        engine_flags: the engine's flags other than ``--max-num-seqs`` (:func:`engine_flags`).
    """

    model: str
    served_name: str
    checkpoint: str
    port: int
    port_name: str
    tp: int
    pp: int
    max_num_seqs: int | None
    max_model_len: int
    gpu_memory_utilization: float
    dtype: str
    kv_cache_dtype: str
    quantization: str | None
    kv_role: str | None = None
    kv_connector: str = ""
    engine_flags: tuple[str, ...] = ()

    def kv_transfer_config(self) -> str | None:
        """The JSON of ``--kv-transfer-config`` (compact, keys in vLLM's order), or None for a colocated server."""
        if self.kv_role is None:
            return None
        return json.dumps({"kv_connector": self.kv_connector, "kv_role": self.kv_role}, separators=(",", ":"))

    def args(self, *, ray: bool = False) -> list[str]:
        """The arguments after ``vllm serve`` (``ray``: the pipeline stages run on a Ray cluster of several nodes)."""
        out = [self.checkpoint, "--served-model-name", self.served_name, "--host", "0.0.0.0", "--port", str(self.port),
               "--tensor-parallel-size", str(self.tp), "--pipeline-parallel-size", str(self.pp)]
        if self.max_num_seqs is not None:
            out += ["--max-num-seqs", str(self.max_num_seqs)]
        out += ["--max-model-len", str(self.max_model_len),
                "--gpu-memory-utilization", f"{self.gpu_memory_utilization:.3f}", "--dtype", self.dtype,
                "--kv-cache-dtype", self.kv_cache_dtype]
        if self.quantization:
            out += ["--quantization", self.quantization]
        out += list(self.engine_flags)
        config = self.kv_transfer_config()
        if config is not None:
            out += ["--kv-transfer-config", config]
        if ray:
            out += ["--distributed-executor-backend", "ray"]
        return out


@dataclass(frozen=True)
class Workload:
    """Replicas of one shape at one site: a dedicated option or a group of identical shared GPUs.

    Attributes:
        name: :func:`workload_name` / :func:`shared_workload_name`.
        site, pool, gpu: where it runs (pool id 'site/gpu', catalog GPU name).
        gpu_product_label: the ``nvidia.com/gpu.product`` node label of ``gpu``.
        key: the plan's option key (model, pool, tp, pp), or None for shared GPUs.
        servers: the vLLM servers of one replica (two or more on a shared GPU).
        gpus_per_pod: GPUs of one pod (tp; a pipeline replica has ``pp`` pods of tp GPUs, one per node).
        pods_per_replica: pp (1 unless pipeline stages span nodes).
        replicas: replicas in each window.
        load_s: seconds to load one replica's weights (the scenario's load bandwidth): the lead a scaler needs.
        pd_key: the plan's prefill/decode option key (model, role, pool, tp, decode site) of a prefill or decode
            workload, None otherwise.
    """

    name: str
    site: str
    pool: str
    gpu: str
    gpu_product_label: str
    key: OptionKey | None
    servers: tuple[VllmServer, ...]
    gpus_per_pod: int
    pods_per_replica: int
    replicas: tuple[int, ...]
    load_s: float
    pd_key: PdKey | None = None

    @property
    def shared(self) -> bool:
        return self.key is None and self.pd_key is None

    @property
    def role(self) -> str:
        """'colocated' (dedicated or shared), 'prefill' or 'decode'."""
        return self.pd_key[1] if self.pd_key is not None else "colocated"

    @property
    def decode_site(self) -> str:
        """The site a prefill workload ships its KV caches to ('' otherwise)."""
        return self.pd_key[4] if self.pd_key is not None else ""

    @property
    def multi_node(self) -> bool:
        return self.pods_per_replica > 1


def window_index(problem: Problem, hhmm: str, option: str = "--window") -> int:
    """Index of the window that holds time of day ``hhmm`` ('HH:MM', window 0 starting at 00:00). Raises
    InputError naming ``option`` for a malformed time or one past the plan's horizon."""
    t = time_of_day_s(hhmm, field=option)
    w = int(t // problem.window_length_s)
    if w >= problem.n_windows:
        raise InputError(f"{option} {hhmm} is past the plan's {problem.horizon_hours:g} h horizon "
                         f"({problem.n_windows} windows of {problem.window_length_s:g} s from 00:00); give an earlier "
                         "time", field=option, value=hhmm)
    return w


def window_label(problem: Problem, w: int) -> str:
    """'HH:MM' of the start of window ``w``."""
    t = int(round(w * problem.window_length_s))
    return f"{t // 3600 % 24:02d}:{t // 60 % 60:02d}"


def _max_model_len(model: Model, kv_budget_bytes: float, kv_dtype: str, where: str) -> int:
    kvpt = model.kv_bytes_per_token(kv_dtype)
    window = model.sliding_window_tokens
    if window and window * kvpt <= kv_budget_bytes:
        return model.max_context_tokens
    held = int(kv_budget_bytes // kvpt) // KV_BLOCK_TOKENS * KV_BLOCK_TOKENS
    if held < KV_BLOCK_TOKENS:
        raise InputError(f"{where}: the KV budget {kv_budget_bytes / 1e9:.2f} GB holds no 16-token block",
                         field="kv_budget_bytes")
    return min(model.max_context_tokens, held)


def _max_num_seqs(max_batch: float, where: str) -> int:
    if not math.isfinite(max_batch):
        raise InputError(f"{where}: the plan's problem records no KV batch limit (a hand-built problem?); export "
                         "plans made from a scenario (`fleetplan plan --out plan.json`)", field="max_batch")
    return max(1, math.floor(max_batch))


class _Checkpoints:
    """Checkpoint, dtype and quantization of each model (catalog, overridden by the deployment file)."""

    def __init__(self, scenario: Scenario, deploy: DeployFile) -> None:
        self.weight_dtype = scenario.options["weight_dtype"]
        self.kv_dtype = scenario.options["kv_dtype"]
        self.models_file = scenario_catalog_file(scenario, "models")
        self.deploy = deploy
        #: {catalog name: the scenario's name} of models the scenario names by an alias of a catalog model (e.g.
        #: Llama-3.1-8B-Instruct, planned as Llama-3.1-8B: the same architecture, other weights).
        self.named_as: dict[str, str] = {}
        base = Path(scenario.base_dir) if scenario.base_dir else None
        for i, m in enumerate(scenario_spec(scenario).models):
            if m.config is None and m.base_model is None:
                model = scenario_model(m, f"{scenario.source}: models[{i}]", base, self.models_file)
                if model.name != m.name:
                    self.named_as[model.name] = m.name

    def model(self, name: str) -> Model:
        return get_model(name, self.models_file)

    def served_name(self, name: str) -> str:
        """The name clients call catalog model ``name`` by: the scenario's spelling (an alias such as
        Llama-3.1-8B-Instruct, or a repository id), else ``name``."""
        return self.named_as.get(name, name)

    def engine_flags(self, engine: EngineConfig | None) -> tuple[str, ...]:
        """:func:`engine_flags` with the speculative draft model's repository (the deployment file's
        ``models: {DRAFT: {hf_repo: ...}}``, else the catalog's). Raises InputError when neither gives one."""
        spec = engine.speculative if engine is not None else None
        repo = None
        if spec is not None and spec.draft_model is not None:
            repo = self.deploy.models.get(spec.draft_model, ModelTarget()).hf_repo or model_hf_repo(spec.draft_model)
            if repo is None:
                raise InputError(f"draft model {spec.draft_model} has no Hugging Face repository in the catalog; "
                                 f"give one in the deployment file: models: {{{spec.draft_model}: {{hf_repo: "
                                 "ORG/NAME}}}}", field="models.hf_repo", value=spec.draft_model)
        return engine_flags(engine, repo)

    def server_settings(self, name: str) -> tuple[str, str, str, str | None]:
        """(checkpoint, dtype, kv_cache_dtype, quantization) of model ``name`` (the deployment file's entry under
        its catalog name or the scenario's name of it)."""
        override = self.deploy.models.get(name)
        if override is None:
            override = self.deploy.models.get(self.served_name(name), ModelTarget())
        # A scenario naming an alias with weights of its own (Llama-3.1-8B-Instruct, planned as Llama-3.1-8B: the
        # same architecture) serves the alias's checkpoint, not the catalog model's base weights.
        alias_repo = alias_hf_repo(self.named_as[name]) if name in self.named_as else None
        repo = override.hf_repo or alias_repo or model_hf_repo(name)
        if repo is None:
            raise InputError(f"model {name} has no Hugging Face repository in the catalog; give one in the "
                             f"deployment file: models: {{{name}: {{hf_repo: ORG/NAME}}}}", field="models.hf_repo",
                             value=name)
        quant = override.quantization
        if quant is None and self.weight_dtype == "fp8":
            quant = "fp8"
        if quant is None and self.weight_dtype not in _VLLM_DTYPE:
            raise InputError(f"the scenario plans {name} with {self.weight_dtype} weights, which vLLM loads from a "
                             f"pre-quantized checkpoint; name it in the deployment file: models: {{{name}: "
                             "{hf_repo: ORG/NAME-AWQ, quantization: awq}}", field="models.quantization", value=name)
        dtype = _VLLM_DTYPE.get(self.weight_dtype, "auto")
        kv = "auto" if self.kv_dtype in ("bf16", "fp16") else self.kv_dtype
        return repo, dtype, kv, quant


def gpu_label(gpu: str, deploy: DeployFile) -> str:
    """The ``nvidia.com/gpu.product`` label of catalog GPU ``gpu`` (the deployment file's, else the shipped one).
    Raises InputError when neither has one."""
    label = deploy.gpu_labels.get(gpu) or gpu_product_labels().get(gpu)
    if label is None:
        raise InputError(f"no nvidia.com/gpu.product label known for GPU {gpu}; give the label GPU feature discovery "
                         f"sets on its nodes in the deployment file: gpu_labels: {{{gpu}: LABEL}} (see "
                         "`kubectl get nodes -L nvidia.com/gpu.product`)", field="gpu_labels", value=gpu)
    return label


def workloads(problem: Problem, plan: Plan, scenario: Scenario, deploy: DeployFile | None = None) -> list[Workload]:
    """The workloads of ``plan`` (see the module docstring), sorted by site then name.

    Raises InputError when the deployment file names a model or GPU type the scenario lacks
    (:func:`check_catalog_names`), a model has no checkpoint, a GPU type no node label, the problem no capacity-model
    batch limits (a hand-built problem), or two workloads of one site get the same name.
    """
    deploy = deploy or DeployFile()
    ck = _Checkpoints(scenario, deploy)
    check_catalog_names(problem, deploy, ck.named_as)
    opts, pd_opts = problem.option_by_key, problem.pd_option_by_key
    # Whole replicas, then prefill and decode replicas (role 'prefill' / 'decode', pp 1) with vLLM's KV-transfer role.
    entries = [(opts[k], counts, k, None) for k, counts in sorted(plan.replicas.items())] + [
        (pd_opts[pk], counts, None, pk) for pk, counts in sorted(plan.pd_replicas.items())]
    out = [_replica_workload(problem, scenario, ck, o, counts, key, pkey)
           for o, counts, key, pkey in entries if any(counts)]
    groups: dict[tuple[str, tuple[str, ...]], int] = {}
    for g in plan.shared:  # residents in name order: the same group whatever order a solver lists them in
        group = (g.pool, tuple(sorted(g.models)))
        groups[group] = groups.get(group, 0) + 1
    out += [_shared_workload(problem, scenario, ck, pool_id, models, n)
            for (pool_id, models), n in sorted(groups.items())]
    out.sort(key=lambda w: (w.site, w.name))
    seen: set[tuple[str, str]] = set()
    for w in out:
        if (w.site, w.name) in seen:
            raise InputError(f"two workloads at {w.site} are both named {w.name}; rename a model or GPU type",
                             field="replicas", value=w.name)
        seen.add((w.site, w.name))
    return out


def _replica_workload(problem: Problem, scenario: Scenario, ck: _Checkpoints, o: ReplicaOption,
                      counts: tuple[int, ...], key: OptionKey | None, pkey: PdKey | None) -> Workload:
    """The workload of a whole replica option (``key``) or a prefill/decode option (``pkey``): one vLLM server
    with the option's parallelism, KV budget and batch limit, and its KV-transfer role for prefill and decode."""
    pool = problem.pool_by_id[o.pool]
    mu = scenario.options["memory_utilization"]
    role = o.role
    where = (f"{role} option " if pkey else "option ") + f"{o.model} on {o.pool} tp {o.tp} pp {o.pp}"
    model = ck.model(o.model)
    repo, dtype, kv, quant = ck.server_settings(o.model)
    weights = model.weight_bytes(ck.weight_dtype)
    # A prefill option records no KV budget (it is sized by compute): a dedicated replica's, as the replay uses;
    # nor a batch limit (vLLM's default then).
    budget = mu * o.tp * pool.memory_bytes_per_gpu - weights if role == "prefill" else o.kv_budget_bytes
    index = [m.name for m in problem.models].index(o.model)
    server = VllmServer(model=o.model, served_name=ck.served_name(o.model), checkpoint=repo,
                        port=vllm_defaults().port, port_name=f"m{index}", tp=o.tp, pp=o.pp,
                        max_num_seqs=None if role == "prefill" else _engine_seqs(
                            _max_num_seqs(o.max_batch, where), o.engine),
                        engine_flags=ck.engine_flags(o.engine) if not pkey else (),
                        max_model_len=_max_model_len(model, budget, ck.kv_dtype, where),
                        gpu_memory_utilization=mu, dtype=dtype, kv_cache_dtype=kv, quantization=quant,
                        kv_role={"prefill": "kv_producer", "decode": "kv_consumer"}.get(role),
                        kv_connector=vllm_defaults().kv_connector if pkey else "")
    name = (pd_workload_name(o.model, pool.gpu, o.tp, role, pool.site, o.decode_site, pool.name) if pkey
            else workload_name(o.model, pool.gpu, o.tp, o.pp, pool.name))
    return Workload(name=name, site=pool.site, pool=o.pool, gpu=pool.gpu,
                    gpu_product_label=gpu_label(pool.gpu, ck.deploy), key=key, servers=(server,),
                    gpus_per_pod=o.tp, pods_per_replica=o.pp, replicas=tuple(counts),
                    load_s=weights / (o.tp * o.pp) / scenario.options["load_bandwidth_bytes_per_s"], pd_key=pkey)


def _shared_workload(problem: Problem, scenario: Scenario, ck: _Checkpoints, pool_id: str, models: tuple[str, ...],
                     n: int) -> Workload:
    """The workload of ``n`` shared GPUs of pool ``pool_id`` holding ``models``: one vLLM server per model on the
    GPU, each with its memory footprint and an equal part of the slack up to memory_utilization. Raises
    InputError when the footprints take more than memory_utilization."""
    pool = problem.pool_by_id[pool_id]
    shares = problem.share_by_key
    mu = scenario.options["memory_utilization"]
    names = [m.name for m in problem.models]
    feet = [shares[(m, pool_id)].memory_bytes / pool.memory_bytes_per_gpu for m in models]
    slack = (mu - sum(feet)) / len(models)
    if slack < 0:
        raise InputError(f"shared GPU {pool_id} with {', '.join(models)}: footprints take {sum(feet):.0%} of the "
                         f"GPU, more than memory_utilization {mu:g}", field="shared_gpus")
    servers = []
    load_s = 0.0
    for i, (m, foot) in enumerate(zip(models, feet, strict=True)):
        s = shares[(m, pool_id)]
        where = f"shared option {m} on {pool_id}"
        model = ck.model(m)
        repo, dtype, kv, quant = ck.server_settings(m)
        # Rounded down to the 3 decimals the flag is written with, so the shares never add up past mu.
        util = math.floor((foot + slack) * 1000) / 1000
        servers.append(VllmServer(model=m, served_name=ck.served_name(m), checkpoint=repo,
                                  port=vllm_defaults().port + i, port_name=f"m{names.index(m)}", tp=1, pp=1,
                                  max_num_seqs=_engine_seqs(_max_num_seqs(s.max_batch, where), s.engine),
                                  engine_flags=ck.engine_flags(s.engine),
                                  max_model_len=_max_model_len(model, s.kv_budget_bytes, ck.kv_dtype, where),
                                  gpu_memory_utilization=util, dtype=dtype, kv_cache_dtype=kv, quantization=quant))
        load_s += model.weight_bytes(ck.weight_dtype) / scenario.options["load_bandwidth_bytes_per_s"]
    return Workload(name=shared_workload_name(models, pool.gpu, pool.name), site=pool.site, pool=pool_id,
                    gpu=pool.gpu, gpu_product_label=gpu_label(pool.gpu, ck.deploy), key=None, servers=tuple(servers),
                    gpus_per_pod=1, pods_per_replica=1, replicas=(n,) * problem.n_windows, load_s=load_s)


def site_target(site: str, deploy: DeployFile) -> tuple[str, str]:
    """(kubectl context, namespace) of ``site``: the deployment file's entry, else (the site name, the file's
    namespace)."""
    t = deploy.sites.get(site, SiteTarget())
    return t.context or site, t.namespace or deploy.namespace


def check_targets(sites: list[str], deploy: DeployFile) -> None:
    """Raise InputError (naming the deployment file and the field path) when the deployment file names a site the
    plan's scenario does not have (a typo would silently send that site's workloads to a default context), or two
    sites share a (context, namespace)."""
    for s in deploy.sites:
        if s not in sites:
            raise InputError(f"the deployment file names site {s!r}, which the plan's scenario does not have; "
                             f"{_close_hint(s, sites)}its sites: {', '.join(sites)}; fix or remove the entry",
                             source=deploy.source, field=f"sites.{s}", value=s)
    seen: dict[tuple[str, str], str] = {}
    for s in sites:
        t = site_target(s, deploy)
        if t in seen:
            raise InputError(f"sites {seen[t]} and {s} both map to context {t[0]} namespace {t[1]}; give each its own "
                             "namespace", source=deploy.source, field=f"sites.{s}", value=s)
        seen[t] = s


def check_catalog_names(problem: Problem, deploy: DeployFile, named_as: dict[str, str] | None = None) -> None:
    """Raise InputError (naming the deployment file and the field path) when its ``models`` names a model the
    plan's scenario does not have (by its catalog name, or by the scenario's name of it: ``named_as``, {catalog
    name: the scenario's name}) or one model by both names, or its ``gpu_labels`` a GPU type none of the scenario's
    pools has: the entry would be ignored silently (a misspelt model would keep the catalog's checkpoint)."""
    named_as = named_as or {}
    models = [m.name for m in problem.models] + [n for c, n in named_as.items() if c in problem.model_by_name]
    for catalog, scenario_name in named_as.items():
        if catalog in deploy.models and scenario_name in deploy.models:
            raise InputError(f"the deployment file gives model {scenario_name} two checkpoints, under both its "
                             f"names ({scenario_name} and its catalog name {catalog}); keep one entry",
                             source=deploy.source, field=f"models.{catalog}", value=catalog)
    for name in deploy.models:
        if name not in models:
            raise InputError(f"the deployment file gives a checkpoint for model {name!r}, which the plan's scenario "
                             f"does not have; {_close_hint(name, models)}its models: {', '.join(models)}; fix or "
                             "remove the entry", source=deploy.source, field=f"models.{name}", value=name)
    gpus = sorted({p.gpu for p in problem.pools})
    for gpu in deploy.gpu_labels:
        if gpu not in gpus:
            raise InputError(f"the deployment file gives a node label for GPU type {gpu!r}, which no site of the "
                             f"plan's scenario has; {_close_hint(gpu, gpus)}its GPU types: {', '.join(gpus)}; fix or "
                             "remove the entry", source=deploy.source, field=f"gpu_labels.{gpu}", value=gpu)
