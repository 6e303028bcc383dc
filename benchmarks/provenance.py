"""Provenance of the result files in benchmarks/results, and their index (benchmarks/README.md).

    python -m benchmarks.provenance backfill   # give a provenance to each result written before results had one
    python -m benchmarks.provenance index      # write benchmarks/README.md from the results' provenance

Results written by `common.write_result` carry their provenance: the command, commit, date, CPU model,
cores, torch version and device where they were measured. Results written before that carried at
most the command and a machine line that did not name the CPU. `backfill` rebuilds what can be known
of theirs and marks it "reconstructed": the command from the result's own record (its "command", or
its "args" turned back into flags, or its page's "Command:" line) or else from COMMANDS below, the
commit that added the result to the repository (measured on that tree) and its date, the cores and
device from its machine line; the CPU model and torch version were not recorded and are said so. (It
ran once, when provenance began to be recorded: the commit that last changed a file is the
backfill's since.)
"""

from __future__ import annotations

import argparse
import glob
import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess

from benchmarks.common import REPO, RESULTS, provenance_line

# the groups of results, in the order the index shows them: benchmarks/GROUP/ and results/GROUP/
GROUPS = ("speed", "peers", "learning", "robustness", "features")
# a command as results recorded it before the benchmarks were a package: python benchmarks/NAME.py
OLD_SCRIPT = re.compile(r"^python benchmarks/((?:studies/)?\w+)\.py\b")

# the commands of results that recorded none (neither in the result nor on its page)
COMMANDS = {"cleanrl_published_atari_curves": "python -m benchmarks.studies.digitize_curve"}
# the script that writes results named NAME or NAME_<suffix>, for results that recorded their
# arguments only
SCRIPTS = {
    "atari_learning": "atari_learning.py",
    "sample_factory_compare": "sample_factory_compare.py",
}
MACHINE = re.compile(r"(\d+) cores \(([^)]*)\), [\d.]+ GiB, (.+)$")


def flags(args: dict) -> list[str]:
    """argparse's namespace (as a result recorded it) turned back into the flags that give it."""
    out = []
    for key, value in args.items():
        if value is None:
            continue
        out += [f"--{key}", *(map(str, value) if isinstance(value, list) else [str(value)])]
    return out


def page_command(path: str) -> str | None:
    """The command a result's page names on its "Command: `...`" line, if it has one."""
    page = path[: -len(".json")] + ".md"
    if os.path.exists(page):
        with open(page) as f:
            for line in f:
                found = re.match(r"Command: `(python [^`]+)`", line)
                if found:
                    return found.group(1).strip()
    return None


def recorded_command(name: str, path: str, result: dict) -> str:
    commands = result.get("command") or result.get("commands")
    if isinstance(commands, str):
        return commands
    if isinstance(commands, dict):
        return "; ".join(commands.values())
    if "args" in result:
        script = next(s for prefix, s in SCRIPTS.items() if name.startswith(prefix))
        return shlex.join(["python", f"benchmarks/{script}", *flags(result["args"])])
    return page_command(path) or COMMANDS[name]


