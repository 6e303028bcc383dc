"""The user's `__main__` as a run's child processes see it.

Each child of the fork server imports the parent's main script again (as `__mp_main__`, so the code
under `if __name__ == "__main__":` does not run there), as multiprocessing does for every start
method but fork. Two ways of calling `asyncrl.train` meet that:

- a script that starts the run at its top level, outside that guard: every child would start the
  run again. `unguarded_call` finds it before any child starts, for a one-line error;
- a script that has no file (`python - <<EOF`, a heredoc on standard input): the children cannot
  import it. `main_without_file` lets them do without it, as they do for `python -c` and notebooks;
  the envs and encoders it defines reach them by value (cloudpickle).
"""

from __future__ import annotations

import ast
import contextlib
import os
import sys
from collections.abc import Iterator
from types import FrameType


def main_script() -> str | None:
    """The file of the `__main__` script the children would import, if there is one: none for `python
    -m` (imported by name), `python -c`, a notebook or standard input."""
    main = sys.modules["__main__"]
    if getattr(main.__spec__, "name", None):
        return None
    path = getattr(main, "__file__", None)
    return path if path is not None and os.path.isfile(path) else None


def unguarded_call(frame: FrameType | None) -> tuple[str, int] | None:
    """(script, line) where the stack of `frame` leaves the main script's top level outside its
    `if __name__ == "__main__":` blocks, or None (no main script, or the call is guarded)."""
    script = main_script()
    if script is None:
        return None
    main_globals = sys.modules["__main__"].__dict__
    while frame is not None:
        if frame.f_globals is main_globals and frame.f_code.co_name == "<module>":
            line = frame.f_lineno
            return None if guarded(script, line) else (script, line)
        frame = frame.f_back
    return None


def guarded(script: str, line: int) -> bool:
    """Whether `line` of the script lies in a top-level `if __name__ == "__main__":` block."""
    with open(script) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.If) and is_main_test(node.test):
            if node.lineno <= line <= node.end_lineno:
                return True
    return False


def is_main_test(test: ast.expr) -> bool:
    """`__name__ == "__main__"`, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    if not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [side.id for side in sides if isinstance(side, ast.Name)]
    values = [side.value for side in sides if isinstance(side, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]


@contextlib.contextmanager
def main_without_file() -> Iterator[None]:
    """While the run's children start: a `__main__` whose file does not exist (standard input's
    '<stdin>') shows none, so that they do not try to import it."""
    main = sys.modules["__main__"]
    path = getattr(main, "__file__", None)
    if path is None or os.path.isfile(path) or getattr(main.__spec__, "name", None):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path
