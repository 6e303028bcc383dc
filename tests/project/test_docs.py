"""The docs' commands and code blocks run as written, and the site builds with --strict.

Every fenced bash or python block of docs/ and README.md runs, page by page in a folder of its own,
in the page's order (a page's enjoy plays what its train trained), unless the line before it says
`<!-- not run: REASON -->`; a training command that an earlier page ran as it is lends that page its
run. Runs are shortened: a training command to at most CAPS' env steps and seconds, a benchmark to a
few seconds, a match or an enjoy to a few episodes; a python block's `asyncrl.train` gets the same
caps through its keyword arguments.
"""

import importlib
import inspect
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from helpers import REPO

from asyncrl.cfg.extras import EXTRAS

ROOT = REPO
PAGES = sorted(
    [
        os.path.join(d, f)
        for d, _, files in os.walk(os.path.join(ROOT, "docs"))
        for f in files
        if f.endswith(".md")
    ]
    + [os.path.join(ROOT, "README.md")]
)
BLOCK = re.compile(
    r"(?:<!-- not run: (?P<reason>[^>]*) -->\n\s*)?^(?P<indent> *)```(?P<lang>\w+)\n(?P<code>.*?)^ *```$",
    re.M | re.S,
)
# flag -> the largest value a docs command runs with here
CAPS = {
    "--train_for_env_steps": 2_000,
    "--train_for_seconds": 10,
    "--seconds": 2,
    "--warmup_seconds": 1,
    "--episodes": 6,
    "--max_num_episodes": 1,
    "--cost_seconds": 0.5,
}
PROGRAMS = ("asyncrl", "torchrun", "python")


def blocks(page: str) -> list[tuple[str, str, str | None]]:
    """(language, code, reason it is not run or None) of each fenced block of a page."""
    with open(page) as f:
        text = f.read()
    found = []
    for m in BLOCK.finditer(text):
        code = "\n".join(line[len(m["indent"]) :] for line in m["code"].splitlines())
        found.append((m["lang"], code, m["reason"]))
    return found


