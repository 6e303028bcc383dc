"""`asyncrl bench` on the configurations the README quotes, one after the other, into one results
file.

    python -m benchmarks.speed.bench_suite [--seconds 30] [--warmup_seconds 10]

1. doom_basic with Sample Factory's VizDoom model (conv + 512 GRU), 2 workers x 8 envs: raw, sampler, train,
   the compute limit and the efficiency; then train again with one env group per worker (--worker_num_splits 1;
   benchmarks/studies/splits_ab.py compares 1 and 2 splits in A/B pairs); sampler and train with 16 envs per worker,
   and with the flags `asyncrl tune --env doom_basic` found (tuned first if this machine has none);
2. doom_basic with a small model (an 8-unit MLP, no RNN, no input normalization), 2 workers x 16 envs: raw and
   sampler, i.e. what the sampling machinery costs when inference is nearly free;
3. CartPole-v1 with its defaults: raw, sampler, train.
Writes benchmarks/results/speed/asyncrl_bench.{md,json}.
"""

import argparse
import tempfile

from benchmarks.common import asyncrl_bench, machine, write_result

SUITE = {
    "doom_basic, SF's model, 2x8": [
        "--env",
        "doom_basic",
        "--mode",
        "all",
        "--num_workers",
        "2",
        "--num_envs_per_worker",
        "8",
    ],
    "doom_basic, SF's model, 2x8, 1 split": [
        "--env",
        "doom_basic",
        "--mode",
        "train",
        "--num_workers",
        "2",
        "--num_envs_per_worker",
        "8",
        "--worker_num_splits",
        "1",
    ],
    "doom_basic, SF's model, 2x16": [
        "--env",
        "doom_basic",
        "--mode",
        "sampler,train",
        "--num_workers",
        "2",
        "--num_envs_per_worker",
        "16",
    ],
    "doom_basic, SF's model, --tune True": [
        "--env",
        "doom_basic",
        "--mode",
        "sampler,train",
        "--tune",
        "True",
    ],
    "doom_basic, small model, 2x16": [
        "--env",
        "doom_basic",
        "--mode",
        "raw,sampler",
        "--num_workers",
        "2",
        "--num_envs_per_worker",
        "16",
        "--encoder",
        "mlp",
        "--encoder_mlp_layers",
        "[8]",
        "--use_rnn",
        "False",
        "--normalize_input",
        "False",
    ],
    "CartPole-v1, defaults": ["--env", "CartPole-v1", "--mode", "all"],
}


def fmt(value, spec=",.0f"):
    return "-" if value is None else format(value, spec)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup_seconds", type=float, default=10)
    args = parser.parse_args()
    results = {}
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in SUITE.items():
            flags = [
                *flags,
                "--seconds",
                f"{args.seconds:g}",
                "--warmup_seconds",
                f"{args.warmup_seconds:g}",
            ]
            results[name], printed = asyncrl_bench(flags, tmp)
            summary = printed[printed.index("asyncrl bench: " + results[name]["env"]) :]
            print(summary, flush=True)
            lines += [
                f"## {name}",
                "",
                "`asyncrl bench " + " ".join(flags) + "`",
                "",
                "```",
                summary.strip(),
                "```",
                "",
            ]
    header = [
        "# `asyncrl bench` results",
        "",
        f"Machine: {machine()}",
        "",
        "Command: `python -m benchmarks.speed.bench_suite "
        f"--seconds {args.seconds:g} --warmup_seconds {args.warmup_seconds:g}`",
        "",
        "| configuration | raw | sampler | train | sampler/raw | train/raw | train efficiency | sampler efficiency |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results.items():
        header.append(
            f"| {name} | {fmt(r.get('raw_fps'))} | {fmt(r.get('sampler_fps'))} | {fmt(r.get('train_fps'))} | "
            f"{fmt(r.get('sampler_over_raw'), '.3f')} | {fmt(r.get('train_over_raw'), '.3f')} | "
            f"{fmt(r.get('efficiency'), '.3f')} | {fmt(r.get('sampler_efficiency'), '.3f')} |"
        )
    write_result(
        "asyncrl_bench",
        {"machine": machine(), "results": results},
        "\n".join(header + [""] + lines),
    )


if __name__ == "__main__":
    main()
