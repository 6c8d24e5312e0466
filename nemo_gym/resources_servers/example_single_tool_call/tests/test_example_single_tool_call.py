"""The weather tool-call environment in-process: its verifier and its canned tool."""

import asyncio
from typing import Any

import pytest

from nemo_gym.config.servers import ServerSpec
from nemo_gym.resources_servers.example_single_tool_call.app import ExampleSingleToolCall
from tests.helpers.responses import function_call, message, response


# ---- weather ----


def _weather_server() -> ExampleSingleToolCall:
    return ExampleSingleToolCall(ServerSpec("weather", "resources_servers", "example_single_tool_call"))


@pytest.mark.parametrize(
    "items, reward",
    [
        ([function_call('{"city": "paris "}'), message("Rainy.")], 1.0),
        ([function_call('{"city": "Lyon"}'), function_call('{"city": "Paris"}')], 1.0),
        ([function_call('{"city": "Lyon"}')], 0.0),
        ([function_call('{"city": "Paris"}', name="get_time")], 0.0),
        ([function_call("{city: Paris")], 0.0),
        ([message("It is sunny in Paris.")], 0.0),
    ],
)
def test_weather_verify(items: list[dict[str, Any]], reward: float) -> None:
    row = {"expected_city": "Paris"}
    assert asyncio.run(_weather_server().verify(row, response(*items)))["reward"] == reward


def test_weather_tool_is_canned_and_case_insensitive() -> None:
    server = _weather_server()
    assert asyncio.run(server.get_weather("PARIS"))["weather"] == asyncio.run(server.get_weather("paris"))["weather"]
    assert "weather" in asyncio.run(server.get_weather("Atlantis"))
