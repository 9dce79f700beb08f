"""Scenario texts that several test files start from (imported as a plain module, like service_support)."""

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
