"""Every benchmark result says where it came from, and benchmarks/README.md indexes them all."""

import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import learning_report  # noqa: E402  (benchmarks/ is a folder of scripts, not a package)
import provenance  # noqa: E402

FIELDS = {"command", "commit", "date", "cpu", "cores", "torch", "device"}


def test_every_result_records_its_command_and_provenance():
    # learning suites' runs too
    for path in glob.glob(os.path.join(RESULTS, "**", "*.json"), recursive=True):
        with open(path) as f:
            made = json.load(f).get("provenance", {})
        assert FIELDS <= made.keys(), f"{os.path.basename(path)} lacks {FIELDS - made.keys()}"
        assert made["command"].startswith("python benchmarks/"), made["command"]


def test_every_page_and_figure_belongs_to_a_result_a_script_wrote():
    pages = glob.glob(os.path.join(RESULTS, "*.*")) + glob.glob(
        os.path.join(RESULTS, "learning", "*.*")
    )
    for path in pages:
        assert os.path.exists(os.path.splitext(path)[0] + ".json"), (
            f"{path} has no result beside it"
        )
        if path.endswith(".md"):
            with open(path) as f:
                assert (
                    f.read().rstrip().splitlines()[-1].startswith("Made by `python benchmarks/")
                ), path


def test_the_index_is_up_to_date():
    with open(os.path.join(ROOT, "benchmarks", "README.md")) as f:
        assert f.read() == provenance.index(), "run: python benchmarks/provenance.py index"


def test_readmes_learning_table_is_made_from_the_suites_reports():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    start, end = learning_report.readme_table_span(text)
    table = text[start:end].strip()
    assert table == learning_report.readme_table(), (
        "run: python benchmarks/learning_suite.py readme"
    )
    assert "| `mujoco`: 5 tasks, 1,000,000 env steps | 5 seeds |" in table
