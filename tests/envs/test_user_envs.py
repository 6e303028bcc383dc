"""A user's own env, without forking asyncrl: an installed package's entry point, an import path,
and register_env in the user's script; each trains with several worker processes."""

import inspect
import json
import os
import subprocess
import sys
import textwrap

import corridor
import pytest
from helpers import assert_user_error, flags, read_stats, run_cli, run_cli_error, run_python

# the env of a user's package and script, its source as theirs would be
CORRIDOR = inspect.getsource(corridor)

TRAIN = [
    *flags(
        num_workers=2,
        rollout=8,
        batch_size=64,
        train_for_env_steps=3000,
        experiment_summaries_interval=1,
    ),
]


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory):
    """pip-installs a separate package declaring an `asyncrl.envs` entry point into a folder of its
    own; returns an environment whose PYTHONPATH holds it (as a virtualenv's site-packages
    would)."""
    root = tmp_path_factory.mktemp("plugin")
    source = root / "src"
    target = root / "site"
    (source / "tiny_corridor_pkg").mkdir(parents=True)
    (source / "tiny_corridor_pkg" / "__init__.py").write_text("")
    (source / "tiny_corridor_pkg" / "corridor.py").write_text(CORRIDOR)
    (source / "setup.py").write_text(
        textwrap.dedent("""
        from setuptools import setup
        setup(name="tiny-corridor-pkg", version="0.1", packages=["tiny_corridor_pkg"],
              entry_points={"asyncrl.envs": ["tiny_corridor = tiny_corridor_pkg.corridor:make_corridor"]})
    """)
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    return {**os.environ, "PYTHONPATH": str(target)}


def check_trained(experiment_dir, workers=2):
    rows = read_stats(experiment_dir)
    assert rows[-1]["env_steps"] >= 3000 and rows[-1]["train_step"] > 0, rows[-1]
    # the env's own stats came through
    assert rows[-1]["episodes"] > 0 and "episode_reached_mean" in rows[-1]
    config = json.loads((experiment_dir / "config.json").read_text())
    # the factory's defaults
    assert config["num_workers"] == workers and config["encoder_mlp_layers"] == [16]


def test_installed_entry_point_env_trains_with_several_workers(
    tmp_path, installed_plugin, clean_machine
):
    listed = run_cli("envs", env=installed_plugin, timeout=60)
    assert (
        "tiny_corridor" in listed.stdout
        and "tiny_corridor_pkg.corridor:make_corridor" in listed.stdout
    )
    r = run_cli(
        "train",
        *flags(env="tiny_corridor", train_dir=tmp_path, experiment="ep"),
        *TRAIN,
        env=installed_plugin,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    check_trained(tmp_path / "ep")


def test_import_path_env_trains(tmp_path, installed_plugin, clean_machine):
    r = run_cli(
        "train",
        *flags(env="tiny_corridor_pkg.corridor:make_corridor", train_dir=tmp_path, experiment="ip"),
        *TRAIN,
        env=installed_plugin,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    check_trained(tmp_path / "ip")


@pytest.mark.slow
def test_env_registered_in_a_users_script_reaches_the_workers(tmp_path, clean_machine):
    """register_env under `if __name__ == "__main__"`: spawned workers never run that line, so only
    the entry the runner ships to them can make the env (its class is defined in the script: shipped
    by value)."""
    script = tmp_path / "my_training.py"
    script.write_text(
        CORRIDOR
        + textwrap.dedent(f"""
        if __name__ == "__main__":
            import sys
            from asyncrl import register_env
            from asyncrl.cli import main
            register_env("my_corridor", lambda **options: Corridor(**options), "my corridor",
                         {{"use_rnn": False, "encoder_mlp_layers": [16]}})
            sys.exit(main(["train", "--env", "my_corridor", "--train_dir", {str(tmp_path)!r}, "--experiment", "script",
                           *map(str, {TRAIN!r})]))
    """)
    )
    r = run_python(script, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    check_trained(tmp_path / "script")


@pytest.mark.parametrize(
    "env,needle",
    [
        ("no_such_pkg.envs:make", "cannot import 'no_such_pkg.envs'"),
        ("tiny_corridor_pkg.corridor:no_such_factory", "has no attribute 'no_such_factory'"),
        ("tiny_corridor_pkg.corridor:not_an_env", "returned a str, not a gymnasium.Env"),
    ],
)
def test_bad_import_path_is_one_line_and_exit_2(tmp_path, installed_plugin, env, needle):
    r = run_cli_error(
        "train", *flags(env=env, train_dir=tmp_path), path=[installed_plugin["PYTHONPATH"]]
    )
    assert_user_error(r, needle)


def test_envs_install_as_asyncrl_envs_not_a_top_level_package(tmp_path):
    """The wheel holds the env adapters at asyncrl/envs/, nothing at a top-level envs/ that could
    shadow (or be shadowed by) another project's `envs`; installed, `import envs` finds nothing of
    ours."""
    from helpers import REPO

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path),
            REPO,
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    import zipfile

    names = zipfile.ZipFile(next(tmp_path.glob("asyncrl-*.whl"))).namelist()
    assert {"asyncrl/envs/__init__.py", "asyncrl/envs/doom.py", "asyncrl/envs/synthetic.py"} <= set(
        names
    )
    assert not [n for n in names if n.startswith("envs/")], names
    r = run_python(
        "-c",
        "import importlib.util, asyncrl.envs; print(importlib.util.find_spec('envs'))",
        cwd=tmp_path,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout.strip() == "None", r.stdout + r.stderr
