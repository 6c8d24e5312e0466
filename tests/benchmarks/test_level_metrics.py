"""The math environment's mean reward per difficulty level: asked for only where the instance says so (rows cost
the server memory), computed over the rows that carry a `level`, and shown among the key metrics."""

from nemo_gym.config.servers import ServerSpec
from nemo_gym.resources_servers.math.app import MathResourcesServer

ROWS = [{"_ng_task_index": 0, "level": 1, "reward": 1.0}, {"_ng_task_index": 0, "level": 1, "reward": 1.0},
        {"_ng_task_index": 1, "level": 2, "reward": 0.0}, {"_ng_task_index": 1, "level": 2, "reward": 1.0},
        {"_ng_task_index": 2, "reward": 0.0}]


def _server(**settings: object) -> MathResourcesServer:
    return MathResourcesServer(ServerSpec("math", "resources_servers", "math", dict(settings)))


def test_rows_are_asked_for_only_by_an_instance_with_per_level_metrics() -> None:
    assert _server().needs_rows() is False  # math/configs/math.yaml: a plain run sends no rows
    assert _server(per_level_metrics=True).needs_rows() is True


def test_mean_reward_per_level_and_in_the_key_metrics() -> None:
    server = _server(per_level_metrics=True)
    metrics = server.compute_metrics(ROWS)
    assert metrics == {"level_1/mean_reward": 1.0, "level_1/num_rollouts": 2,
                       "level_2/mean_reward": 0.5, "level_2/num_rollouts": 2}
    assert server.key_metrics({"mean/reward": 0.6, **metrics}) == {
        "mean/reward": 0.6, "level_1/mean_reward": 1.0, "level_2/mean_reward": 0.5}
    assert server.compute_metrics([{"_ng_task_index": 0, "reward": 1.0}]) == {}
