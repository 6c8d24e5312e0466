"""Calling an external endpoint: our client (nemo_gym.http_wire, with its proxy and gzip support) against httpx.

    .venv/bin/python -m benchmarks.perf.external_http [--requests 3000] [--concurrency 32] [--rounds 2]

Whether HTTPS_PROXY/NO_PROXY and gzip should be taught to our client or left to httpx for non-loopback endpoints was
decided by this (docs/architecture.md, "External endpoints"). A child process serves, on loopback, a TLS endpoint
that answers every request with a gzip-encoded JSON body, and a forward proxy in front of it (tests/helpers/
forward_proxy.py, the ones the proxy tests start); `api.test` is a name only that proxy knows. Each client sends the
same JSON request, one at a time and `--concurrency` at a time, two ways: direct (https://localhost) and through the
proxy (https://api.test with HTTPS_PROXY set, a CONNECT tunnel), on uvloop as our servers run. The figures are the
client's CPU ms per request (its overhead per call) and the mean latency of a lone call; the ratios are httpx's CPU
per request over ours. Writes benchmarks/results/external_http.json.
"""

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvloop

from benchmarks.perf.http_clients import _drive
from benchmarks.perf.results import REPO_ROOT, load_average, recording
from nemo_gym.http_client import HttpClient

BODY = {"model": "stub", "messages": [{"role": "user", "content": "What's the weather in Paris?"}]}
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-benchmark"}


async def _serve(folder: Path) -> None:
    """The child: a TLS endpoint and a proxy in front of it, until stdin closes; their ports on stdout."""
    from tests.helpers.forward_proxy import ForwardProxy, JsonEndpoint, self_signed_cert

    cert = self_signed_cert(folder)
    async with JsonEndpoint(cert=cert, gzip_always=True) as endpoint, \
            ForwardProxy({"api.test:443": endpoint.port}) as proxy:
        print(json.dumps({"endpoint": endpoint.port, "proxy": proxy.port, "cert": str(cert[0])}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def with_nemo_gym(url: str, requests: int, concurrency: int) -> dict[str, float]:
    client = HttpClient(max_connections=concurrency)
    try:
        return await _drive(lambda: client.post_json(url, BODY, headers=HEADERS), requests, concurrency)
    finally:
        await client.aclose()


async def with_httpx(url: str, requests: int, concurrency: int) -> dict[str, float]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    # trust_env: httpx reads HTTPS_PROXY/NO_PROXY as ours does; the same trust store as ours.
    async with httpx.AsyncClient(timeout=httpx.Timeout(60, pool=None), limits=limits, trust_env=True,
                                 verify=ssl.create_default_context()) as client:
        content = orjson.dumps(BODY)

        async def send() -> Any:
            response = await client.post(url, content=content, headers=HEADERS)
            response.raise_for_status()
            return orjson.loads(response.content)

        return await _drive(send, requests, concurrency)


CLIENTS = {"nemo_gym": with_nemo_gym, "httpx": with_httpx}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="300 requests, one round")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # the child's side
    args = parser.parse_args()
    if args.serve:
        uvloop.run(_serve(args.serve))
        return
    if args.quick:
        args.requests, args.rounds = 300, 1
    runs: list[dict[str, Any]] = []
    with recording("external_http", args.quick) as recorder, tempfile.TemporaryDirectory(prefix="ng_ext_") as tmp, \
            subprocess.Popen([sys.executable, "-m", "benchmarks.perf.external_http", "--serve", tmp], cwd=REPO_ROOT,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stdin is not None
        try:
            ports = json.loads(child.stdout.readline())
            os.environ["SSL_CERT_FILE"] = ports["cert"]  # both clients trust the endpoint's self-signed certificate
            routes = {"direct": (f"https://localhost:{ports['endpoint']}/v1/chat/completions", None),
                      "proxy": ("https://api.test/v1/chat/completions", f"http://127.0.0.1:{ports['proxy']}")}
            for _ in range(args.rounds):
                for route, (url, proxy) in routes.items():
                    for name in ("https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY"):
                        os.environ.pop(name, None)
                    if proxy:
                        os.environ["HTTPS_PROXY"] = proxy
                    for name, run in CLIENTS.items():
                        lone = uvloop.run(run(url, max(args.requests // 10, 50), 1))
                        loaded = uvloop.run(run(url, args.requests, args.concurrency))
                        row = {"client": name, "route": route,
                               "lone_call_ms": round(1000 / lone["requests_per_s"], 3),
                               "lone_client_cpu_ms_per_request": lone["client_cpu_ms_per_request"],
                               "concurrency": args.concurrency, "requests_per_s": loaded["requests_per_s"],
                               "client_cpu_ms_per_request": loaded["client_cpu_ms_per_request"],
                               "load_average": load_average()}
                        runs.append(row)
                        print(f"{route:<6} {name:<8} lone call {row['lone_call_ms']:.2f} ms  "
                              f"{row['client_cpu_ms_per_request']:.3f} client cpu-ms/request at {args.concurrency}  "
                              f"load {row['load_average']}", flush=True)
        finally:
            child.stdin.close()
            child.wait(timeout=30)

        def mean(client: str, route: str, key: str) -> float:
            values = [r[key] for r in runs if r["client"] == client and r["route"] == route]
            return round(sum(values) / len(values), 3)

        keys = ("lone_call_ms", "lone_client_cpu_ms_per_request", "client_cpu_ms_per_request")
        means = {route: {client: {key: mean(client, route, key) for key in keys} for client in CLIENTS}
                 for route in ("direct", "proxy")}
        ratios = {f"httpx_vs_nemo_gym_{key}_{route}": round(means[route]["httpx"][key] / means[route]["nemo_gym"][key],
                                                            2)
                  for route in means for key in ("lone_call_ms", "client_cpu_ms_per_request")}
        recorder.write(ratios, {"settings": {"requests": args.requests, "concurrency": args.concurrency,
                                             "rounds": args.rounds, "answer": "gzip-encoded JSON over TLS"},
                                "means": means, "runs": runs})


if __name__ == "__main__":
    main()
