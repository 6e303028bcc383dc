"""asyncrl vs PufferLib 3.0 on PufferLib's C cartpole and on gymnasium's CartPole-v1: frames/s and
time to a score, several seeds a configuration, one run at a time.

    python -m benchmarks.peers.pufferlib_compare [--seeds 3] [--configs NAME ...]

PufferLib trains with its own trainer (pufferlib_train.py) in its own virtualenv, made on first use
(default ~/.cache/asyncrl/pufferlib_venv) from its source archive on PyPI (sha256 checked). Its
setup.py cannot run as it is on a machine without GitHub: it downloads raylib's webassembly build
and box2d, and builds every one of its C envs. The build here changes three things in it: no
downloads (raylib's Linux build ships in the archive; box2d serves one env not built here); the C
cartpole's binding alone of its C envs; its advantage kernel built for the CPU (an nvcc on the PATH
without a CUDA install makes it try a CUDA build). It is installed without its pins: numpy at this
project's version (numpy<2 in its pins; at the same major version asyncrl imports the same compiled
binding), gymnasium 0.29.1 and gym 0.23.1 as pinned, heavyball 1.7.2 (its 3.x lacks the ForeachMuon
that the trainer imports), and the rest of what its trainer imports. PufferLib runs with torch's default
threads (both cores here: 1.4-1.5 times its frames/s with one thread).

asyncrl trains the C cartpole through the same compiled binding (benchmarks/peers/puffer_cartpole.py,
a vector env of a group's envs stepped by one C call). The C env's score is its episode length (at
most 200; PufferLib's "score"), CartPole-v1's its episode return (at most 500). Writes
benchmarks/results/peers/pufferlib_compare.{md,json}.
"""

import argparse
import glob
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

import numpy as np

from benchmarks.common import (
    REPO,
    env_steps_per_second,
    first_reaching,
    machine,
    peer_venv,
    train_and_watch,
    venv_site_packages,
    write_result,
)

PUFFERLIB_VERSION = "3.0.0"
SDIST = f"pufferlib-{PUFFERLIB_VERSION}.tar.gz"
SDIST_SHA256 = "7df3a3e3f5f894d78d2a1f5374097890aec01473183e748abefe4f3faa10eaa9"
# its setup.py's lines, and what the build here puts in their place
SETUP_CHANGES = [
    ("    download_raylib('raylib-5.5_webassembly', '.zip')", "    pass"),
    ("    download_box2d('box2d-web')", "    pass"),
    ("    download_box2d(BOX2D_NAME)", "    pass"),
    (
        "glob.glob('pufferlib/ocean/**/binding.c', recursive=True)",
        "['pufferlib/ocean/cartpole/binding.c']",
    ),
    ('    if shutil.which("nvcc"):', "    if False:"),
]
# what its trainer imports, at the versions that work with its 3.0.0
PUFFERLIB_PACKAGES = [
    "gymnasium==0.29.1",
    "gym==0.23.1",
    "pettingzoo==1.24.1",
    "heavyball==1.7.2",
    "pyro-ppl",
    "psutil",
    "rich",
    "rich_argparse",
    "setuptools",
    "wheel",
    "Cython",
]

