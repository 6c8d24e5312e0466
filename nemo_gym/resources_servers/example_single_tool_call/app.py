"""Reward 1.0 when the response calls `get_weather` with the row's `expected_city` (case-insensitive), else 0.0."""

from typing import Any

import orjson

from nemo_gym.protocol import function_calls
from nemo_gym.resources_servers.base import ResourcesServer, tool

CANNED_WEATHER = {
    "paris": "light rain, 14 °C",
    "tokyo": "clear, 22 °C",
    "new york": "windy, 9 °C",
    "sydney": "sunny, 26 °C",
    "cairo": "hot and dry, 35 °C",
}
DEFAULT_WEATHER = "cloudy, 18 °C"


def _called_cities(response: dict[str, Any]) -> list[str]:
    cities = []
    for call in function_calls(response):
        if call.get("name") != "get_weather":
            continue
        try:
            arguments = orjson.loads(str(call.get("arguments") or "{}"))
        except orjson.JSONDecodeError:
            continue
        if isinstance(arguments, dict) and isinstance(arguments.get("city"), str):
            cities.append(arguments["city"])
    return cities


class ExampleSingleToolCall(ResourcesServer):
    @tool
    async def get_weather(self, city: str) -> dict[str, str]:
        return {"city": city, "weather": CANNED_WEATHER.get(city.strip().lower(), DEFAULT_WEATHER)}

    async def verify(self, row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        expected = str(row.get("expected_city", "")).strip().lower()
        matched = any(city.strip().lower() == expected for city in _called_cities(response))
        return {"reward": 1.0 if expected and matched else 0.0}
