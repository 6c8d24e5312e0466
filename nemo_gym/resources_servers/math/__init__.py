"""Math environment: the reward checks the model's final answer against `expected_answer` with math_verify."""
