"""One sick replica beside a healthy one, through the real stack and a real vLLM: what the sick one costs the run.

    python -m benchmarks.perf.sick_replica [--quick] [--vllm-url URL]

The sick replica is a gateway in front of a dead engine: it answers every generation request 502 at once while
`/v1/models` still answers, so only real requests can tell it from a healthy replica. It fails fast, so it always
has the fewest requests in flight: before outlier ejection, load-aware routing gave it every new session and the
run stopped on its failure budget with 17 of 360 rollouts.

ng_collect_rollouts (default settings: automatic concurrency) runs ROWS math rows (the bundled arithmetic example,
repeated), in one run on one vLLM, alternately:
- healthy alone: vllm_model with the real vLLM as its only replica;
- with the sick one: vllm_model with the real vLLM and the gateway.
Records for each run: rollouts collected and failed, every key once, the gateway's requests, the replicas' state
(`GET /replicas`: requests, failures by class, ejections), and the ratio of the sick pair's throughput to the
healthy replica's alone. Writes benchmarks/results/sick_replica.json.
"""

import argparse
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from benchmarks.perf.harness import Stack, ng_run, run_collector
from benchmarks.perf.results import REPO_ROOT, BenchmarkFailed, recording
from benchmarks.perf.vllm_server import MODEL_NAME, vllm_server
from nemo_gym.http_client import get_json_blocking
from nemo_gym.jsonl_records import iter_records
from nemo_gym.responses_api_models.stats_paths import REPLICAS_PATH
from nemo_gym.server.supervisor import free_port

MATH_CONFIG = "nemo_gym/resources_servers/math/configs/math.yaml"
MATH_ROWS = REPO_ROOT / "nemo_gym" / "resources_servers" / "math" / "data" / "arithmetic_example.jsonl"
MATH_AGENT = "math_simple_agent"
ROWS = 360
QUICK_ROWS = 60
PAIRS = 2  # healthy, sick, sick, healthy: drift over the run weighs on both sides alike


class FailingGateway:
    """A replica whose engine is dead: 502 to every POST at once, `/v1/models` answered; counts what it got."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.requests: Counter[str] = Counter()
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        app = Starlette(routes=[Route("/v1/models", self._models, methods=["GET"]),
                                Route("/{path:path}", self._dead, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    async def _models(self, request: Request) -> JSONResponse:
        self.requests["GET /v1/models"] += 1
        return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _dead(self, request: Request) -> JSONResponse:
        self.requests[f"POST {request.url.path}"] += 1
        return JSONResponse({"error": {"message": "upstream engine unavailable"}}, status_code=502)

    def __enter__(self) -> "FailingGateway":
        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def write_math_rows(path: Path, rows: int) -> Path:
    """`rows` rows of the bundled arithmetic example, repeated in order (each its own task)."""
    source = [row for _, row in iter_records(MATH_ROWS)]
    path.write_bytes(b"".join(orjson.dumps(source[i % len(source)]) + b"\n" for i in range(rows)))
    return path


@contextmanager
def math_stack(workdir: Path, base_urls: list[str], model: str = MODEL_NAME) -> Iterator[Stack]:
    """The math environment and its agent, and vllm_model in front of `base_urls`."""
    policy = (f"+policy_base_url=[{','.join(base_urls)}]", "+policy_api_key=EMPTY", f"+policy_model_name={model}")
    with ng_run(workdir, {}, (MATH_CONFIG, "configs/vllm_model.yaml"), policy) as stack:
        yield stack


def replica_states(stack: Stack) -> list[dict[str, Any]]:
    """vllm_model's `GET /replicas`, found through the head server."""
    servers = get_json_blocking(f"{stack.head_url}/servers", timeout_s=10)["servers"]
    (url,) = [server["url"] for server in servers if server["name"] == "policy_model"]
    return list(get_json_blocking(f"{url}{REPLICAS_PATH}", timeout_s=10)["replicas"])


def check_exactly_once(output: Path, rows: int) -> None:
    keys = Counter((row["_ng_task_index"], row["_ng_rollout_index"]) for _, row in iter_records(output))
    if len(keys) != rows or max(keys.values()) != 1:
        raise BenchmarkFailed(f"{output}: {len(keys)} distinct keys of {rows}, most repeated {max(keys.values())}x")


def collect(workdir: Path, base_urls: list[str], rows: Path, count: int) -> dict[str, Any]:
    """One collection of `rows` through a fresh stack; its figures and the replicas' state at the end."""
    output = workdir / "rollouts.jsonl"
    with math_stack(workdir / "stack", base_urls) as stack:
        result = run_collector(stack, rows, output, MATH_AGENT, 256, "+responses_create_params.max_output_tokens=64",
                               timeout_s=1200)
        replicas = replica_states(stack)
    check_exactly_once(output, count)
    return {"succeeded": result["succeeded"], "failed": result["failed"], "elapsed_s": result["elapsed_s"],
            "rollouts_per_s": round(result["succeeded"] / result["elapsed_s"], 3), "replicas": replicas}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_ROWS} rows, one pair")
    parser.add_argument("--vllm-url", help="a vLLM already serving the bundled model (development)")
    args = parser.parse_args()
    count, pairs = (QUICK_ROWS, 1) if args.quick else (ROWS, PAIRS)
    with recording("sick_replica", args.quick) as recorder, tempfile.TemporaryDirectory(prefix="ng_sick_") as tmp:
        scratch = Path(tmp)
        rows = write_math_rows(scratch / "rows.jsonl", count)
        runs: list[dict[str, Any]] = []
        with vllm_server(scratch, args.vllm_url) as vllm, FailingGateway(MODEL_NAME) as gateway:
            order = ["healthy", "sick", "sick", "healthy"][: 2 * pairs] if pairs > 1 else ["healthy", "sick"]
            for n, kind in enumerate(order):
                before = sum(gateway.requests.values())
                urls = [vllm] if kind == "healthy" else [vllm, gateway.base_url]
                run = collect(scratch / f"run{n}", urls, rows, count)
                run.update(kind=kind, gateway_requests=sum(gateway.requests.values()) - before)
                print(f"{kind}: {run['succeeded']} of {count} in {run['elapsed_s']} s, {run['failed']} failed, "
                      f"gateway got {run['gateway_requests']} requests", flush=True)
                runs.append(run)
            requests_by_path = dict(gateway.requests)

        def rate(kind: str) -> float:
            chosen = [run for run in runs if run["kind"] == kind]
            return sum(run["succeeded"] for run in chosen) / sum(run["elapsed_s"] for run in chosen)

        sick = [run for run in runs if run["kind"] == "sick"]
        recorder.write(
            {"sick_pair_over_healthy_alone": round(rate("sick") / rate("healthy"), 3)},
            {"settings": {"rows": count, "agent": MATH_AGENT, "max_output_tokens": 64,
                          "concurrency": "automatic (default), ceiling 256", "order": order},
             "collected_with_sick": [run["succeeded"] for run in sick],
             "failed_with_sick": [run["failed"] for run in sick],
             "gateway_requests_per_sick_run": [run["gateway_requests"] for run in sick],
             "gateway_requests_by_path": requests_by_path,
             "rollouts_per_s": {kind: round(rate(kind), 3) for kind in ("healthy", "sick")},
             "runs": runs})


if __name__ == "__main__":
    main()
