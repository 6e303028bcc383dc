"""Share a trained agent on the Hugging Face Hub (huggingface_hub), as Sample Factory's users do.

    asyncrl push --experiment X [--train_dir D] --hf_repository USER/NAME
    asyncrl enjoy --hf_repository USER/NAME [--train_dir D] ...      (and asyncrl match --hf_repository ...)

`push` uploads one self-contained folder (hub_folder), laid out as a run: its config.json, its
latest checkpoint (and the best by evaluation, if evaluation wrote one), the replay video if `enjoy
--save_video` wrote one, and a model card (README.md) with the env, the flags, the evaluation score
and the commands that play it. `enjoy` and `match` download that folder into <train_dir>/<NAME> and
play it as a run of their own; `train` can go on from it.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile

from asyncrl.cfg.config import Config
from asyncrl.cfg.errors import ConfigError
from asyncrl.cfg.extras import require
from asyncrl.cfg.parsing import OneLineErrorParser, add_config_arguments
from asyncrl.commands.saved_run import config_of_run
from asyncrl.core.checkpoint import best_checkpoint_path, checkpoint_dir, list_checkpoints

VIDEOS = ("replay.mp4", "replay.gif")


def _hub():
    require("hub", "the Hugging Face Hub")
    # the hub extra's, checked above
    import huggingface_hub

    return huggingface_hub


def shared_checkpoints(cfg: Config, policy_index: int) -> list[str]:
    """The checkpoints to share: the latest (weights and optimizer: training goes on from it) and
    best_checkpoint.pth (weights alone) if evaluation wrote one."""
    paths = list_checkpoints(checkpoint_dir(cfg.experiment_dir, policy_index))
    if not paths:
        raise ConfigError(
            f"no checkpoint in {checkpoint_dir(cfg.experiment_dir, policy_index)}: train first"
        )
    best = best_checkpoint_path(cfg.experiment_dir, policy_index)
    return paths[-1:] + ([best] if os.path.isfile(best) else [])


def evaluation_score(experiment_dir: str) -> dict | None:
    """The best evaluation of the run (eval.jsonl), else the mean return of its last stats row; None
    if neither."""
    path = os.path.join(experiment_dir, "eval.jsonl")
    if os.path.isfile(path):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        if rows:
            best = max(rows, key=lambda r: r["return_mean"])
            return {
                "mean": best["return_mean"],
                "std": best["return_std"],
                "episodes": best["episodes"],
                "env_steps": best["env_steps"],
                "source": "evaluation (eval.jsonl, fixed seeds)",
            }
    path = os.path.join(experiment_dir, "stats.jsonl")
    if os.path.isfile(path):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        rows = [r for r in rows if r.get("episode_reward_mean") is not None]
        if rows:
            return {
                "mean": rows[-1]["episode_reward_mean"],
                "std": None,
                "episodes": None,
                "env_steps": rows[-1]["env_steps"],
                "source": "training episodes (stats.jsonl)",
            }
    return None


def model_card(cfg: Config, repository: str, score: dict | None, has_best: bool) -> str:
    """README.md of the shared folder: the Hub's metadata header, then what the agent is and how to
    run it."""
    name = repository.split("/")[-1]
    value = "not evaluated"
    if score is not None:
        value = f"{score['mean']:.2f}"
        if score["std"] is not None:
            value += f" +/- {score['std']:.2f}"
    measured = "" if score is None else f" ({score['source']}, at {score['env_steps']:,} env steps)"
    flags = {k: v for k, v in cfg.to_json().items() if k not in ("train_dir", "experiment")}
    best = " --load_checkpoint_kind best" if has_best else ""
    return "\n".join(
        [
            "---",
            "library_name: asyncrl",
            "tags:",
            "- reinforcement-learning",
            "- deep-reinforcement-learning",
            f"- {cfg.env}",
            "model-index:",
            "- name: APPO",
            "  results:",
            "  - task:",
            "      type: reinforcement-learning",
            "      name: reinforcement-learning",
            "    dataset:",
            f"      name: {cfg.env}",
            f"      type: {cfg.env}",
            "    metrics:",
            "    - type: mean_reward",
            f"      value: {value}",
            "      name: mean_reward",
            "      verified: false",
            "---",
            "",
            f"# {name}: an asyncrl agent for {cfg.env}",
            "",
            f"Trained with asyncrl (`--algo {cfg.algo}`). Mean return: **{value}**{measured}.",
            "",
            "Watch it play (downloads this folder into train_dir/):",
            "",
            "```bash",
            f"asyncrl enjoy --hf_repository {repository}{best} --max_num_episodes 3",
            "```",
            "",
            "Train on from it (the folder is an asyncrl experiment; run this where it was downloaded):",
            "",
            "```bash",
            f"asyncrl train --train_dir train_dir --experiment {name}",
            "```",
            "",
            "The run's flags (config.json):",
            "",
            "```json",
            json.dumps(flags, indent=1),
            "```",
            "",
        ]
    )


def hub_folder(cfg: Config, repository: str, out_dir: str, policy_index: int = 0) -> str:
    """Build the folder `push` uploads in out_dir (a run of its own: enjoy, match and train read it
    as they read <train_dir>/<experiment>) and return out_dir."""
    checkpoints = shared_checkpoints(cfg, policy_index)
    os.makedirs(checkpoint_dir(out_dir, policy_index), exist_ok=True)
    for path in checkpoints:
        shutil.copyfile(
            path, os.path.join(checkpoint_dir(out_dir, policy_index), os.path.basename(path))
        )
    with open(os.path.join(cfg.experiment_dir, "config.json")) as f:
        config = json.load(f)
    # the author's wandb run is not the downloader's
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump({**config, "with_wandb": False}, f, indent=2)
    for name in VIDEOS:
        if os.path.isfile(os.path.join(cfg.experiment_dir, name)):
            shutil.copyfile(os.path.join(cfg.experiment_dir, name), os.path.join(out_dir, name))
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(
            model_card(cfg, repository, evaluation_score(cfg.experiment_dir), len(checkpoints) > 1)
        )
    return out_dir


def add_hub_argument(parser) -> None:
    parser.add_argument(
        "--hf_repository",
        default=None,
        help="USER/NAME: play a run someone pushed to the Hugging Face Hub (`asyncrl push`); it is "
        "downloaded into <train_dir>/NAME.",
    )


def run_from_hub(given: dict, repository: str | None) -> dict:
    """With --hf_repository: the pushed run, downloaded into <train_dir>/<NAME>, is the experiment
    to play."""
    if not repository:
        return given
    return {**given, "experiment": download(repository, given.get("train_dir", Config.train_dir))}


def check_repository(repository: str) -> None:
    if repository.count("/") != 1 or not all(repository.split("/")):
        raise ConfigError(
            f"--hf_repository {repository!r}: give it as USER/NAME (or ORGANIZATION/NAME)"
        )


def push(argv: list[str]) -> int:
    parser = OneLineErrorParser(
        prog="asyncrl push",
        usage="%(prog)s --experiment NAME --hf_repository USER/NAME [--FLAG VALUE ...]",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument(
        "--hf_repository", required=True, help="The Hub repository to upload to, USER/NAME."
    )
    parser.add_argument("--policy_index", type=int, default=0, help="Which policy of the run.")
    add_config_arguments(parser)
    given = vars(parser.parse_args(argv))
    repository = given.pop("hf_repository")
    policy_index = given.pop("policy_index")
    check_repository(repository)
    cfg = config_of_run(given)
    hub = _hub()
    with tempfile.TemporaryDirectory() as tmp:
        # first: a run with nothing to share says so
        folder = hub_folder(cfg, repository, tmp, policy_index)
        if hub.get_token() is None:
            raise ConfigError(
                "no Hugging Face token: run `huggingface-cli login` or set HF_TOKEN (a token with write access)"
            )
        try:
            api = hub.HfApi()
            api.create_repo(repository, exist_ok=True)
            url = api.upload_folder(
                repo_id=repository,
                folder_path=folder,
                commit_message=f"asyncrl push: {cfg.experiment} ({cfg.env})",
            )
        # no network, a bad token, no write access: all one line
        except Exception as e:
            raise ConfigError(
                f"cannot upload to the Hugging Face Hub ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:200] if str(e) else 'no message'})"
            ) from None
    print(f"asyncrl push: {cfg.experiment_dir} -> {url}", flush=True)
    return 0


def download(repository: str, train_dir: str) -> str:
    """Download a pushed folder into <train_dir>/<NAME>; returns NAME (the experiment to play).
    ConfigError (one line) if the Hub cannot be reached or has no such repository."""
    check_repository(repository)
    name = repository.split("/")[-1]
    hub = _hub()
    try:
        hub.snapshot_download(repo_id=repository, local_dir=os.path.join(train_dir, name))
    except Exception as e:
        raise ConfigError(
            f"cannot download {repository} from the Hugging Face Hub ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:200] if str(e) else 'no message'})"
        ) from None
    if not glob.glob(os.path.join(train_dir, name, "checkpoint_p*", "checkpoint_*.pth")):
        raise ConfigError(
            f"{repository} holds no asyncrl checkpoint (was it pushed with `asyncrl push`?)"
        )
    return name
