"""The code reads like prose: one statement a line, comments above what they explain, lines a
reader need not scroll, modules of one concern. Measured over the package (asyncrl/ and envs/)
from the source text; ruff keeps the hard limits (120 columns, the format), these the habits."""

import ast
import io
import os
import tokenize

from helpers import REPO

ROOT = REPO
# a module past this has met its second concern: split it there (never just to fit the number)
MAX_MODULE_LINES = 450


def package_sources() -> dict[str, str]:
    """Path relative to the repository -> source, for every module of asyncrl/ and envs/ but the
    generated gRPC stubs."""
    found = {}
    for folder in ("asyncrl", "envs"):
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith(".py") and not name.startswith("ude_pb2"):
                    path = os.path.join(directory, name)
                    with open(path) as f:
                        found[os.path.relpath(path, ROOT)] = f.read()
    return found


def packed_assignments(source: str) -> list[int]:
    """The lines of `a, b = x, y`: several names bound in one statement from several values."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):
            if any(isinstance(target, ast.Tuple) for target in node.targets):
                found.append(node.lineno)
    return found


def trailing_comments_on_long_lines(source: str, at_least: int) -> list[int]:
    """The lines of at least `at_least` characters that end in a comment after code."""
    lines = source.splitlines()
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        row, column = token.start
        line = lines[row - 1]
        if line[:column].strip() and len(line) >= at_least:
            found.append(row)
    return found


SOURCES = package_sources()
TOTAL_LINES = sum(len(source.splitlines()) for source in SOURCES.values())


def test_packed_assignments_are_rare():
    where = [
        f"{path}:{row}" for path, source in SOURCES.items() for row in packed_assignments(source)
    ]
    per_1000 = 1000 * len(where) / TOTAL_LINES
    assert per_1000 <= 2, (
        f"{per_1000:.1f} packed assignments per 1,000 lines: one a line at {where}"
    )


def test_packed_assignments_are_found():
    source = "a, b = 1, 2\nc, d = f()\n(e, g), h = (1, 2), 3\nfor i, j in x:\n    pass\n"
    assert packed_assignments(source) == [1, 3]


def test_few_lines_are_long():
    long_lines = [
        f"{path}:{row}"
        for path, source in SOURCES.items()
        for row, line in enumerate(source.splitlines(), 1)
        if len(line) >= 110
    ]
    share = len(long_lines) / TOTAL_LINES
    assert share <= 0.03, f"{share:.1%} of the lines have 110 characters or more: {long_lines[:20]}"


def test_comments_stand_above_long_lines():
    where = [
        f"{path}:{row}"
        for path, source in SOURCES.items()
        for row in trailing_comments_on_long_lines(source, 100)
    ]
    assert len(where) <= 20, f"comments trailing code on lines of 100+ characters: {where}"


def test_trailing_comments_are_found():
    source = "x = 1  # short\n" + "y = " + "1 + " * 30 + "1  # long\n# own line " + "z" * 100 + "\n"
    assert trailing_comments_on_long_lines(source, 100) == [2]


def test_modules_stay_small():
    long = {
        path: len(source.splitlines())
        for path, source in SOURCES.items()
        if len(source.splitlines()) > MAX_MODULE_LINES
    }
    assert not long, (
        f"modules over {MAX_MODULE_LINES} lines (split where a second concern starts): {long}"
    )