def added_in(path: str) -> tuple[str, str]:
    """The commit that last changed the file's content, and its date."""
    out = subprocess.run(
        ["git", "-C", REPO, "log", "-1", "--format=%h %aI", "--", os.path.relpath(path, REPO)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[0], out[1]


def machine_line(path: str, result: dict) -> str:
    """The machine a result recorded: its JSON's "machine", else its page's "Machine: " line."""
    if "machine" in result:
        return result["machine"]
    page = path[: -len(".json")] + ".md"
    if os.path.exists(page):
        with open(page) as f:
            return next(
                (line[len("Machine: ") :].strip() for line in f if line.startswith("Machine: ")), ""
            )
    return ""


def reconstructed(name: str, path: str, result: dict) -> dict:
    commit, date = added_in(path)
    machine = MACHINE.match(machine_line(path, result))
    return {
        "command": recorded_command(name, path, result),
        "commit": commit,
        "date": date,
        "cpu": f"not recorded ({machine.group(2)})" if machine else "not recorded",
        "cores": int(machine.group(1)) if machine else None,
        "torch": "not recorded",
        "device": machine.group(3) if machine else "not recorded",
        "reconstructed": "from the repository's history by benchmarks/provenance.py backfill",
    }


def current_command(command: str) -> str:
    """A recorded command as it runs today: `python benchmarks/NAME.py ...` (a script when the
    benchmarks were a folder of them) is `python -m benchmarks.GROUP.NAME ...`."""
    old = OLD_SCRIPT.match(command)
    if old is None:
        return command
    name = old.group(1).replace("/", ".")
    if name.startswith("studies."):
        return f"python -m benchmarks.{name}{command[old.end() :]}"
    for group in GROUPS:
        if importlib.util.find_spec(f"benchmarks.{group}.{name}") is not None:
            return f"python -m benchmarks.{group}.{name}{command[old.end() :]}"
    return command


def backfill() -> None:
    for path in sorted(glob.glob(os.path.join(RESULTS, "*", "*.json"))):
        with open(path) as f:
            result = json.load(f)
        if "provenance" in result:
            continue
        name = os.path.basename(path)[: -len(".json")]
        result["provenance"] = reconstructed(name, path, result)
        with open(path, "w") as f:
            json.dump(result, f, indent=2)
        page = path[: -len(".json")] + ".md"
        if os.path.exists(page):
            with open(page) as f:
                text = f.read().rstrip("\n")
            with open(page, "w") as f:
                f.write(f"{text}\n\n{provenance_line(result['provenance'])}\n")
        print(f"{name}: {result['provenance']['command']}")


def results() -> list[tuple[str, str, str, dict]]:
    """(GROUP/NAME, its page (NAME.md, else NAME.json), the page's title, provenance) of every
    result, by group and name; a learning suite's report is one (learning/SUITE), the run files it
    reads are not."""
    out = []
    paths = glob.glob(os.path.join(RESULTS, "*", "*.json"))
    for path in sorted(paths, key=lambda path: (GROUPS.index(path.split(os.sep)[-2]), path)):
        with open(path) as f:
            made = json.load(f)["provenance"]
        name = os.path.relpath(path, RESULTS)[: -len(".json")]
        page = os.path.join(RESULTS, name + ".md")
        title = name
        if os.path.exists(page):
            with open(page) as f:
                title = f.readline().lstrip("# ").strip()
        else:
            page = path
        out.append((name, os.path.relpath(page, RESULTS), title, made))
    return out


def index() -> str:
    lines = [
        "# Benchmarks",
        "",
        "The benchmarks are grouped by the question they answer, in folders of this package, and each is run from",
        "the repository's root as a module (`python -m benchmarks.GROUP.NAME`). Each result in `results/GROUP/` is",
        "written by the command beside it, as NAME.json and NAME.md (most with a NAME.png); both record where they",
        "came from: the command, commit, date, CPU model, cores, torch version and device. A command recorded",
        "before the benchmarks were a package (`python benchmarks/NAME.py`) is shown as it runs today. Results from",
        "before provenance was recorded have it rebuilt from the repository's history (`provenance.py",
        "backfill`), marked reconstructed: their CPU model and torch version were not recorded. `studies/` holds",
        "one-off investigations, with their own results.",
        "",
        "This page is written by `python -m benchmarks.provenance index`.",
        "",
        *table(link_to="results/"),
    ]
    return "\n".join(lines) + "\n"


def group_title(group: str) -> str:
    """A group's title: its package's docstring."""
    return importlib.import_module(f"benchmarks.{group}").__doc__.strip()


def table(link_to: str | None) -> list[str]:
    """Every result with its command, commit, date and machine, as a markdown table per group (this
    index's, and the docs' benchmarks page's); with `link_to`, each name links to its page in that
    folder."""
    lines = []
    shown_group = None
    for name, page, title, made in results():
        group = name.split("/")[0]
        if group != shown_group:
            shown_group = group
            lines += ["", f"### {group}", "", group_title(group), ""]
            lines += ["| result | what | command | commit, date | machine |"]
            lines += ["| --- | --- | --- | --- | --- |"]
        cores = "cores not recorded" if made["cores"] is None else f"{made['cores']} cores"
        machine = f"{cores}, {made['cpu']}, {made['device']}"
        command = current_command(made["command"]).replace("|", "\\|")
        short_name = name.split("/", 1)[1]
        shown = short_name if link_to is None else f"[{short_name}]({link_to}{page})"
        lines.append(
            f"| {shown} | {title} | `{command}` | {made['commit']}, {made['date'][:10]} | {machine} |"
        )
    return lines[1:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["backfill", "index"])
    action = parser.parse_args().action
    if action == "backfill":
        backfill()
    else:
        with open(os.path.join(REPO, "benchmarks", "README.md"), "w") as f:
            f.write(index())


if __name__ == "__main__":
    main()
