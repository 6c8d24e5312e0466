"""The number-guessing resources server in-process: seed_session, /step, verify and their errors, plus the
turn-based base's guard against a tool named like its route."""

from typing import Any

import pytest
from starlette.testclient import TestClient

from nemo_gym.config.servers import ServerSpec
from nemo_gym.protocol import SESSION_HEADER
from nemo_gym.resources_servers import tool
from nemo_gym.resources_servers.number_guess.app import NumberGuessResourcesServer
from nemo_gym.resources_servers.turn_based import TurnBasedResourcesServer

ROW = {"responses_create_params": {"input": "guess"}, "secret": 30, "low": 1, "high": 50}
RESPONSE = {"id": "resp_1", "object": "response", "status": "completed", "output": []}


def _client() -> TestClient:
    return TestClient(NumberGuessResourcesServer(ServerSpec("ng", "resources_servers", "number_guess")).app())


def _step(client: TestClient, session: str, text: Any) -> Any:
    return client.post("/step", json={"text": text}, headers={SESSION_HEADER: session})


def test_a_game_over_http_sums_turn_rewards_per_session() -> None:
    with _client() as client:
        a, b = {SESSION_HEADER: "a"}, {SESSION_HEADER: "b"}
        assert client.post("/seed_session", json=ROW, headers=a).json() == {}
        assert client.post("/seed_session", json={**ROW, "secret": 7}, headers=b).json() == {}
        assert _step(client, "a", "25").json() == {"observation": "Higher.", "reward": 0.0, "terminated": False,
                                                    "turn": 1}
        assert _step(client, "a", "pass").json()["observation"].startswith("Invalid guess")
        assert _step(client, "b", "7").json() == {"observation": "Correct! The number was 7.", "reward": 1.0,
                                                  "terminated": True, "turn": 1}
        done = _step(client, "b", "7")
        assert done.status_code == 409 and "ended after turn 1" in done.json()["error"]["message"]
        assert _step(client, "a", "It is 30").json()["terminated"] is True

        verified = client.post("/verify", json={**ROW, "response": RESPONSE}, headers=a).json()
        assert verified["reward"] == 1.0 and verified["turns"] == 3 and verified["solved"] is True
        assert verified["invalid_guesses"] == 1 and verified["secret"] == 30
        # The session's game went with its verify.
        assert _step(client, "a", "30").status_code == 400


def test_unsolved_game_verifies_to_zero() -> None:
    with _client() as client:
        headers = {SESSION_HEADER: "s"}
        client.post("/seed_session", json=ROW, headers=headers)
        _step(client, "s", "1")
        verified = client.post("/verify", json={**ROW, "response": RESPONSE}, headers=headers).json()
        assert (verified["reward"], verified["turns"], verified["solved"]) == (0.0, 1, False)


def test_protocol_errors_are_4xx_with_a_reason() -> None:
    with _client() as client:
        no_game = _step(client, "unseeded", "5")
        assert no_game.status_code == 400 and "call /seed_session first" in no_game.json()["error"]["message"]
        no_header = client.post("/seed_session", json=ROW)
        assert no_header.status_code == 400 and SESSION_HEADER in no_header.json()["error"]["message"]
        bad_row = client.post("/seed_session", json={**ROW, "secret": 99}, headers={SESSION_HEADER: "x"})
        assert bad_row.status_code == 400 and "outside [1, 50]" in bad_row.json()["error"]["message"]
        client.post("/seed_session", json=ROW, headers={SESSION_HEADER: "y"})
        assert _step(client, "y", 5).status_code == 400
        unverifiable = client.post("/verify", json={**ROW, "response": RESPONSE}, headers={SESSION_HEADER: "z"})
        assert unverifiable.status_code == 400 and "reward" not in unverifiable.json()


def test_a_tool_cannot_shadow_the_step_route() -> None:
    class Clash(TurnBasedResourcesServer):
        @tool
        async def step(self, text: str) -> dict:
            return {}

    with pytest.raises(ValueError, match="clashes"):
        Clash(ServerSpec("clash", "resources_servers", "clash")).routes()
