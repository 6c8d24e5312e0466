"""Token counts of a run, from each rollout's `response.usage` (what the model server reported), for the
end-of-run summary: totals, means per rollout, and tokens per second."""

from dataclasses import dataclass
from typing import Any


@dataclass
class TokenTally:
    """A row listener of the runner: adds up the usage of every rollout that reports one."""

    rollouts: int = 0  # rollouts whose response carried usage
    input_tokens: int = 0
    output_tokens: int = 0

    def on_row(self, row: dict[str, Any]) -> None:
        response = row.get("response")
        usage = response.get("usage") if isinstance(response, dict) else None
        if not isinstance(usage, dict):
            return
        self.rollouts += 1
        self.input_tokens += int(usage.get("input_tokens") or 0)
        self.output_tokens += int(usage.get("output_tokens") or 0)

    def summary_line(self, elapsed_s: float) -> str | None:
        """'tokens: ...' for the summary, or None when no rollout reported usage."""
        if not self.rollouts:
            return None
        n, seconds = self.rollouts, max(elapsed_s, 1e-9)
        return (f"tokens: input {self.input_tokens} (mean {self.input_tokens / n:.1f} per rollout), "
                f"output {self.output_tokens} (mean {self.output_tokens / n:.1f}); "
                f"{self.output_tokens / seconds:.1f} output tokens/s, "
                f"{(self.input_tokens + self.output_tokens) / seconds:.1f} total tokens/s over {n} rollouts")
