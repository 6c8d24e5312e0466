"""Head-server detection (ours or NeMo Gym 0.4.0's) and what our head server answers NeMo Gym's clients."""

import asyncio
import json
from typing import Any

import httpx
import pytest
import yaml

from nemo_gym.compat.head_detect import NATIVE, NEMO_GYM, HeadServerError, detect_head, servers_from_instances
from nemo_gym.http_client import HttpClient
from nemo_gym.server.client import ServerClient
from nemo_gym.server.head import HeadServer
from tests.compat.threaded import json_app, serving
from tests.helpers.stack import free_port

LISTING = [
    {"name": "weather", "kind": "resources_servers", "implementation": "example_single_tool_call",
     "url": "http://127.0.0.1:40001"},
    {"name": "weather_agent", "kind": "responses_api_agents", "implementation": "simple_agent",
     "url": "http://127.0.0.1:40002"},
    {"name": "policy_model", "kind": "responses_api_models", "implementation": "vllm_model",
     "url": "http://127.0.0.1:40003"},
]
CONFIG = {
    "weather": {"resources_servers": {"example_single_tool_call": None}},
    "weather_agent": {"responses_api_agents": {"simple_agent": {"max_steps": 3}}},
    "policy_model": {"responses_api_models": {"vllm_model": {"base_url": "http://127.0.0.1:1/v1",
                                                             "api_key": "sk-unit-secret-77", "model": "m"}}},
}
# Exactly what NeMo Gym 0.4.0's ng_run puts in /server_instances (ServerInstanceDisplayConfig.model_dump).
NEMO_GYM_INSTANCES = [
    {"config_path": "example_single_tool_call_simple_agent", "dir_path": "/x/responses_api_agents/simple_agent",
     "entrypoint": "app.py", "host": "127.0.0.1", "name": "simple_agent", "pid": 123, "port": 10875,
     "process_name": "example_single_tool_call_simple_agent", "server_type": "responses_api_agents",
     "start_time": 1.0, "status": None, "uptime_seconds": None, "url": "http://127.0.0.1:10875"},
    {"config_path": "policy_model", "dir_path": "/x/responses_api_models/vllm_model", "entrypoint": "app.py",
     "host": "127.0.0.1", "name": "vllm_model", "pid": 124, "port": 17632, "process_name": "policy_model",
     "server_type": "responses_api_models", "start_time": 1.0, "status": None, "uptime_seconds": None,
     "url": None},
]


def _detect(url: str):
    async def run():
        http = HttpClient()
        try:
            return await detect_head(http, url)
        finally:
            await http.aclose()
    return asyncio.run(run())


def test_our_head_server_is_detected_as_ours() -> None:
    with serving(HeadServer(CONFIG, LISTING, ("127.0.0.1", 1)).app()) as url:
        listing = _detect(url)
    assert listing.kind == NATIVE and listing.servers == LISTING


def test_a_nemo_gym_head_server_is_detected_and_its_listing_translated() -> None:
    yaml_text = yaml.safe_dump({"policy_model": {"responses_api_models": {"vllm_model": {"api_key": "k"}}}})
    app = json_app({"/server_instances": NEMO_GYM_INSTANCES, "/global_config_dict_yaml": yaml_text})
    with serving(app) as url:
        listing = _detect(url)

        async def client_view() -> tuple[str, dict[str, Any], str | None]:
            http = HttpClient()
            try:
                client = ServerClient(url, http)
                return await client.url("policy_model"), await client.global_config(), client.head_kind
            finally:
                await http.aclose()

        model_url, config, kind = asyncio.run(client_view())
    assert listing.kind == NEMO_GYM
    assert listing.servers == [
        {"name": "example_single_tool_call_simple_agent", "kind": "responses_api_agents",
         "implementation": "simple_agent", "url": "http://127.0.0.1:10875"},
        # No url in the entry: built from its host and port.
        {"name": "policy_model", "kind": "responses_api_models", "implementation": "vllm_model",
         "url": "http://127.0.0.1:17632"},
    ]
    assert (model_url, kind) == ("http://127.0.0.1:17632", NEMO_GYM)
    assert config["policy_model"]["responses_api_models"]["vllm_model"]["api_key"] == "k"


def test_a_server_that_is_no_head_server_and_an_unreachable_one_are_clear_errors() -> None:
    with serving(json_app({"/health": {"status": "ok"}})) as url:
        with pytest.raises(HeadServerError, match="is no head server: neither /servers nor /server_instances"):
            _detect(url)
    with pytest.raises(HeadServerError, match=r"cannot reach the head server at .*is `ng_run` running\?"):
        _detect(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(HeadServerError, match="entry without process_name"):
        servers_from_instances([{"server_type": "responses_api_agents"}], "http://h")
    with pytest.raises(HeadServerError, match="did not answer with a list"):
        servers_from_instances({"servers": []}, "http://h")


def test_our_head_server_answers_nemo_gyms_endpoints_with_addresses_and_no_secret() -> None:
    with serving(HeadServer(CONFIG, LISTING, ("127.0.0.1", 23456)).app()) as url:
        raw = httpx.get(f"{url}/global_config_dict_yaml", trust_env=False)
        instances = httpx.get(f"{url}/server_instances", trust_env=False).json()
    assert "sk-unit-secret-77" not in raw.text
    # Read as NeMo Gym's ServerClient reads it: a JSON string, then YAML.
    config = yaml.safe_load(json.loads(raw.content.decode()))
    for server in LISTING:
        port = int(server["url"].rsplit(":", 1)[1])
        settings = config[server["name"]][server["kind"]][server["implementation"]]
        assert (settings["host"], settings["port"]) == ("127.0.0.1", port)
    assert config["weather_agent"]["responses_api_agents"]["simple_agent"]["max_steps"] == 3
    assert config["policy_model"]["responses_api_models"]["vllm_model"]["api_key"] == "***REDACTED***"
    assert config["head_server"] == {"host": "127.0.0.1", "port": 23456}
    assert [(i["process_name"], i["server_type"], i["name"], i["url"]) for i in instances] == [
        (s["name"], s["kind"], s["implementation"], s["url"]) for s in LISTING]
    assert all(i["host"] == "127.0.0.1" and isinstance(i["port"], int) for i in instances)
