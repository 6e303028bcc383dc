"""README's headline table ("Measured"): the benchmarks behind its rows, and the table written from
their result files.

    python -m benchmarks.headline run      # runs them one after the other (about 25 min on 2 cores,
                                           # the machine to itself), then writes the table
    python -m benchmarks.headline readme   # writes the table from the result files as they are

Each row reads one result file; the lines under the table give each result's provenance (command,
commit, date, CPU model, cores, torch version, device), so a row never outlives the record of where
it was measured.
"""

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.common import REPO, RESULTS, provenance_line, write_between_markers

README = os.path.join(REPO, "README.md")
# README's table lies between the ends of these two lines
README_TABLE = ("<!-- headline: python -m benchmarks.headline run -->", "<!-- end of headline -->")
SF = "Sample Factory 2.1.1"

# the benchmarks `run` runs, in order: each writes the result files its rows read
BENCHMARKS = (
    [
        "benchmarks.peers.sample_factory_compare",
        "--envs",
        "doom_basic",
        "CartPole-v1",
        "--warmup_seconds",
        "30",
        "--rounds",
        "1",
        "--device",
        "cpu",
    ],
    [
        "benchmarks.peers.sample_factory_compare",
        "--envs",
        "atari_breakout",
        "--seconds",
        "120",
        "--warmup_seconds",
        "30",
        "--rounds",
        "1",
        "--device",
        "cpu",
        "--out",
        "sample_factory_compare_atari",
    ],
    ["benchmarks.learning.cartpole_solve_time", "--runs", "3", "--seconds", "30"],
)


@dataclass(frozen=True)
class Row:
    """A row of the table: what it measures, the result file it reads (GROUP/NAME, without .json)
    and how its cells (asyncrl, reference, ratio) come from that file's JSON."""

    label: str
    result: str
    cells: Callable[[dict], tuple[str, str, str]]


def frames_per_second(env: str) -> Callable[[dict], tuple[str, str, str]]:
    """The cells of a frames/s row of sample_factory_compare: asyncrl's, Sample Factory's, their
    ratio."""

    def cells(result: dict) -> tuple[str, str, str]:
        sides = result["results"][env]
        ours = sides["asyncrl"]["fps"]
        theirs = sides["sample_factory"]["fps"]
        return f"{ours:,.0f}", f"{SF}: {theirs:,.0f}", f"{ours / theirs:.2f}"

    return cells


def median_seconds(times: list) -> float | None:
    """The median of the runs' seconds to a target, None if any run did not reach it (a run that
    never reached it has no time to take a median of)."""
    if not times or any(t is None for t in times):
        return None
    ordered = sorted(times)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def seconds_text(seconds: float | None) -> str:
    return "not reached" if seconds is None else f"{seconds:,.1f}"


def time_to_target(env: str) -> Callable[[dict], tuple[str, str, str]]:
    """The cells of a time-to-target row of sample_factory_compare (median over its rounds)."""

    def cells(result: dict) -> tuple[str, str, str]:
        sides = result["results"][env]
        ours = median_seconds(sides["asyncrl"]["time_to_target_s"])
        theirs = median_seconds(sides["sample_factory"]["time_to_target_s"])
        ratio = "-" if ours is None or theirs is None else f"{ours / theirs:.2f}"
        return seconds_text(ours), f"{SF}: {seconds_text(theirs)}", ratio

    return cells


def solve_times(result: dict) -> tuple[str, str, str]:
    """The cells of cartpole_solve_time's row: its runs' seconds to 475 on the run's clock, and from
    launch."""
    launch = [run["first_475_s_after_launch"] for run in result["runs"]]
    if any(t is None for t in launch):
        return f"{sum(t is not None for t in launch)} of {len(launch)} runs reached 475", "", ""
    from_launch = ", ".join(f"{t:.1f}" for t in launch)
    clock = ", ".join(f"{run['first_475_time_s']:.1f}" for run in result["runs"])
    return f"{clock} ({from_launch} from launch)", "", ""


ROWS = (
    Row(
        "doom_basic, training frames/s (SF's model, 2 workers x 8 envs)",
        "peers/sample_factory_compare",
        frames_per_second("doom_basic"),
    ),
    Row(
        "doom_basic, seconds from launch to a mean return of 70",
        "peers/sample_factory_compare",
        time_to_target("doom_basic"),
    ),
    Row(
        "CartPole-v1, training frames/s (2 workers x 16 envs)",
        "peers/sample_factory_compare",
        frames_per_second("CartPole-v1"),
    ),
    Row(
        "CartPole-v1 (2 x 16), seconds from launch to a mean return of 475",
        "peers/sample_factory_compare",
        time_to_target("CartPole-v1"),
    ),
    Row(
        "atari_breakout, training frames/s (SF's Atari example)",
        "peers/sample_factory_compare_atari",
        frames_per_second("atari_breakout"),
    ),
    Row(
        "CartPole-v1 with the defaults, seconds to 475 (3 runs)",
        "learning/cartpole_solve_time",
        solve_times,
    ),
)


def read_result(name: str, root: str) -> dict:
    with open(os.path.join(root, f"{name}.json")) as f:
        return json.load(f)


def readme_table(root: str = RESULTS) -> str:
    """README's headline table from the result files in `root`, and under it the provenance of each
    result it reads."""
    lines = [
        "| | asyncrl | reference | ratio | result |",
        "| --- | --- | --- | --- | --- |",
    ]
    read = []
    for row in ROWS:
        result = read_result(row.result, root)
        ours, reference, ratio = row.cells(result)
        name = row.result.split("/")[1]
        link = f"[{name}](benchmarks/results/{row.result}.md)"
        lines.append(f"| {row.label} | {ours} | {reference} | {ratio} | {link} |")
        if row.result not in read:
            read.append(row.result)
    lines.append("")
    for name in read:
        made = read_result(name, root)["provenance"]
        lines.append(f"- {name.split('/')[1]}: {provenance_line(made)}")
    return "\n".join(lines)


def write_readme_table() -> None:
    write_between_markers(README, README_TABLE, readme_table())


def run_benchmarks() -> None:
    for benchmark in BENCHMARKS:
        command = [sys.executable, "-m", *benchmark]
        print("running", " ".join(command[1:]), flush=True)
        subprocess.run(command, cwd=REPO, check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["run", "readme"])
    args = parser.parse_args()
    if args.action == "run":
        run_benchmarks()
    write_readme_table()
    print(f"wrote README.md's headline table:\n{readme_table()}")


if __name__ == "__main__":
    main()