def commands(code: str) -> list[list[str]]:
    """A bash block's commands, continuation lines joined and comments dropped."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


def capped(words: list[str]) -> list[str]:
    words = list(words)
    for i, word in enumerate(words[:-1]):
        if word in CAPS:
            words[i + 1] = str(min(float(words[i + 1]), CAPS[word])).removesuffix(".0")
    if "train" in words and "--help" not in words:
        words += [
            f
            for flag in ("--train_for_env_steps", "--train_for_seconds")
            if flag not in words
            for f in (flag, str(CAPS[flag]))
        ]
    return words


# a training command (capped) already run on an earlier page -> (its folder, its result)
TRAINED: dict[tuple[str, ...], tuple[str, subprocess.CompletedProcess]] = {}


def experiment_dir(argv: list[str], cwd) -> str:
    value = {
        flag: argv[i + 1]
        for i, flag in enumerate(argv[:-1])
        if flag in ("--train_dir", "--experiment")
    }
    return os.path.join(cwd, value.get("--train_dir", "train_dir"), value["--experiment"])


def run_or_copy(argv: list[str], cwd) -> subprocess.CompletedProcess:
    """run(argv), except that a training command an earlier page ran as it is (after the caps) is not trained again:
    its run folder is copied into this page's folder, for the page's next commands (an enjoy, an export)."""
    if not ("train" in argv and "--experiment" in argv and "--help" not in argv):
        return run(argv, cwd)
    key = tuple(argv)
    if key in TRAINED and not os.path.exists(experiment_dir(argv, cwd)):
        earlier_cwd, result = TRAINED[key]
        shutil.copytree(experiment_dir(argv, earlier_cwd), experiment_dir(argv, cwd))
        return result
    result = TRAINED[key] = (cwd, run(argv, cwd))
    return result[1]


def run(argv: list[str], cwd) -> subprocess.CompletedProcess:
    if argv[0] == "asyncrl":
        argv = [sys.executable, "-m", "asyncrl", *argv[1:]]
    elif argv[0] == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    elif argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=240)


PYTHON_CAPS = (
    "import asyncrl.api\n"
    "_train = asyncrl.api.train\n"
    "def _capped(env=None, **flags):\n"
    "    flags['train_for_env_steps'] = min(flags.get('train_for_env_steps', 10**10), 2_000)\n"
    "    flags['train_for_seconds'] = min(flags.get('train_for_seconds', 10**10), 10)\n"
    "    return _train(env, **flags)\n"
    "asyncrl.train = asyncrl.api.train = _capped\n"
)


def test_no_page_names_an_issue():
    for page in PAGES:
        with open(page) as f:
            assert not re.search(r"\bissue \d+", f.read(), re.I), (
                f"{page} names an issue: say what, not which issue"
            )


def test_every_block_is_run_or_says_why_not():
    for page in PAGES:
        for lang, code, reason in blocks(page):
            where = f"{os.path.relpath(page, ROOT)}: {code.splitlines()[0] if code else ''}"
            assert reason is None or reason.strip(), f"{where}: a block not run must say why"
            if reason is None and lang == "bash":
                for words in commands(code):
                    assert words[0] in PROGRAMS, (
                        f"{where}: {words[0]} is not run here; mark the block not run"
                    )
            if reason is None:
                assert lang in ("bash", "python"), (
                    f"{where}: a {lang} block cannot be run; mark it not run"
                )


@pytest.mark.slow
@pytest.mark.parametrize(
    "page", [p for p in PAGES if any(r is None for _, _, r in blocks(p))], ids=os.path.basename
)
def test_the_pages_blocks_run(page, tmp_path, clean_machine):
    for i, (lang, code, reason) in enumerate(blocks(page)):
        if reason is not None:
            continue
        if lang == "python":
            script = tmp_path / f"block_{i}.py"
            script.write_text(PYTHON_CAPS + code)
            results = [run(["python", str(script)], tmp_path)]
        else:
            results = [run_or_copy(capped(words), tmp_path) for words in commands(code)]
        for r in results:
            assert r.returncode == 0, (
                f"{page} block {i}: {r.args}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
            )


@pytest.mark.slow
def test_the_site_builds_with_the_docs_extra_alone_and_shows_what_its_sources_say(tmp_path):
    """`pip install -e ".[docs]" && mkdocs build`: no optional extra (ale-py, MuJoCo, the learning
    extra's statistics) is imported; text in angle brackets shows, result cells read as numbers,
    the results' figures are embedded, a flag's name does not break."""
    hidden = [module for modules in EXTRAS.values() for module in modules]
    hidden += ["rliable", "arch", "pandas"]
    code = (
        f"import sys\nfor name in {hidden!r}:\n    sys.modules[name] = None\n"
        "from mkdocs.__main__ import cli\n"
        f"cli(['build', '--strict', '--quiet', '--site-dir', {str(tmp_path)!r}])\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=240,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    config_page = (tmp_path / "reference" / "config" / "index.html").read_text()
    assert "&lt;train_dir&gt;/&lt;experiment&gt;" in config_page
    assert "stylesheets/extra.css" in config_page
    css = (tmp_path / "stylesheets" / "extra.css").read_text()
    assert re.search(r"td:first-child code \{\s*white-space: nowrap;", css)
    benchmarks_page = (tmp_path / "benchmarks" / "index.html").read_text()
    assert not re.search(r"<td>\s*\[", benchmarks_page), "a cell shows a Python list"
    assert "None" not in re.sub(r"<[^>]+>", "", benchmarks_page.split("<table", 1)[1])
    figures = re.findall(
        r'<img alt="[^"]*" src="\.\./(benchmark-results/[^"]+\.png)"', benchmarks_page
    )
    assert "benchmark-results/peers/sample_factory_compare.png" in figures
    assert all((tmp_path / figure).exists() for figure in figures)


def test_readmes_first_commands_say_which_torch_they_bring():
    """A newcomer's two first commands install torch's CPU build by name (plain `pip install torch`
    brings a CUDA build of gigabytes), and the CUDA build's line stands right after them."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = block.strip().splitlines()
    cpu_torch = "pip install torch --index-url https://download.pytorch.org/whl/cpu && "
    assert len(commands) == 2 and all(command.startswith(cpu_torch) for command in commands)
    assert "asyncrl train --env CartPole-v1" in commands[0] and "pytest" in commands[1]
    after = text.split("```", 2)[2][:600]
    assert "https://download.pytorch.org/whl/cu" in after, (
        "the CUDA build's line follows the commands"
    )


def test_every_object_on_the_api_page_has_a_docstring_of_its_own():
    """Not a dataclass's generated one (`TrainResult(experiment_dir: str, ...)`), which says
    nothing of what the fields hold."""
    with open(os.path.join(ROOT, "docs", "reference", "api.md")) as f:
        paths = re.findall(r"<!-- generated: api (\S+) -->", f.read())
    assert "asyncrl.TrainResult" in paths
    for path in paths:
        module, _, name = path.rpartition(".")
        obj = getattr(importlib.import_module(module), name)
        doc = inspect.getdoc(obj) or ""
        assert doc and not doc.startswith(f"{name}("), f"{path} has no docstring of its own"
