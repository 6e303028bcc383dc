"""The benchmarks, grouped by the question they answer, each run from the repository's root as a
module (`python -m benchmarks.speed.scaling ...`):

- speed: frames per second against the raw env, the compute limit and the core count;
- peers: asyncrl beside Sample Factory and CleanRL run on this machine;
- learning: learning curves and suites over seeds;
- robustness: long runs, and what runs leave behind;
- features: what a feature costs or gives (PBT, self-play, DD-PPO, remote envs, tune, ...);
- studies: one-off investigations.

common.py holds what the scripts share (launching runs, provenance, writing results);
provenance.py writes the results' index (benchmarks/README.md).
"""
