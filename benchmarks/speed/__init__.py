"""How fast: frames per second against the raw env, the compute limit and the core count."""
