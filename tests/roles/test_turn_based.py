"""Turn-based games (PettingZoo AECEnvs whose agents take turns): an agent's samples are its own
moves, and what the other agents' turns give it counts for its last move
(asyncrl/roles/turns.py)."""

import re

import numpy as np
import pytest
import torch
from helpers import (
    SMALL_MLP_RUN,
    assert_user_error,
    flags,
    read_stats,
    run_cli,
    run_cli_error,
    serial_runner,
)

from asyncrl.envs import make_agents
from asyncrl.roles.learner import Learner
from asyncrl.roles.serial_runner import take_turn
from tests.turn_envs import CHOICES, MOVES

TAKE_TURNS = "tests.turn_envs:take_turns"


def test_a_turn_is_one_step_in_which_only_the_agent_to_move_acts():
    """TurnBasedAgents over tests.turn_envs' game: the agents alternate (waits), a waiting agent's
    action is ignored, its observation is its view of the game (no target, no allowed action), a
    move's reward comes at the other's move, and the game's end reaches both agents in the step that
    ends it."""
    env = make_agents(TAKE_TURNS)
    assert env.turn_based and env.observation_space.mask_size == CHOICES
    obs, _ = env.reset(seed=0)
    paid = []
    moves = 0
    while True:
        mover = env.waits.index(False)
        assert env.waits == [mover == 1, mover == 0] and moves % 2 == mover
        target = int(obs[mover][:CHOICES].argmax())
        assert obs[1 - mover][: CHOICES + 1].sum() == 0 and obs[1 - mover][-CHOICES:].sum() == 0
        actions = [target, target]
        # illegal, and ignored
        actions[1 - mover] = int(np.flatnonzero(obs[mover][-CHOICES:] == 0)[0])
        obs, rewards, terminated, truncated, infos = env.step(actions)
        paid.append(rewards)
        moves += 1
        if any(terminated):
            break
    assert moves == 2 * MOVES and terminated == [True, True] and truncated == [False, False]
    assert paid[0] == [0.0, 0.0] and all(
        r == [1.0, 0.0] if t % 2 else r == [0.0, 1.0] for t, r in enumerate(paid[1:-1], 1)
    )
    assert paid[-1] == [1.0, 1.0] and infos[0]["episode_stats"] == {"illegal": 0}


@pytest.mark.parametrize("truncate", [False, True])
def test_each_sample_is_the_agents_own_move_with_what_it_earned(tmp_path, truncate):
    """Serial mode, slots of 3 rows (so they fill mid-game, and an agent waiting with a full slot
    holds it until its turn): every learned row is a move of its agent (its target and allowed
    actions shown, a move count of its own), an allowed action, the reward of exactly that move (1
    for a hit, whether paid at the agent's own step or the other's), and done at the agent's last
    move of the game, every row in order of the agent's moves. A game cut by a time limit instead:
    no move is done, and the row after each agent's last move holds no sample (its final
    observation, which the learner bootstraps from)."""
    runner = serial_runner(
        tmp_path,
        env=TAKE_TURNS,
        rollout=3,
        batch_size=24,
        encoder_mlp_layers=[16],
        env_options={"truncate": truncate},
    )
    learner = next(c for c in runner.components if isinstance(c, Learner))
    batches = []
    train = learner.train

    def recording_train(batch, *args):
        batches.append({k: v.clone() for k, v in batch.items()})
        return train(batch, *args)

    learner.train = recording_train
    while len(batches) < 12:
        for c in runner.components:
            take_turn(c)
    rows = final_rows = 0
    for b in batches:
        valid = b["valid"]
        obs = b["obs"][:-1][valid]
        actions = b["actions"][valid]
        targets = obs[:, :CHOICES]
        moves = obs[:, CHOICES] * MOVES
        masks = obs[:, -CHOICES:]
        assert torch.equal(targets.sum(1), torch.ones(len(obs))), (
            "a row of a step the agent waited in"
        )
        assert masks.gather(1, actions.unsqueeze(1)).eq(1).all()
        torch.testing.assert_close(b["rewards"][valid], (targets.argmax(1) == actions).float())
        last_moves = moves.round() == MOVES - 1
        assert torch.equal(b["dones"][valid], last_moves & (not truncate))
        # the row after a last move (where the column has one) is its final row, without a sample
        if truncate:
            last = torch.zeros_like(valid)
            after_last = torch.zeros_like(valid)
            last[valid] = last_moves
            after_last[1:] = last[:-1]
            assert not (valid & after_last).any()
            final_rows += int(after_last.sum())
        # within a segment, each row is the agent's next move
        for column in range(valid.shape[1]):
            played = (b["obs"][:-1, column, CHOICES] * MOVES).round()[valid[:, column]]
            step = (played[1:] - played[:-1]) % MOVES
            assert (step == 1).all(), played
        rows += len(obs)
    assert rows >= 12 * 20 and (final_rows > 0 or not truncate)


