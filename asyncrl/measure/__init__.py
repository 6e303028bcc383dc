"""The measurements behind `asyncrl bench` and `asyncrl tune`, each on this machine, and the
benchmarks that measure the engine:

- raw.py: the simulation limit, the env alone stepped with random actions (raw_fps);
- engine.py: the engine for a while, learning or sampling only: frames/s after a warm-up and the
  CPU each role used meanwhile (engine_run);
- costs.py: the compute limit, the CPU time per agent step of simulation, inference and learning,
  each alone on one core with the engine's own code, and the frames/s they allow (compute_limit).
"""
