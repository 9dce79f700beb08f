# fleetplan export vllm: launch commands per node for plan disagg-wins.
# Run each node's block on that node (its servers run in the background; `wait` keeps the shell). Between
# windows, stop the servers a window drops only once the ones it starts answer /health.

## window 00:00-06:00
### aws:us-east-1 / H100-SXM-80GB node 1 of 4
NODE_IP=$(hostname -I | awk '{print $1}')  # the address the NIXL handshake advertises
CUDA_VISIBLE_DEVICES=0,1 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 28 --max-model-len 39152 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2,3 VLLM_NIXL_SIDE_CHANNEL_HOST=$NODE_IP VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 28 --max-model-len 39152 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' &
CUDA_VISIBLE_DEVICES=4,5 VLLM_NIXL_SIDE_CHANNEL_HOST=$NODE_IP VLLM_NIXL_SIDE_CHANNEL_PORT=5601 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8002 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-model-len 39152 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' &
wait
### routing proxy for Llama-3.1-70B (prefill -> decode; clients call the proxy, not these servers)
# prefill servers: aws:us-east-1 / H100-SXM-80GB node 1 of 4: port 8002
# decode servers: aws:us-east-1 / H100-SXM-80GB node 1 of 4: port 8001

## window 06:00-12:00
### aws:us-east-1 / H100-SXM-80GB node 1 of 4
NODE_IP=$(hostname -I | awk '{print $1}')  # the address the NIXL handshake advertises
CUDA_VISIBLE_DEVICES=0,1,2,3 VLLM_NIXL_SIDE_CHANNEL_HOST=$NODE_IP VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 125 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' &
CUDA_VISIBLE_DEVICES=4,5,6,7 VLLM_NIXL_SIDE_CHANNEL_HOST=$NODE_IP VLLM_NIXL_SIDE_CHANNEL_PORT=5601 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' &
wait
### aws:us-east-1 / H100-SXM-80GB node 2 of 4
NODE_IP=$(hostname -I | awk '{print $1}')  # the address the NIXL handshake advertises
CUDA_VISIBLE_DEVICES=0,1 VLLM_NIXL_SIDE_CHANNEL_HOST=$NODE_IP VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-model-len 39152 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' &
wait
### routing proxy for Llama-3.1-70B (prefill -> decode; clients call the proxy, not these servers)
# prefill servers: aws:us-east-1 / H100-SXM-80GB node 1 of 4: port 8001; aws:us-east-1 / H100-SXM-80GB node 2 of 4: port 8000
# decode servers: aws:us-east-1 / H100-SXM-80GB node 1 of 4: port 8000

## window 12:00-18:00
### aws:us-east-1 / H100-SXM-80GB node 1 of 4
NODE_IP=$(hostname -I | awk '{print $1}')  # the address the NIXL handshake advertises
CUDA_VISIBLE_DEVICES=0,1,2,3 VLLM_NIXL_SIDE_CHANNEL_HOST=$NODE_IP VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 125 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' &
CUDA_VISIBLE_DEVICES=4,5,6,7 VLLM_NIXL_SIDE_CHANNEL_HOST=$NODE_IP VLLM_NIXL_SIDE_CHANNEL_PORT=5601 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' &
wait
### aws:us-east-1 / H100-SXM-80GB node 2 of 4
NODE_IP=$(hostname -I | awk '{print $1}')  # the address the NIXL handshake advertises
CUDA_VISIBLE_DEVICES=0,1 VLLM_NIXL_SIDE_CHANNEL_HOST=$NODE_IP VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-model-len 39152 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' &
wait
### routing proxy for Llama-3.1-70B (prefill -> decode; clients call the proxy, not these servers)
# prefill servers: aws:us-east-1 / H100-SXM-80GB node 1 of 4: port 8001; aws:us-east-1 / H100-SXM-80GB node 2 of 4: port 8000
# decode servers: aws:us-east-1 / H100-SXM-80GB node 1 of 4: port 8000

## window 18:00-00:00
### aws:us-east-1 / H100-SXM-80GB node 1 of 4
NODE_IP=$(hostname -I | awk '{print $1}')  # the address the NIXL handshake advertises
CUDA_VISIBLE_DEVICES=0,1,2,3 VLLM_NIXL_SIDE_CHANNEL_HOST=$NODE_IP VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 125 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' &
CUDA_VISIBLE_DEVICES=4,5,6,7 VLLM_NIXL_SIDE_CHANNEL_HOST=$NODE_IP VLLM_NIXL_SIDE_CHANNEL_PORT=5601 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' &
wait
### routing proxy for Llama-3.1-70B (prefill -> decode; clients call the proxy, not these servers)
# prefill servers: aws:us-east-1 / H100-SXM-80GB node 1 of 4: port 8001
# decode servers: aws:us-east-1 / H100-SXM-80GB node 1 of 4: port 8000
