"""asyncrl.train wherever people run Python: a heredoc on standard input and a Jupyter notebook,
each with an env it defines and registers without defaults (which then come from its spaces); a
script that starts the run outside its `__main__` guard gets one error before any process starts."""

import inspect
import json
import subprocess
import sys
import textwrap

import corridor
import pytest
from helpers import REPO

# a user's small env, defined where the run starts and registered without defaults: a corridor of
# 8 cells, 0.01 less reward a step, 50 steps at most. The greedy policy that solves it walks right: 7
# steps.
CORRIDOR = (
    "import gymnasium as gym\nimport numpy as np\n\nimport asyncrl\n\n\n"
    + inspect.getsource(corridor.Corridor)
    + "\n\nasyncrl.register_env(\n"
    + '    "corridor", lambda **options: Corridor(length=8, max_steps=50, step_cost=0.01, **options)\n'
    + ")\n"
)


def train_and_solve(train_dir: str) -> str:
    """The code that trains the corridor for at most 40 s and plays its greedy policy once."""
    return textwrap.dedent(f"""
        result = asyncrl.train(
            env="corridor",
            train_dir={train_dir!r},
            experiment="corridor",
            train_for_seconds=40,
            train_for_env_steps=200_000,
            seed=1,
        )
        policy = asyncrl.load(result.experiment_dir)
        env = Corridor(length=8, max_steps=50, step_cost=0.01)
        obs, _ = env.reset(seed=0)
        state = None
        for step in range(1, 51):
            action, state = policy.act(obs, state, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        print("greedy policy:", "solved" if terminated else "not solved", "in", step, "steps")
    """)


@pytest.mark.slow
def test_a_heredoc_on_standard_input_trains_its_own_env_and_its_greedy_policy_solves_it(
    tmp_path, clean_machine
):
    """`python - <<EOF ... EOF`: the run's processes cannot import a script that has no file; the
    env defined in it reaches them by value, and the defaults of its spaces (a vector observation:
    the small MLP's) make it learn."""
    script = CORRIDOR + train_and_solve(str(tmp_path))
    r = subprocess.run(
        [sys.executable, "-"], input=script, capture_output=True, text=True, cwd=REPO, timeout=240
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FileNotFoundError" not in r.stderr, r.stderr[-3000:]
    assert "greedy policy: solved in 7 steps" in r.stdout, r.stdout[-3000:]
    config = json.loads((tmp_path / "corridor" / "config.json").read_text())
    # a vector observation's defaults, as CartPole-v1 gets them: a small MLP without an RNN
    assert config["use_rnn"] is False and config["encoder_mlp_layers"] == [64, 64]


@pytest.mark.slow
def test_a_notebook_trains_its_own_env_and_its_greedy_policy_solves_it(tmp_path, clean_machine):
    """A Jupyter notebook (executed by nbclient in an IPython kernel) defines the env in one cell
    and trains it in the next."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(CORRIDOR),
        nbformat.v4.new_code_cell(train_and_solve(str(tmp_path))),
    ]
    client = nbclient.NotebookClient(
        notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": REPO}}
    )
    client.execute()
    printed = "".join(
        output.get("text", "")
        for output in notebook.cells[1].outputs
        if output.get("output_type") == "stream" and output.get("name") == "stdout"
    )
    assert "greedy policy: solved in 7 steps" in printed, printed[-3000:]


def test_a_script_that_trains_outside_its_main_guard_is_told_how_to_fix_it(tmp_path, clean_machine):
    """Every process of the run would import the script again and start the run again: one error
    names the line and the guard, before any process starts, and nothing is left behind."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import asyncrl\n\n"
        f"asyncrl.train(env='CartPole-v1', train_dir={str(tmp_path)!r}, train_for_env_steps=2000)\n"
    )
    r = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert r.returncode == 1, r.stdout + r.stderr
    message = r.stderr.strip().splitlines()[-1]
    assert message == (
        f"asyncrl.cfg.errors.ConfigError: {script}, line 3, starts the run at the top level of the "
        "script: each of the run's processes imports the script again and would start it again; "
        'put the call under `if __name__ == "__main__":`'
    ), r.stderr
    assert r.stderr.count("Traceback") == 1 and "bootstrapping" not in r.stderr
    assert not (tmp_path / "default_experiment").exists()
