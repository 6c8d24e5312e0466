"""run_examples through the shipped simple_agent + example_single_tool_call environment (only the model is
scripted): real verifier rewards, and the keys set exactly as the CLI sets them."""

from pathlib import Path

import orjson

from nemo_gym.rollout_collection import RolloutCollectionHelper
from nemo_gym.sync_bridge import run_sync
from tests.collection.test_real_agent import AGENT, SCRIPTED_MODEL, WEATHER_ROWS
from tests.helpers.stack import environment_config, running_stack


def test_real_agent_rows_with_and_without_keys(tmp_path: Path) -> None:
    model = {"policy_model": {"responses_api_models": {"scripted_model": {"entrypoint": str(SCRIPTED_MODEL)}}}}
    (tmp_path / "model.yaml").write_bytes(orjson.dumps(model))
    configs = f"+config_paths=[{environment_config('example_single_tool_call')},{tmp_path / 'model.yaml'}]"
    base = [orjson.loads(line) for line in WEATHER_ROWS.read_bytes().splitlines() if line.strip()]
    keyed = [{**row, "agent_ref": {"name": AGENT}, "_ng_task_index": 100 + i, "_ng_rollout_index": 3}
             for i, row in enumerate(base)]
    plain = [{**row, "agent_ref": {"name": AGENT}} for row in base]

    async def collect(head_url: str) -> list[tuple[dict, dict]]:
        helper = RolloutCollectionHelper(head_url)
        out = [item async for item in helper.run_examples(keyed, num_samples_in_parallel=3)]
        for future in helper.run_examples(plain, num_samples_in_parallel=3):
            out.append(await future)
        return out

    with running_stack([configs], cwd=tmp_path) as stack:
        results = run_sync(collect(stack.head_url))
    assert len(results) == 2 * len(base)
    for row, result in results:
        assert result["reward"] == 1.0 and result["agent_ref"] == {"name": AGENT}
        assert result["expected_city"] == row["expected_city"]
        assert [item["type"] for item in result["response"]["output"]][-1] == "message"
        if "_ng_task_index" in row:
            assert (result["_ng_task_index"], result["_ng_rollout_index"]) == (row["_ng_task_index"], 3)
        else:
            assert "_ng_task_index" not in result and "_ng_rollout_index" not in result
    assert sorted(r["_ng_task_index"] for r, _ in results[:len(base)]) == list(range(100, 100 + len(base)))
