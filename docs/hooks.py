"""mkdocs hook: the pages' generated parts, made from the code and the result files at every build.

A page asks for one with a line `<!-- generated: NAME ARG -->`, replaced by GENERATORS[NAME](ARG):
- config_reference: every flag of asyncrl train (cfg/config.py), by section, with its default and help line;
- env_defaults ENV: the flags an env family sets off the engine's defaults (its entry's default_config);
- benchmarks: every result in benchmarks/results, with its command, commit, date and machine;
- api PATH: an object's signature and docstring;
- result_table NAME: the table of benchmarks/results/NAME.md, with the line that says how it was made;
- learning_suites: README's table of the learning suites' reports.
"""

from __future__ import annotations

import ast
import dataclasses
import glob
import html
import importlib
import inspect
import json
import os
import re
import sys

from mkdocs.structure.files import File

from asyncrl.cfg.config import GROUPS, default_value, group_title, schema_defaults
from asyncrl.envs.lookup import default_config_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# mkdocs loads this file by its path: under the `mkdocs` command the repository's root, where the
# benchmarks package lies (it is not installed), is not on sys.path
sys.path.insert(0, ROOT)
from benchmarks import provenance  # noqa: E402  (the results' index, which the benchmarks page shows)
from benchmarks.common import RESULTS  # noqa: E402  (the results, a folder per group)
from benchmarks.learning import learning_report  # noqa: E402  (the learning suites' table)

# where the site serves the results' figures
FIGURES = "benchmark-results"
MARKER = re.compile(r"^<!-- generated: (\w+)(?: (\S+))? -->$", re.M)


def escape_html(text: str) -> str:
    """Markdown text with the characters HTML would take for tags (`<train_dir>`) escaped, outside
    its code spans (which show them as they are)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = html.escape(parts[i], quote=False)
    return "`".join(parts)


def readable(value: str) -> str:
    """A result table's cell for a reader: a Python list as its items, None as a dash."""
    stripped = value.strip()
    try:
        parsed = ast.literal_eval(stripped)
    except (ValueError, SyntaxError):
        return escape_html(value)
    if parsed is None:
        return " - "
    if isinstance(parsed, list):
        shown = ["-" if item is None else str(item) for item in parsed]
        return " - " if set(shown) <= {"-"} else " " + ", ".join(shown) + " "
    return escape_html(value)


def cell(value) -> str:
    text = (
        json.dumps(value) if isinstance(value, (list, dict, bool)) or value is None else str(value)
    )
    return "`" + text.replace("|", "\\|") + "`"


# an env of each family whose defaults the reference shows beside the engine's
FAMILIES = {
    "VizDoom": "doom_basic",
    "Atari": "atari_breakout",
    "MuJoCo": "mujoco_hopper",
    "gymnasium vector": "CartPole-v1",
}


def config_reference(_: str | None) -> str:
    """A table per flag group of cfg/groups, under its title: every flag, its default, the env
    families' own values and its help line."""
    overrides = {family: default_config_of(env) for family, env in FAMILIES.items()}
    out = []
    for group in GROUPS:
        out += [f"## {group_title(group)}", ""]
        out += [
            "| flag | default | env families' own | what it does |",
            "| --- | --- | --- | --- |",
        ]
        for f in dataclasses.fields(group):
            help_text = escape_html(f.metadata["help"]).replace("|", "\\|")
            families = "; ".join(
                f"{family}: {cell(values[f.name])}"
                for family, values in overrides.items()
                if f.name in values
            )
            out.append(f"| `--{f.name}` | {cell(default_value(f))} | {families} | {help_text} |")
        out.append("")
    return "\n".join(out)


def env_defaults(env: str) -> str:
    defaults = schema_defaults()
    family = default_config_of(env)
    rows = [
        f"| `--{k}` | {cell(v)} | {cell(defaults[k])} |" for k, v in family.items() if k in defaults
    ]
    if not rows:
        return f"`{env}` takes the engine's defaults."
    return "\n".join([f"| flag | `{env}` | engine default |", "| --- | --- | --- |", *rows])


def benchmarks(_: str | None) -> str:
    # benchmarks/README.md's table, names unlinked
    return "\n".join(provenance.table(link_to=None))


def result_table(name: str) -> str:
    """The first table of a result's page (benchmarks/results/GROUP/NAME.md) with its cells made
    readable, its figure (NAME.png) if it has one, and the line that says how it was made."""
    with open(os.path.join(RESULTS, name + ".md")) as f:
        lines = f.read().rstrip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    table = []
    for line in lines[start:end]:
        cells = line.strip().strip("|").split("|")
        table.append("|" + "|".join(readable(c) for c in cells) + "|")
    figure = []
    if os.path.exists(os.path.join(RESULTS, name + ".png")):
        figure = ["", f"![{name}]({FIGURES}/{name}.png)"]
    return "\n".join([*table, *figure, "", escape_html(lines[-1])])


def on_files(files, config):
    """The results' figures join the site (under FIGURES/), for the pages that show them."""
    for path in glob.glob(os.path.join(RESULTS, "*", "*.png")):
        uri = f"{FIGURES}/{os.path.relpath(path, RESULTS)}"
        files.append(File.generated(config, uri, abs_src_path=path))
    return files


def learning_suites(_: str | None) -> str:
    return learning_report.readme_table(links=False)


def api(path: str) -> str:
    """An object's signature and docstring (a class's public methods too), imported as the user
    imports it. (The docstrings are read from the installed package: asyncrl.envs is the
    repository's envs/ folder, which a static reader of the source tree would not find.)"""
    module, _, name = path.rpartition(".")
    obj = getattr(importlib.import_module(module), name)
    kind = "class" if inspect.isclass(obj) else "def"
    out = [
        f"### `{path}`",
        "",
        "```python",
        f"{kind} {name}{signature(obj)}",
        "```",
        "",
        inspect.getdoc(obj) or "",
        "",
    ]
    if inspect.isclass(obj):
        for member, value in vars(obj).items():
            if not member.startswith("_") and (
                inspect.isfunction(value) or isinstance(value, property)
            ):
                doc = inspect.getdoc(value) or ""
                head = member if isinstance(value, property) else f"{member}{signature(value)}"
                out += [f"#### `{head}`", "", doc, ""]
    return "\n".join(out)


def signature(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


GENERATORS = {
    "api": api,
    "config_reference": config_reference,
    "env_defaults": env_defaults,
    "benchmarks": benchmarks,
    "result_table": result_table,
    "learning_suites": learning_suites,
}


def on_page_markdown(markdown: str, **_) -> str:
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](m.group(2)), markdown)
