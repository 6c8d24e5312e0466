"""A GRPO trainer on the experience layer (run it with `python -m examples.grpo.train`; see docs/trainers.md)."""
