"""fleetplan.export: a plan as a deployment: the workloads and vLLM server arguments of each window
(:mod:`.deployment`), Kubernetes manifests with the day's KEDA schedule (:mod:`.k8s`) and ``vllm serve`` commands per
node (:mod:`.vllm`)."""
