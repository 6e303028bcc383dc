"""VER's sequence packing: the learner's columns with part-filled slots packed together vs one
column per slot.

    python -m benchmarks.features.sequence_packing [--pairs 3] [--seconds 90]

`--algo ver` on synthetic_heterogeneous (worker 0's envs 3x slower on average, 2 workers x 8 envs,
512 samples per update) with image observations (3x72x128, Doom's size: the conv encoder and GRU
make the learner the bottleneck, so its time per update sets the samples/s), `--pack_sequences True`
vs `False` in alternating pairs: samples/s after a warm-up, and the fraction of the learner's rows
that held no sample. Writes benchmarks/results/features/sequence_packing.{md,json}.
"""

import argparse
import os
import shutil
import statistics
import tempfile

from benchmarks.common import env_steps_per_second, machine, train_and_watch, write_result

WARMUP_S = 10
VER_ON_IMAGES = [
    "--algo",
    "ver",
    "--env",
    "synthetic_heterogeneous",
    "--env_options",
    '{"step_us": 500, "episode_len": 64, "worker_cost": [3, 1], "obs_shape": [3, 72, 128]}',
    "--num_workers",
    "2",
    "--num_envs_per_worker",
    "8",
    "--rollout",
    "32",
    "--batch_size",
    "512",
    "--experiment_summaries_interval",
    "2",
]


def after_warmup(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["time_s"] >= WARMUP_S and r.get("padded_fraction") is not None]


def run_pairs(train_dir: str, pairs: int, seconds: float) -> list[dict]:
    runs = []
    for pair in range(pairs):
        for pack in ("False", "True"):
            name = f"pack_{pack}_{pair}"
            rows = train_and_watch(
                [
                    *VER_ON_IMAGES,
                    "--pack_sequences",
                    pack,
                    "--train_dir",
                    train_dir,
                    "--experiment",
                    name,
                    "--train_for_seconds",
                    str(seconds),
                    "--seed",
                    str(pair),
                ],
                os.path.join(train_dir, name),
                timeout_s=seconds + 120,
            )
            runs.append(
                {
                    "pack": pack == "True",
                    "pair": pair,
                    "samples_per_s": env_steps_per_second(rows, WARMUP_S),
                    "padded_fraction": statistics.mean(
                        r["padded_fraction"] for r in after_warmup(rows)
                    ),
                }
            )
            print(runs[-1], flush=True)
    return runs


def report(command: str, runs: list[dict]) -> str:
    lines = [
        "# VER's sequence packing",
        "",
        f"Machine: {machine()}",
        "",
        f"`{command}`",
        "",
        "ver on synthetic_heterogeneous with 3x72x128 images (conv + GRU), worker 0's envs 3x slower, "
        "2 workers x 8 envs, 512 samples per update:",
        "",
        "| pair | samples/s: unpacked | packed | packed / unpacked | rows without a sample: unpacked | packed |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    ratios = []
    for pair in sorted({r["pair"] for r in runs}):
        off, on = (
            next(r for r in runs if r["pair"] == pair and r["pack"] == p) for p in (False, True)
        )
        ratios.append(on["samples_per_s"] / off["samples_per_s"])
        lines.append(
            f"| {pair} | {off['samples_per_s']:,.0f} | {on['samples_per_s']:,.0f} | {ratios[-1]:.2f} | "
            f"{off['padded_fraction']:.0%} | {on['padded_fraction']:.0%} |"
        )
    lines += ["", f"Median packed / unpacked samples/s: **{statistics.median(ratios):.2f}**"]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=90)
    args = parser.parse_args()
    train_dir = tempfile.mkdtemp(prefix="asyncrl_packing_")
    runs = run_pairs(train_dir, args.pairs, args.seconds)
    shutil.rmtree(train_dir, ignore_errors=True)
    command = f"python -m benchmarks.features.sequence_packing --pairs {args.pairs} --seconds {args.seconds:g}"
    write_result(
        "sequence_packing",
        {"machine": machine(), "command": command, "runs": runs},
        report(command, runs),
    )


if __name__ == "__main__":
    main()
