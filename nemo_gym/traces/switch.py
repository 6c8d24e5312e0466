"""Whether this process traces: `ACTIVE` is None while traces are off, the one check every traced path makes
(`nemo_gym.traces.start` sets it). Nothing here imports opentelemetry."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nemo_gym.traces.otel import Tracing

ACTIVE: "Tracing | None" = None
