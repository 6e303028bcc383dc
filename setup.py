from setuptools import setup

setup(
    name="asyncrl",
    version="0.1.0",
    description="Asynchronous APPO reinforcement learning at high throughput, in the style of Sample Factory",
    packages=["asyncrl", "envs"],
    python_requires=">=3.10",
    install_requires=[
        # a range, not a pin: an installed torch (CPU or CUDA build) is accepted as it is
        "torch>=2.1,<3",
        "numpy>=1.24",
        "faster-fifo>=1.4.5",
        "gymnasium>=1.0",
        "vizdoom>=1.2.3",
        "tensorboardX>=2.6",
        "psutil>=5.9",
        "setproctitle>=1.3",  # names each process in ps/top (asyncrl-rollout-0, ...); Python has no portable way
    ],
    # matplotlib only draws the benchmarks' PNGs; it is not needed to train
    extras_require={"test": ["pytest>=7"], "plots": ["matplotlib>=3.7"]},
    entry_points={"console_scripts": ["asyncrl=asyncrl.cli:main"]},
)
