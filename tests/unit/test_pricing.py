"""The price table (shipped defaults, the user's table over them, malformed tables refused by file, model and field)
and the one rule that prices a call."""

from pathlib import Path

import pytest
import yaml

from nemo_gym.errors import ConfigError
from nemo_gym.model_calls import ModelCall
from nemo_gym.pricing import DEFAULT_PRICES_FPATH, Price, format_usd, load_prices, price_table, rollout_cost


def _call(model: str, input_tokens: int | None = 1_000_000, output_tokens: int | None = 1_000_000,
          cached_tokens: int | None = None, cost_usd: float | None = None) -> ModelCall:
    return ModelCall(endpoint="https://api.example/v1", model=model, started_at=0.0, latency_s=0.1,
                     input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached_tokens,
                     cost_usd=cost_usd)


def _table(tmp_path: Path, models: object, name: str = "prices.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"models": models}))
    return path


def test_the_shipped_defaults_are_dated_and_price_well_known_models() -> None:
    shipped = yaml.safe_load(DEFAULT_PRICES_FPATH.read_text())
    assert isinstance(shipped["as_of"], str) and len(shipped["as_of"]) == 10  # YYYY-MM-DD
    table = price_table()
    assert table.prices["gpt-4o-mini"] == Price(input=0.15, cached_input=0.075, output=0.60)
    # A million input tokens, a quarter of them cached, and a million output tokens.
    assert table.cost(_call("gpt-4o-mini", cached_tokens=250_000)) == pytest.approx(0.75 * 0.15 + 0.25 * 0.075 + 0.6)


def test_the_users_table_replaces_and_adds_models(tmp_path: Path) -> None:
    user = _table(tmp_path, {"gpt-4o-mini": {"input": 1, "output": 2}, "my-model": {"input": 3, "cached_input": 1,
                                                                                  "output": 4}})
    table = price_table(user)
    assert table.prices["gpt-4o-mini"] == Price(1.0, 1.0, 2.0)  # no cached price: cached tokens cost as input
    assert table.prices["my-model"] == Price(3.0, 1.0, 4.0)
    assert table.prices["gpt-4o"] == price_table().prices["gpt-4o"]  # the defaults it does not name stay


def test_json_tables_are_read_too(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text('{"models": {"m": {"input": 0.5, "output": 1.5}}}')
    assert load_prices(path) == {"m": Price(0.5, 0.5, 1.5)}


def test_an_unknown_model_or_uncounted_tokens_have_no_cost_never_zero() -> None:
    table = price_table()
    assert table.cost(_call("no-such-model")) is None
    assert table.cost(_call("gpt-4o", output_tokens=None)) is None
    assert table.cost(_call("gpt-4o", input_tokens=None)) is None
    assert format_usd(None) == "n/a"


def test_a_call_is_priced_by_its_uncached_cached_and_output_tokens() -> None:
    price = Price(input=2.0, cached_input=0.5, output=8.0)
    assert price.cost(_call("m", 1000, 100, cached_tokens=400)) == pytest.approx((600 * 2 + 400 * 0.5 + 100 * 8) / 1e6)
    assert price.cost(_call("m", 1000, 100)) == pytest.approx((1000 * 2 + 100 * 8) / 1e6)
    # An endpoint that reports more cached tokens than input tokens is not credited for the excess.
    assert price.cost(_call("m", 10, 0, cached_tokens=50)) == pytest.approx(10 * 0.5 / 1e6)


def test_a_rollouts_cost_is_the_sum_of_its_recorded_call_costs() -> None:
    assert rollout_cost([_call("m", cost_usd=0.25), _call("m", cost_usd=0.5), _call("x")]) == 0.75
    assert rollout_cost([_call("x"), _call("y")]) is None
    assert rollout_cost([]) is None


@pytest.mark.parametrize(("models", "names"), [
    ({"m": {"input": -1, "output": 1}}, ("model 'm'", "field 'input'", "-1")),
    ({"m": {"input": "cheap", "output": 1}}, ("model 'm'", "field 'input'", "'cheap'")),
    ({"m": {"input": 1, "output": True}}, ("model 'm'", "field 'output'", "True")),
    ({"m": {"input": 1}}, ("model 'm'", "field 'output'", "missing")),
    ({"m": {"input": 1, "output": 2, "cache_read": 0.1}}, ("model 'm'", "field 'cache_read'", "not one of")),
    ({"m": [1, 2]}, ("model 'm'", "must map")),
])
def test_a_malformed_table_is_refused_naming_file_model_and_field(tmp_path: Path, models: object,
                                                                  names: tuple[str, ...]) -> None:
    path = _table(tmp_path, models)
    with pytest.raises(ConfigError) as caught:
        price_table(path)
    assert str(path) in str(caught.value)
    for name in names:
        assert name in str(caught.value)


def test_a_table_without_models_or_unreadable_is_refused_naming_the_file(tmp_path: Path) -> None:
    flat = tmp_path / "flat.yaml"
    flat.write_text(yaml.safe_dump({"gpt-4o": {"input": 1, "output": 2}}))
    with pytest.raises(ConfigError, match="flat.yaml: must be a mapping with `models:"):
        price_table(flat)
    with pytest.raises(ConfigError, match="missing.yaml: cannot be read"):
        price_table(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("models: {m: [")
    with pytest.raises(ConfigError, match="broken.yaml: cannot be read"):
        price_table(broken)
