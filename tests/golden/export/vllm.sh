# fleetplan export vllm: launch commands per node for plan default.
# Run each node's block on that node (its servers run in the background; `wait` keeps the shell). Between
# windows, stop the servers a window drops only once the ones it starts answer /health.

## window 00:00-01:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 01:00-02:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 02:00-03:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 03:00-04:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 04:00-05:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 05:00-06:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 06:00-07:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 07:00-08:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 08:00-09:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 09:00-10:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 10:00-11:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 11:00-12:00
### aws:us-east-1 / H100-SXM-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 398 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 12:00-13:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 13:00-14:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 14:00-15:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 15:00-16:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 16:00-17:00
### aws:us-east-1 / H100-SXM-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 398 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 17:00-18:00
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8001 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 2 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 18:00-19:00
### aws:us-east-1 / H100-SXM-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 398 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 19:00-20:00
### aws:us-east-1 / H100-SXM-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 398 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 20:00-21:00
### aws:us-east-1 / H100-SXM-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 398 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 2048 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8003/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=4 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8004 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 21:00-22:00
### aws:us-east-1 / H100-SXM-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 398 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 2048 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=4 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8003/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=4 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8004 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 22:00-23:00
### aws:us-east-1 / H100-SXM-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 398 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait

## window 23:00-00:00
### aws:us-east-1 / H100-SXM-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B --served-model-name Llama-3.1-70B --host 0.0.0.0 --port 8000 --tensor-parallel-size 4 --pipeline-parallel-size 1 --max-num-seqs 398 --max-model-len 131072 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
wait
### gcp:us-central1 / A100-SXM4-80GB node 1 of 2
CUDA_VISIBLE_DEVICES=0,1 vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --served-model-name Mixtral-8x7B --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=2 vllm serve Qwen/Qwen2.5-7B-Instruct --served-model-name Qwen2.5-7B --host 0.0.0.0 --port 8001 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 256 --max-model-len 32768 --gpu-memory-utilization 0.900 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 1024 --enable-prefix-caching &
CUDA_VISIBLE_DEVICES=3 vllm serve meta-llama/Llama-3.1-8B --served-model-name Llama-3.1-8B --host 0.0.0.0 --port 8002 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 24 --max-model-len 34800 --gpu-memory-utilization 0.450 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
until curl -sf http://127.0.0.1:8002/health >/dev/null; do sleep 5; done
CUDA_VISIBLE_DEVICES=3 vllm serve mistralai/Mistral-7B-Instruct-v0.1 --served-model-name Mistral-7B-v0.1 --host 0.0.0.0 --port 8003 --tensor-parallel-size 1 --pipeline-parallel-size 1 --max-num-seqs 34 --max-model-len 32768 --gpu-memory-utilization 0.449 --dtype bfloat16 --kv-cache-dtype auto --max-num-batched-tokens 512 --enable-prefix-caching &
wait
