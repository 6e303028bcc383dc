"""How well and how fast it learns: learning curves, and suites over seeds with their statistics."""
