"""A simulated fleet of vLLM replicas (continuous batching, KV cache, prefix cache, heavy-tailed outputs), served over
HTTP many to a process or run in simulated time with the collector's concurrency control and vllm_model's router:
what the fleet benchmark (benchmarks/perf/fleet.py) and the fleet tests (tests/fleet/) measure against."""
