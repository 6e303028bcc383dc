"""One-off investigations, each with its results in studies/results/."""
