"""What a model call costs: the price table (USD per million tokens, per model) and the one rule that prices a call.

The collector prices each call as it writes the rollout (`ModelCall.cost_usd` in the row's `_ng_model_calls`), with
its run's table: the defaults shipped in `model_prices.yaml` (dated: prices change), overridden model by model and
extended by the user's `+prices_fpath=`. Everything after it (metrics, the progress file, the viewer, the budget)
adds up the recorded costs with `rollout_cost`: a row keeps the price it was collected at, no server needs the table,
and every place shows the same numbers. A model the table does not list has no cost (None, shown as "n/a"), never 0.

Token counts follow the OpenAI convention of `model_calls.usage_counts`: cached tokens are part of the input tokens
(priced at `cached_input` instead of `input`), reasoning tokens part of the output tokens.
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from nemo_gym.errors import ConfigError
from nemo_gym.model_calls import ModelCall

DEFAULT_PRICES_FPATH = Path(__file__).with_name("model_prices.yaml")
TOKENS_PER_PRICE = 1_000_000  # prices are per million tokens
_FIELDS = ("input", "cached_input", "output")
_REQUIRED = ("input", "output")


@dataclass(frozen=True)
class Price:
    """USD per million tokens of one model."""

    input: float
    cached_input: float
    output: float

    def cost(self, call: ModelCall) -> float | None:
        """USD of `call`; None when it reports no input or output token count to price."""
        if call.input_tokens is None or call.output_tokens is None:
            return None
        cached = min(call.cached_tokens or 0, call.input_tokens)
        return ((call.input_tokens - cached) * self.input + cached * self.cached_input
                + call.output_tokens * self.output) / TOKENS_PER_PRICE


class PriceTable:
    """Prices by model name, matched exactly (a table lists every name it should price)."""

    def __init__(self, prices: dict[str, Price]) -> None:
        self.prices = prices

    def cost(self, call: ModelCall) -> float | None:
        price = self.prices.get(call.model)
        return None if price is None else price.cost(call)


def _bad(path: Path, what: str) -> ConfigError:
    return ConfigError(f"price table {path}: {what}")


def _usd(path: Path, model: str, name: str, value: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise _bad(path, f"model {model!r}, field {name!r}: must be a non-negative number (USD per million "
                         f"tokens), got {value!r}")
    return float(value)


def _price(path: Path, model: str, entry: Any) -> Price:
    if not isinstance(entry, dict):
        raise _bad(path, f"model {model!r}: must map {', '.join(_FIELDS)} to prices, got {entry!r}")
    for name in entry:
        if name not in _FIELDS:
            raise _bad(path, f"model {model!r}, field {name!r}: is not one of {', '.join(_FIELDS)}")
    for name in _REQUIRED:
        if name not in entry:
            raise _bad(path, f"model {model!r}, field {name!r}: is missing")
    usd = {name: _usd(path, model, name, value) for name, value in entry.items()}
    return Price(usd["input"], usd.get("cached_input", usd["input"]), usd["output"])  # no cache price: no discount


def load_prices(path: Path) -> dict[str, Price]:
    """The `models:` of the table at `path` (YAML or JSON); a ConfigError names the file, model and field at fault."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"price table {path}: cannot be read ({exc})") from None
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise _bad(path, "must be a mapping with `models: {model name: {input: ..., cached_input: ..., output: "
                         "...}}` (USD per million tokens)")
    return {str(model): _price(path, str(model), entry) for model, entry in models.items()}


def price_table(user_fpath: Path | None = None) -> PriceTable:
    """The shipped defaults, with the entries of the user's table at `user_fpath` replacing or adding models."""
    prices = load_prices(DEFAULT_PRICES_FPATH)
    if user_fpath is not None:
        prices.update(load_prices(user_fpath))
    return PriceTable(prices)


def rollout_cost(calls: Iterable[ModelCall]) -> float | None:
    """USD of a rollout: the sum of its calls' recorded costs; None when no call has one."""
    costs = [call.cost_usd for call in calls if call.cost_usd is not None]
    return math.fsum(costs) if costs else None


def format_usd(value: float | None) -> str:
    """'$1,234.57', '$0.003512' (four significant digits below a dollar), or 'n/a' for no cost."""
    if value is None:
        return "n/a"
    return f"${value:,.2f}" if value >= 1 else f"${value:.4g}"
