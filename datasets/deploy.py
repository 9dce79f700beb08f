"""Readers of datasets/data/deploy/: the GPU-type node labels and the vLLM image that ``fleetplan export`` writes.

Sources of every value: datasets/data/deploy/PROVENANCE.md and the files' source columns.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from fleetplan.errors import InputError

_DIR = ("data", "deploy")


def _rows(name: str, columns: tuple[str, ...]) -> list[dict[str, str]]:
    text = resources.files("fleetplan.datasets").joinpath(*_DIR, name).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    if rows and not set(columns) <= set(rows[0]):
        raise InputError(f"missing columns {sorted(set(columns) - set(rows[0]))}",
                         source=f"datasets/data/deploy/{name}")
    return rows


@lru_cache(maxsize=1)
def gpu_product_labels() -> dict[str, str]:
    """{catalog GPU name: the ``nvidia.com/gpu.product`` value GPU feature discovery sets on its nodes}
    (gpu_products.csv; GPUs without a confirmed label are absent)."""
    return {r["gpu"]: r["gpu_product_label"] for r in _rows("gpu_products.csv", ("gpu", "gpu_product_label"))}


@dataclass(frozen=True)
class VllmDefaults:
    """The serving engine the exported manifests and launch commands run (vllm.csv).

    Attributes:
        image: container image of vLLM's OpenAI-compatible server.
        port: the server's first port (a second server on a shared GPU takes the next one).
        multi_node_script: path, inside the image, of the Ray bootstrap script for pipeline stages on several nodes.
        ray_port: port of the Ray head on a group's leader.
        kv_connector: vLLM KV connector of disaggregated prefill/decode servers (``--kv-transfer-config``).
        nixl_side_channel_port: first NIXL handshake port (``VLLM_NIXL_SIDE_CHANNEL_PORT``) on a host.
    """

    image: str
    port: int
    multi_node_script: str
    ray_port: int
    kv_connector: str
    nixl_side_channel_port: int


@lru_cache(maxsize=1)
def vllm_defaults() -> VllmDefaults:
    """The :class:`VllmDefaults` in vllm.csv. Raises InputError when a key is missing or a port is not a number."""
    values = {r["key"]: r["value"] for r in _rows("vllm.csv", ("key", "value", "source"))}
    try:
        return VllmDefaults(image=values["image"], port=int(values["port"]),
                            multi_node_script=values["multi_node_script"], ray_port=int(values["ray_port"]),
                            kv_connector=values["kv_connector"],
                            nixl_side_channel_port=int(values["nixl_side_channel_port"]))
    except (KeyError, ValueError) as exc:
        raise InputError(f"bad or missing entry {exc}", source="datasets/data/deploy/vllm.csv") from None


#: A vLLM version as written in a scenario: a release line and optional patch parts ('0.11', '0.11.0', '0.5.4',
#: '0.10.1.1', '0.6.3.post1').
_VLLM_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.\d+)*(?:\.?post\d+)?")


@lru_cache(maxsize=1)
def vllm_release_lines() -> tuple[str, ...]:
    """The vLLM release lines ('0.1' ... '0.25') that exist (vllm_releases.csv: each with a release tag, its page on
    GitHub and a public page naming that release), oldest first."""
    return tuple(r["release_line"] for r in _rows("vllm_releases.csv", ("release_line", "tag", "source", "seen_in")))


def unknown_vllm_version(version: str) -> str | None:
    """Why ``version`` (an engine version as a scenario gives it) names no vLLM release, with the fix, or None when
    its release line is in :func:`vllm_release_lines` (a patch number is not checked: '0.11.7' passes with 0.11)."""
    lines = vllm_release_lines()
    m = _VLLM_VERSION.fullmatch(version)
    if m is None:
        return (f"{version!r} is not a vLLM version; give a release's number, e.g. version: \"0.11\" or "
                "\"0.5.4\" (no 'v' and no engine name)")
    line = f"{int(m[1])}.{int(m[2])}"
    if line not in lines:
        return (f"vLLM {version} does not exist: the known release lines are {', '.join(lines)} "
                "(datasets/data/deploy/vllm_releases.csv); give one of them, e.g. version: \"0.11\" (a newer "
                "release: add its line to that file)")
    return None
