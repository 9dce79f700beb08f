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
