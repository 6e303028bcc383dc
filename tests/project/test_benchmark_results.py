"""Every benchmark result says where it came from, and benchmarks/README.md indexes them all."""

import glob
import importlib.util
import json
import os

from helpers import REPO

from benchmarks import headline, provenance
from benchmarks.common import RESULTS, between_markers
from benchmarks.learning import learning_report

ROOT = REPO

FIELDS = {"command", "commit", "date", "cpu", "cores", "torch", "device"}


def test_every_result_records_its_command_and_provenance():
    # learning suites' runs too
    for path in glob.glob(os.path.join(RESULTS, "**", "*.json"), recursive=True):
        with open(path) as f:
            made = json.load(f).get("provenance", {})
        assert FIELDS <= made.keys(), f"{os.path.basename(path)} lacks {FIELDS - made.keys()}"
        assert made["command"].startswith(("python benchmarks/", "python -m benchmarks.")), made


def test_every_results_command_runs_today():
    """A command recorded before the benchmarks were a package still names a benchmark that runs,
    as `python -m benchmarks.GROUP.NAME`."""
    for _, _, _, made in provenance.results():
        command = provenance.current_command(made["command"])
        module = command.split()[2]
        assert command.startswith("python -m benchmarks."), command
        assert importlib.util.find_spec(module) is not None, command


def test_results_lie_in_their_benchmarks_group():
    for name, _, _, made in provenance.results():
        group = name.split("/")[0]
        command = provenance.current_command(made["command"])
        assert group in provenance.GROUPS, name
        if "studies" not in command:
            assert command.startswith(f"python -m benchmarks.{group}."), (name, command)


def test_every_page_and_figure_belongs_to_a_result_a_script_wrote():
    pages = glob.glob(os.path.join(RESULTS, "*", "*.*"))
    assert not glob.glob(os.path.join(RESULTS, "*.*")), "results lie in their group's folder"
    for path in pages:
        assert os.path.exists(os.path.splitext(path)[0] + ".json"), (
            f"{path} has no result beside it"
        )
        if path.endswith(".md"):
            with open(path) as f:
                assert f.read().rstrip().splitlines()[-1].startswith("Made by `python "), path


def test_the_index_is_up_to_date():
    with open(os.path.join(ROOT, "benchmarks", "README.md")) as f:
        assert f.read() == provenance.index(), "run: python -m benchmarks.provenance index"


def test_readmes_learning_table_is_made_from_the_suites_reports():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    start, end = between_markers(text, learning_report.README_TABLE)
    table = text[start:end].strip()
    assert table == learning_report.readme_table(), (
        "run: python -m benchmarks.learning.learning_suite readme"
    )
    assert "| `mujoco`: 5 tasks, 1,000,000 env steps | 5 seeds |" in table


def test_readmes_headline_table_is_made_from_result_files_that_record_their_machine():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    start, end = between_markers(text, headline.README_TABLE)
    assert text[start:end].strip() == headline.readme_table(), (
        "run: python -m benchmarks.headline readme"
    )
    for row in headline.ROWS:
        with open(os.path.join(RESULTS, f"{row.result}.json")) as f:
            made = json.load(f)["provenance"]
        assert "reconstructed" not in made, f"{row.result}: run python -m benchmarks.headline run"
        assert made["cpu"] and made["torch"], row.result
