"""Scenario texts that several test files start from (imported as a plain module, like service_support)."""

from pathlib import Path

import yaml

#: The shipped default scenario's file.
DEFAULT_SCENARIO = Path(__file__).parents[1] / "datasets" / "scenarios" / "default.yaml"


def default_with_one_model(folder: Path, model: str, engine: dict) -> Path:
    """A copy of the shipped default scenario, written to ``folder``/s.yaml, with only ``model`` and its
    ``engine`` key set to ``engine``; returns the file's path."""
    raw = yaml.safe_load(DEFAULT_SCENARIO.read_text())
    raw["models"] = [m for m in raw["models"] if m["name"] == model]
    raw["models"][0]["engine"] = engine
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path

# The README's small scenario (one H100 node, one model, three hourly rates), written out as YAML text so each test
# can break one line of it.
SMALL = """\
name: small
options: {window_length_s: 3600, margin: 0.1}
sites:
  - name: aws:us-east-1
    inventory:
      - {gpu: H100, nodes: 1, gpus_per_node: 8}
models:
  - name: Llama-3.1-8B
    tp: [1, 2]
    min_replicas: 1
    slo: {ttft_p95_s: 1.5, tpot_p95_s: 0.1}
    token_mix: {trace: azure-conv}
    demand: {rates: [1.0, 4.0, 12.0]}
"""


def two_gpu_8b(name: str, *, tpot_p95_s: float = 0.1, rates: str = "[2, 8, 16, 6]") -> str:
    """A scenario text: one aws:us-east-1 site with an 8-GPU A100-80GB node and an 8-GPU H100 node, Llama-3.1-8B at
    tp 1 with a 1.5-s TTFT and ``tpot_p95_s`` TPOT target, a fixed token mix and ``rates`` (req/s) over four
    6-hour windows."""
    return f"""
name: {name}
options: {{window_length_s: 21600}}
sites:
  - name: aws:us-east-1
    inventory:
      - {{gpu: A100-80GB, nodes: 1, gpus_per_node: 8}}
      - {{gpu: H100, nodes: 1, gpus_per_node: 8}}
models:
  - name: Llama-3.1-8B
    tp: [1]
    slo: {{ttft_p95_s: 1.5, tpot_p95_s: {tpot_p95_s}}}
    token_mix: {{input_tokens_mean: 400, input_tokens_p95: 900, output_tokens_mean: 100, output_tokens_p95: 200}}
    demand: {{rates: {rates}}}
"""
