"""The processes of a run (runner, rollout workers, policy workers, learners, evaluator) and the
seams they plug into."""
