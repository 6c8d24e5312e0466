"""Wire compatibility with NeMo Gym 0.4.0: its head server, `/aggregate_metrics` body and rollout markers.

Both directions: this toolkit's servers answer NeMo Gym's clients, and this toolkit's collector drives a NeMo Gym
stack. See docs/compatibility.md.
"""
