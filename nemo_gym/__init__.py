"""nemo_gym: collect LLM rollouts scored by environments, for RL training and evaluation."""

__version__ = "0.1.0"
