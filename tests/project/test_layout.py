"""The package's shape: layers you can see in the folders, imports that only go down, no import
cycle.

Read from the source with ast (nothing is imported), so a new module or import is checked as soon as
it is written.
"""

import ast
import os
import re

import pytest
from helpers import REPO

ROOT = REPO
# bottom first: a module may import its own layer and the layers before it
LAYERS = [
    "cfg",
    "core",
    "envs",
    "model",
    "algo",
    "distributed",
    "population",
    "roles",
    "remote",
    "measure",
    "commands",
    "top",
]
# the only function-local imports of the package's own code, each with the reason it is not at the
# top
LAZY = {
    "asyncrl.api": "torch's import (seconds) comes with the first load, so that `import asyncrl` stays light",
    "asyncrl.cli": "a command's module, and torch (seconds), are imported only when that command runs",
    "asyncrl.commands.bench": "torch's import (seconds) comes after the flags are checked",
    "asyncrl.commands.enjoy": "torch's import (seconds) comes after the flags and the checkpoint's path are checked",
    "asyncrl.commands.export": "torch and onnx come after the flags and the checkpoint's path are checked",
    "asyncrl.commands.match": "torch's import (seconds) comes after the flags and the paths are checked",
    "asyncrl.commands.train": "torch's import (seconds) comes after the flags are checked",
    "asyncrl.commands.tune": "torch's import (seconds) comes after the flags are checked",
}


def modules() -> dict[str, str]:
    """Module name -> file, for the package as it installs (envs/ is asyncrl.envs)."""
    found = {}
    for folder, package in (("asyncrl", "asyncrl"), ("envs", "asyncrl.envs")):
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            for file in files:
                # generated gRPC code
                if file.endswith(".py") and not file.startswith("ude_pb2"):
                    path = os.path.join(directory, file)
                    relative = os.path.relpath(path, os.path.join(ROOT, folder))[: -len(".py")]
                    found[
                        (package + "." + relative.replace(os.sep, ".")).removesuffix(".__init__")
                    ] = path
    return found


def imports(path: str, known: dict[str, str]) -> list[tuple[str, bool]]:
    """(imported module of the package, inside a function?) of each import in the file."""
    found = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module:
                names = [f"{child.module}.{alias.name}" for alias in child.names]
            else:
                names = []
            for name in names:
                # an attribute of a module: the module
                while name not in known and "." in name:
                    name = name.rsplit(".", 1)[0]
                if name in known:
                    found.append((name, inner))
            visit(child, inner)

    with open(path) as f:
        visit(ast.parse(f.read()), False)
    return found


def pyproject() -> dict:
    # Python 3.11+
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else "top"


MODULES = modules()
EDGES = {
    module: [(name, lazy) for name, lazy in imports(path, MODULES) if name != module]
    for module, path in MODULES.items()
}


def test_every_module_is_in_a_layer_and_the_top_stays_small():
    top = [m for m in MODULES if layer(m) == "top" and m != "asyncrl"]
    assert len(top) <= 12, f"asyncrl/ has {len(top)} top-level modules: {sorted(top)}"
    subpackages = {m.split(".")[1] for m in MODULES if m.count(".") >= 2}
    assert subpackages <= set(LAYERS), f"subpackages in no layer: {subpackages - set(LAYERS)}"


def test_imports_only_go_down():
    upward = [
        f"{m} -> {name}"
        for m, edges in EDGES.items()
        for name, _ in edges
        if LAYERS.index(layer(name)) > LAYERS.index(layer(m))
    ]
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_function_local_imports_only_where_listed():
    unlisted = sorted(
        {
            f"{m} -> {name}"
            for m, edges in EDGES.items()
            for name, lazy in edges
            if lazy and m not in LAZY
        }
    )
    assert not unlisted, (
        "function-local imports of the package's own code (import it at the top):\n"
        + "\n".join(unlisted)
    )


def test_the_import_graph_has_no_cycle():
    # depth-first search: 1 on the stack, 2 done
    state = {}
    stack = []

    def visit(module):
        state[module] = 1
        stack.append(module)
        for name, _ in EDGES[module]:
            if state.get(name) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(name) :] + [name]))
            if name not in state:
                visit(name)
        stack.pop()
        state[module] = 2

    for module in sorted(MODULES):
        if module not in state:
            visit(module)


def test_architecture_names_every_module():
    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        text = f.read()
    unnamed = [
        m
        for m, path in MODULES.items()
        if not path.endswith("__init__.py") and f"`{os.path.basename(path)}`" not in text
    ]
    assert not unnamed, f"docs/architecture.md does not name {unnamed}"


def test_nothing_binds_modules_by_hand():
    """Reading sys.modules (the user's __main__) is fine; binding a module there is not."""
    for module, path in MODULES.items():
        with open(path) as f:
            assert not re.search(r"sys\.modules\[[^\]]*\]\s*=[^=]", f.read()), (
                f"{module} assigns sys.modules: install the package instead"
            )


def test_the_grpc_stubs_need_the_versions_the_package_declares():
    """The build's grpcio-tools writes stubs that refuse an older grpcio or protobuf than its own:
    the package must declare at least those, and run the same protoc when an editable checkout
    rebuilds them."""
    project = pyproject()
    remote = project["project"]["optional-dependencies"]["remote"]
    declared = {re.split(r"[<>=!~ ]", d, maxsplit=1)[0]: d for d in remote}
    (tools,) = [r for r in project["build-system"]["requires"] if r.startswith("grpcio-tools")]
    assert declared["grpcio-tools"] == tools and "==" in tools, (
        "one exact protoc, at build and at run time"
    )
    stubs = os.path.join(ROOT, "asyncrl", "remote")
    with open(os.path.join(stubs, "ude_pb2_grpc.py")) as f:
        grpc_version = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", f.read())[1]
    with open(os.path.join(stubs, "ude_pb2.py")) as f:
        major, minor, patch = re.search(
            r"Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),", f.read()
        ).groups()
    assert declared["grpcio"] == f"grpcio>={grpc_version}"
    assert declared["protobuf"] == f"protobuf>={major}.{minor}.{patch},<{int(major) + 1}"


def test_every_subpackage_is_installed():
    """pyproject.toml lists the packages a wheel holds: a new subpackage missing there would work in
    a checkout and be missing from every install."""
    listed = set(pyproject()["tool"]["setuptools"]["packages"])
    packages = {m for m, path in MODULES.items() if path.endswith("__init__.py")}
    assert listed == packages, (
        f"missing from pyproject.toml: {packages - listed}; listed but gone: {listed - packages}"
    )
