"""The model servers' GET routes that the collector reads (its progress line, its automatic level): defined once for
the server that serves each and the collector that reads it, apart from the servers so the collector need not load
a web server to name them."""

RATE_LIMITED_PATH = "/rate_limited"  # any model server: {"rate_limited": the 429s its endpoint answered since start}
REPLICAS_PATH = "/replicas"  # vllm_model: each replica's routing state
ENGINE_LOAD_PATH = "/engine_load"  # vllm_model: {"replicas": [each replica's EngineLoad, or its error]}