# the score each env's runs aim at: the C cartpole's episode length (its maximum is 200), CartPole-v1's
# episode return (500)
TARGET = {"puffer_cartpole": 195.0, "CartPole-v1": 475.0}
# Each configuration: the trainer, the env, its flags, the seconds a run. PufferLib's "stock" is what
# its cartpole config says (2 processes of 4096 envs, 524,288 samples an update, its default policy
# of one 128-wide layer and an LSTM of 128), sized for a GPU; "cpu" one process of 512 envs, 32,768
# samples in minibatches of 8,192 (its best frames/s with that policy here); "mlp64" its default
# policy 64 wide without the LSTM (near asyncrl's 2 layers of 64) at 4096 envs. asyncrl's
# "throughput": 2 x 2048 envs, 131,072 samples an update, one epoch of 4 minibatches.
CONFIGS = {
    "pufferlib_stock": ("pufferlib", "puffer_cartpole", "--train.device cpu", 150),
    "pufferlib_cpu": (
        "pufferlib",
        "puffer_cartpole",
        "--train.device cpu --vec.backend Serial --vec.num-envs 1 --env.num-envs 512 --train.minibatch-size 8192",
        40,
    ),
    "pufferlib_mlp64": (
        "pufferlib",
        "puffer_cartpole",
        "--policy mlp64 --train.device cpu --vec.backend Serial --vec.num-envs 1 --env.num-envs 4096 "
        "--train.minibatch-size 32768",
        30,
    ),
    "asyncrl_defaults": ("asyncrl", "puffer_cartpole", "--env_backend vector", 20),
    "asyncrl_throughput": (
        "asyncrl",
        "puffer_cartpole",
        "--env_backend vector --num_envs_per_worker 2048 --rollout 64 --batch_size 131072 --num_epochs 1 "
        "--num_batches_per_epoch 4",
        30,
    ),
    # CartPole-v1: PufferLib has no config for it (its classic_control family does not import in
    # 3.0.0): one process of 32 envs, 1,024 samples an update in minibatches of 256, 4 epochs (the
    # quickest to 475 of three tried here)
    "pufferlib_cpu_CartPole-v1": (
        "pufferlib",
        "CartPole-v1",
        "--train.device cpu --vec.backend Serial --vec.num-envs 32 --train.bptt-horizon 32 "
        "--train.minibatch-size 256 --train.update-epochs 4",
        30,
    ),
    "asyncrl_defaults_CartPole-v1": ("asyncrl", "CartPole-v1", "", 20),
}
# what each configuration's model is
MODEL = {
    "pufferlib_stock": "a layer of 128, LSTM 128",
    "pufferlib_cpu": "a layer of 128, LSTM 128",
    "pufferlib_mlp64": "a layer of 64",
    "pufferlib_cpu_CartPole-v1": "a layer of 64",
}