@pytest.mark.slow
def test_a_turn_based_game_trains_without_a_forbidden_move_and_plays_a_match(tmp_path):
    """Real processes, one policy in both seats: it learns its targets (random play among the
    allowed moves scores MOVES / 2 = 2, all hits 4), although all but a player's last reward come
    while it waits; no move is illegal; each agent's episode is its own MOVES moves; `asyncrl match`
    and `enjoy` play the game with the trained policy."""
    r = run_cli(
        "train",
        *flags(env=TAKE_TURNS, train_dir=tmp_path, experiment="t", train_for_env_steps=30000),
        *SMALL_MLP_RUN,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [row for row in read_stats(tmp_path / "t") if row.get("episode_reward_mean") is not None]
    assert rows and all(
        row["episode_illegal_mean"] == 0 and row["episode_len_mean"] == MOVES for row in rows
    )
    assert rows[-1]["episode_reward_mean"] > 3.5
    match = run_cli(
        "match",
        *flags(env=TAKE_TURNS, train_dir=tmp_path, experiment="t"),
        "--players",
        "latest",
        "random",
        *flags(episodes=20),
        timeout=120,
    )
    assert match.returncode == 0 and "latest vs random: " in match.stdout, (
        match.stdout + match.stderr
    )
    enjoy = run_cli(
        "enjoy",
        *flags(env=TAKE_TURNS, train_dir=tmp_path, experiment="t", max_num_episodes=2),
        timeout=120,
    )
    assert enjoy.returncode == 0, enjoy.stdout[-2000:] + enjoy.stderr[-2000:]
    # each player's
    returns = re.findall(r"episode \d: return [\d.]+ \(agents: ([\d.]+), ([\d.]+)\)", enjoy.stdout)
    assert len(returns) == 2 and all(float(r) > MOVES / 2 for pair in returns for r in pair), (
        enjoy.stdout
    )


@pytest.mark.slow
def test_pettingzoo_tic_tac_toe_trains_by_self_play_without_an_illegal_move(tmp_path):
    """PettingZoo classic's own game (its Dict observations with action masks; an illegal move would
    end a game with a warning): the policy plays itself and frozen past versions of itself, each
    agent's episode 3 to 5 of its own moves, and the frozen versions are rated."""
    r = run_cli(
        "train",
        *flags(
            env="pettingzoo.classic.tictactoe_v3:env",
            train_dir=tmp_path,
            experiment="ttt",
            train_for_env_steps=30000,
            selfplay_snapshot_every_env_steps=5000,
        ),
        timeout=180,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "llegal move" not in r.stdout + r.stderr
    rows = [row for row in read_stats(tmp_path / "ttt") if row.get("episode_len_mean") is not None]
    assert rows and all(3 <= row["episode_len_mean"] <= 5 for row in rows)
    assert rows[-1]["pool_rating_ordinal_mean"] is not None


@pytest.mark.parametrize("command", ["train", "env-server"])
def test_what_turn_based_games_do_not_have_yet_is_one_line_and_exit_2(tmp_path, command):
    """Synchronous PPO (a rollout would close before the other turns pay for the last moves), and
    remote envs (the wire does not say whose turn it is: the server's process, which makes the envs,
    stops at once)."""
    if command == "train":
        r = run_cli_error("train", "--env", TAKE_TURNS, "--algo", "ppo", "--train_dir", tmp_path)
    else:
        r = run_cli("env-server", "--env", TAKE_TURNS, "--port", 0, timeout=60)
    assert_user_error(r, "turn-based")


def test_the_random_player_keeps_to_the_allowed_actions():
    from asyncrl.commands.match import RandomPlayer

    env = make_agents(TAKE_TURNS)
    obs, _ = env.reset(seed=0)
    mask = obs[0][-CHOICES:]
    picks = {RandomPlayer().act(env, 0, obs[0]) for _ in range(200)}
    assert picks == set(np.flatnonzero(mask).tolist())


def test_evaluation_holds_a_waiting_agents_recurrent_state():
    """play_episode (enjoy, evaluation) with a GRU policy: an agent's recurrent state moves on at
    its own turns only, as in training, where nobody computes a waiting agent's action."""
    from asyncrl.cfg.config import Config
    from asyncrl.model.actor_critic import build_model
    from asyncrl.roles.evaluator import play_episode

    env = make_agents(TAKE_TURNS)
    model = build_model(
        env.observation_space, env.action_space, Config(env="x", use_rnn=True, rnn_size=8)
    )
    calls = []
    forward_step = model.forward_step

    def recording_forward_step(obs, rnn_state):
        params, value, new_state = forward_step(obs, rnn_state)
        calls.append((rnn_state.clone(), new_state.clone(), list(env.waits)))
        return params, value, new_state

    model.forward_step = recording_forward_step
    play_episode(model, env, deterministic=False, seed=0)
    assert len(calls) == 2 * MOVES
    # steps at which a waiting agent's computed state differed from the one it kept
    moved_on = 0
    for (state_in, state_out, waits), (next_in, _, _) in zip(calls, calls[1:]):
        for agent, waited in enumerate(waits):
            assert torch.equal(next_in[agent], state_in[agent] if waited else state_out[agent])
            moved_on += waited and not torch.equal(state_out[agent], state_in[agent])
    assert moved_on > 0


def test_bench_raw_mode_plays_legal_moves_and_counts_each_turn_once():
    """asyncrl bench's raw mode (random play, the simulation limit) counts env steps as a run does,
    one per turn (the agent that moved), and keeps to the allowed moves."""
    from asyncrl.measure.raw import RandomPlay

    play = RandomPlay(TAKE_TURNS, {}, 2, 0)
    moves = []
    for agents in play.envs:
        game = agents.env

        def checked_step(action, step=game.step, game=game):
            # (a dead step's is None)
            if action is not None:
                moves.append(bool(game.mask[action]))
            step(action)

        game.step = checked_step
    assert sum(play.step() for _ in range(50)) == 2 * 50
    assert len(moves) == 100 and all(moves)
