"""The CPU profile benchmark's reading of py-spy's raw output: samples by process, by library and by function."""

from benchmarks.perf.cpu_profile import library_of, parse_raw

SP = "/work/.venv/lib/python3.11/site-packages"
RAW = f"""process 101:"python -m nemo_gym.server.launch";run (/usr/lib/python3.11/asyncio/runners.py:118);_handle (httptools_impl.py);on_body ({SP}/uvicorn/protocols/http/httptools_impl.py:250) 30
process 101:"python -m nemo_gym.server.launch";run (/usr/lib/python3.11/asyncio/runners.py:118);post_json (/repo/nemo_gym/http_client.py:120) 10
process 100:"python -c ng_run";process 202:"python -m nemo_gym.server.launch";select (/usr/lib/python3.11/selectors.py:468) 5
process 100:"python -c ng_run";process 202:"python -m nemo_gym.server.launch";verify (/repo/nemo_gym/resources_servers/example_single_tool_call/app.py:40) 15
process 100:"python -c ng_run";process 202:"python -m nemo_gym.server.launch" 3
"""


def test_library_of_names_the_package_running() -> None:
    assert library_of(f"{SP}/aiohttp/client.py") == "aiohttp"
    assert library_of(f"{SP}/orjson.py") == "orjson"
    assert library_of("/usr/lib/python3.11/asyncio/base_events.py") == "asyncio"
    assert library_of("/usr/lib/python3.11/selectors.py") == "selectors"
    assert library_of("/repo/nemo_gym/http_client.py") == "nemo_gym/http_client"
    assert library_of("/repo/nemo_gym/server/base.py") == "nemo_gym/server"
    assert library_of("<frozen importlib._bootstrap>") == "?"


def test_parse_raw_counts_innermost_frames_per_process() -> None:
    parsed = parse_raw(RAW)
    assert set(parsed) == {101, 202}
    libraries, functions = parsed[101]
    assert libraries == {"uvicorn": 30, "nemo_gym/http_client": 10}
    assert functions == {"on_body (uvicorn)": 30, "post_json (nemo_gym/http_client)": 10}
    libraries, _ = parsed[202]  # the innermost process of a chain is the one sampled; no Python frame: "?"
    assert libraries == {"selectors": 5, "nemo_gym/resources_servers": 15, "?": 3}


def test_parse_raw_without_process_frames_puts_samples_under_none() -> None:
    parsed = parse_raw("main (/repo/benchmarks/perf/collector_child.py:20);loads (/repo/nemo_gym/jsonl_records.py:9) 7\n")
    assert parsed == {None: ({"nemo_gym/jsonl_records": 7}, {"loads (nemo_gym/jsonl_records)": 7})}