def fetch_sdist(cache: str) -> str:
    """PufferLib's source archive, downloaded once from PyPI (its address from PyPI's simple index)
    and checked against its sha256."""
    path = os.path.join(cache, SDIST)
    if not os.path.exists(path):
        request = urllib.request.Request(
            "https://pypi.org/simple/pufferlib/",
            headers={"Accept": "application/vnd.pypi.simple.v1+json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            files = json.load(response)["files"]
        url = next(f["url"] for f in files if f["filename"] == SDIST)
        urllib.request.urlretrieve(url, path + ".part")
        os.replace(path + ".part", path)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != SDIST_SHA256:
        raise SystemExit(
            f"{path}: sha256 {digest}, not PyPI's {SDIST_SHA256}; delete it to download it again"
        )
    return path


def build_pufferlib(python: str, sdist: str) -> None:
    """PufferLib built from its source archive with SETUP_CHANGES, installed without its pins."""
    with tempfile.TemporaryDirectory(prefix="pufferlib_build_") as build:
        with tarfile.open(sdist) as archive:
            archive.extractall(build, filter="data")
        source = os.path.join(build, f"pufferlib-{PUFFERLIB_VERSION}")
        setup_py = os.path.join(source, "setup.py")
        with open(setup_py) as f:
            text = f.read()
        for old, new in SETUP_CHANGES:
            if text.count(old) != 1:
                raise SystemExit(
                    f"{SDIST}'s setup.py does not hold {old!r} once; the build expects its 3.0.0"
                )
            text = text.replace(old, new)
        with open(setup_py, "w") as f:
            f.write(text)
        install = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        subprocess.run([*install, source], check=True)


def pufferlib_venv(path: str, cache: str) -> tuple[str, str]:
    """The python of PufferLib's virtualenv (made once) and its C cartpole's compiled binding."""
    python = peer_venv(
        path,
        "PufferLib",
        "gymnasium, heavyball, pyro",
        [f"numpy=={np.__version__}", *PUFFERLIB_PACKAGES],
    )
    # importing pufferlib links a resources folder into the working directory: a scratch one
    with tempfile.TemporaryDirectory() as scratch:
        check = subprocess.run(
            [python, "-c", "import pufferlib.ocean.cartpole.binding"], cwd=scratch
        )
    if check.returncode:
        build_pufferlib(python, fetch_sdist(cache))
    cartpole = os.path.join(venv_site_packages(python), "pufferlib", "ocean", "cartpole")
    (binding,) = glob.glob(os.path.join(cartpole, "binding.*.so"))
    return python, binding


def pufferlib_run(
    python: str, env: str, flags: list[str], seed: int, seconds: float, run_dir: str
) -> list[dict]:
    """One PufferLib run; its logs as rows {wall_s, time_s (its uptime), env_steps, score}, each stamped with the
    seconds since launch at which it appeared."""
    command = [
        python,
        "-m",
        "benchmarks.peers.pufferlib_train",
        "--env",
        env,
        "--seconds",
        str(seconds),
        "--train.seed",
        str(seed),
        "--vec.seed",
        str(seed),
        "--train.data-dir",
        run_dir,
        *flags,
    ]
    # the module from this repository; the run's own folder as the working directory, into which
    # its package links a resources folder
    environment = {**os.environ, "PYTHONPATH": REPO}
    launch = time.monotonic()
    proc = subprocess.Popen(
        command,
        cwd=run_dir,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    rows = []
    output = []
    for line in proc.stdout:
        output.append(line)
        if line.startswith("pufferlib_log "):
            log = json.loads(line.removeprefix("pufferlib_log "))
            rows.append(
                {
                    "wall_s": round(time.monotonic() - launch, 2),
                    "time_s": round(log["uptime_s"], 2),
                    "env_steps": log["agent_steps"],
                    "score": log["score"],
                }
            )
    if proc.wait() != 0 or not rows:
        raise RuntimeError(
            f"PufferLib's run exited with {proc.returncode}:\n{''.join(output[-30:])}"
        )
    return rows


def asyncrl_run(
    env: str, binding: str, flags: list[str], seed: int, seconds: float, run_dir: str
) -> list[dict]:
    """One asyncrl run; its stats rows as {wall_s, time_s, env_steps, score}."""
    if env == "puffer_cartpole":
        env_flags = [
            "--env",
            "benchmarks.peers.puffer_cartpole:make_env",
            "--env_options",
            json.dumps({"binding": binding}),
        ]
    else:
        env_flags = ["--env", env]
    args = [
        *env_flags,
        *flags,
        "--seed",
        str(seed),
        "--train_for_seconds",
        str(seconds),
        "--experiment_summaries_interval",
        "0.25",
        "--train_dir",
        run_dir,
        "--experiment",
        "asyncrl",
    ]
    rows = train_and_watch(args, os.path.join(run_dir, "asyncrl"), timeout_s=seconds + 120)
    # the C env's score is its episode length; asyncrl's return for it is one less (the step that
    # ends an episode pays 0)
    score_key = "episode_len_mean" if env == "puffer_cartpole" else "episode_reward_mean"
    return [
        {
            "wall_s": r["wall_s"],
            "time_s": r["time_s"],
            "env_steps": r["env_steps"],
            "score": r[score_key],
        }
        for r in rows
    ]


def summary(rows_per_seed: list[list[dict]], env: str, warmup_s: float) -> dict:
    fps = [env_steps_per_second(rows, warmup_s) for rows in rows_per_seed]
    reached = [first_reaching(rows, TARGET[env], "score")[0] for rows in rows_per_seed]
    clock = [None if r is None else r["time_s"] for r in reached]
    launch = [None if r is None else r["wall_s"] for r in reached]
    return {
        "fps": fps,
        "fps_median": float(np.median(fps)),
        "time_to_score_s": clock,
        "time_to_score_from_launch_s": launch,
        "time_to_score_median_s": median_time(clock),
        "final_score": [
            next((r["score"] for r in reversed(rows) if r["score"] is not None), None)
            for rows in rows_per_seed
        ],
    }


def median_time(times: list) -> float | None:
    """The median time, a run that never reached the score counting as slower than any; None where
    the median is such a run."""
    median = float(np.median([math.inf if t is None else t for t in times]))
    return None if math.isinf(median) else median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="runs per configuration, seeds 1..N")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument(
        "--warmup_seconds", type=float, default=5.0, help="frames/s counts from then"
    )
    parser.add_argument("--venv", default=os.path.expanduser("~/.cache/asyncrl/pufferlib_venv"))
    args = parser.parse_args()
    cache = os.path.dirname(args.venv)
    python, binding = pufferlib_venv(args.venv, cache)
    results = {}
    for name in args.configs:
        trainer, env, flag_line, seconds = CONFIGS[name]
        flags = flag_line.split()
        runs = []
        for seed in range(1, args.seeds + 1):
            run_dir = tempfile.mkdtemp(prefix=f"{name}_")
            try:
                if trainer == "pufferlib":
                    runs.append(pufferlib_run(python, env, flags, seed, seconds, run_dir))
                else:
                    runs.append(asyncrl_run(env, binding, flags, seed, seconds, run_dir))
            finally:
                shutil.rmtree(run_dir, ignore_errors=True)
        results[name] = {
            "trainer": trainer,
            "env": env,
            "flags": flags,
            "seconds": seconds,
            **summary(runs, env, args.warmup_seconds),
            "runs": runs,
        }
        made = results[name]
        print(
            f"{name}: {made['fps_median']:,.0f} frames/s, time to the score {made['time_to_score_s']}",
            flush=True,
        )
    write_result(
        "pufferlib_compare",
        {
            "machine": machine(),
            "args": vars(args),
            "python": sys.version.split()[0],
            "results": results,
        },
        markdown(results, args),
    )


def markdown(results: dict, args) -> str:
    lines = [
        f"# asyncrl vs PufferLib {PUFFERLIB_VERSION}",
        "",
        f"Machine: {machine()}",
        "",
        f"{args.seeds} seeds a configuration, one run at a time. Frames/s: env steps per second on the run's clock "
        f"after its first {args.warmup_seconds:g} s (median over seeds, then each seed's). Time to the "
        "score: the run's clock when a row of its logs first shows the mean score of the episodes it counts at or "
        "above the target "
        "(PufferLib: those ended since its last log, a log an update; asyncrl: its last 100, a row each 0.25 s); - "
        "where a run did not reach it. The C cartpole's score is its episode length (at most 200), CartPole-v1's "
        "its episode return (at most 500).",
        "",
        "| env (target) | configuration | model | frames/s | time to the score, run's clock (s) | from launch (s) "
        "| flags |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results.items():
        fps = ", ".join(f"{f:,.0f}" for f in r["fps"])
        clock = ", ".join("-" if t is None else f"{t:.1f}" for t in r["time_to_score_s"])
        launch = ", ".join(
            "-" if t is None else f"{t:.1f}" for t in r["time_to_score_from_launch_s"]
        )
        model = MODEL.get(name, "2 layers of 64")
        flags = f"`{' '.join(r['flags'])}`" if r["flags"] else "the defaults"
        lines.append(
            f"| {r['env']} ({TARGET[r['env']]:g}) | {name} | {model} | {r['fps_median']:,.0f} ({fps}) | {clock} | "
            f"{launch} | {flags} |"
        )
    lines += ["", ratios(results)]
    return "\n".join(lines) + "\n"


def ratios(results: dict) -> str:
    """asyncrl's best frames/s on the C cartpole against each PufferLib configuration's."""
    ours = {
        n: r
        for n, r in results.items()
        if r["trainer"] == "asyncrl" and r["env"] == "puffer_cartpole"
    }
    theirs = {
        n: r
        for n, r in results.items()
        if r["trainer"] == "pufferlib" and r["env"] == "puffer_cartpole"
    }
    if not ours or not theirs:
        return ""
    best = max(ours, key=lambda n: ours[n]["fps_median"])
    parts = [f"{n} {ours[best]['fps_median'] / r['fps_median']:.2f}" for n, r in theirs.items()]
    return f"asyncrl's frames/s on the C cartpole ({best}) over PufferLib's: {', '.join(parts)}."


if __name__ == "__main__":
    main()
