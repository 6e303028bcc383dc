"""Sequence packing (asyncrl/algo/packing.py): part-filled slots share the learner's columns and
nothing learned changes."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from asyncrl.algo.minibatches import TrajectoryMinibatches
from asyncrl.algo.packing import place, time_major
from asyncrl.cfg.config import Config
from asyncrl.model.actor_critic import build_model

T = 8
OBS = 4
ACTIONS = 3
H = 8


def test_placed_segments_fit_their_columns_without_overlap():
    lengths = np.random.default_rng(0).integers(1, T + 1, 200)
    placed, columns = place(lengths, T)
    used = np.zeros((columns, T + 1), dtype=int)
    for (column, at), n in zip(placed, lengths):
        # the segment's steps and its bootstrap row
        assert at + n + 1 <= T + 1
        used[column, at : at + n + 1] += 1
    assert used.max() == 1
    # best-fit decreasing: near the bound
    assert columns <= np.ceil((lengths + 1).sum() / (T + 1)) * 1.25
    # 4 + 5 rows share a column of 9; the other stands alone
    assert place(np.array([3, 4, 4]), T)[1] == 2


def slots_of_every_kind(model) -> dict[str, torch.Tensor]:
    """Slot-major tensors [B, T(+1)] as the learner gathers them: a full slot with an episode end,
    one a rollout ended after 3 steps, one whose first 5 rows an earlier update learned, one with a
    truncated episode's final row, an empty one, and one lent mid-step (rows 2-4 learned; the rows
    after it still being written). The stored recurrent states are those the acting policy had,
    stepping each slot from a random state."""
    gen = torch.Generator().manual_seed(0)
    B = 6
    valid = torch.zeros(B, T, dtype=torch.bool)
    dones = torch.rand(B, T, generator=gen) < 0.15
    valid[0] = True
    dones[0, 3] = True
    valid[1, :3] = True
    dones[1, 3:] = True
    valid[2, 5:] = True
    # row 2: the final row
    valid[3, [0, 1, 3]] = True
    dones[3, 1] = False
    dones[3, 2] = True
    dones[3, 4:] = True
    valid[5, 2:5] = True
    slots = {
        "obs": torch.randn(B, T + 1, OBS, generator=gen),
        "valid": valid,
        "dones": dones,
        "actions": torch.randint(0, ACTIONS, (B, T), generator=gen),
        "behavior_logp": -torch.rand(B, T, generator=gen) - 0.5,
        "behavior_params": torch.randn(B, T, ACTIONS, generator=gen),
        "rewards": torch.randn(B, T, generator=gen),
        "policy_version": torch.where(valid, 0, -1),
        "sample": torch.arange(B * T).view(B, T),
    }
    states = torch.zeros(B, T, model.rnn_state_size)
    state = torch.randn(B, model.rnn_state_size, generator=gen)
    with torch.no_grad():
        for t in range(T):
            states[:, t] = state
            state = model.forward_step(slots["obs"][:, t], state)[2] * (~dones[:, t]).unsqueeze(1)
    slots["rnn_states"] = states
    return slots


@pytest.mark.parametrize("with_vtrace", [False, True], ids=["gae", "vtrace"])
@pytest.mark.parametrize("bptt", [T, 4])
@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_packed_columns_learn_what_a_column_per_slot_learns(with_vtrace, bptt, rnn_type):
    """The same samples, each once, in half the columns, with the same log-ratios, values, advantages and targets:
    each segment bootstraps from its own next observation, and its recurrent state starts where the actor's was."""
    cfg = Config(
        env="x",
        use_rnn=True,
        rnn_type=rnn_type,
        rnn_size=H,
        rollout=T,
        recurrence=bptt,
        with_vtrace=with_vtrace,
    )
    model = build_model(gym.spaces.Box(-1, 1, (OBS,)), gym.spaces.Discrete(ACTIONS), cfg)
    slots = slots_of_every_kind(model)
    learned = {}
    for pack in (False, True):
        mb = time_major(dict(slots), bptt, pack)
        with torch.no_grad():
            now = TrajectoryMinibatches(cfg, model, None).forward(mb, gamma=0.9)
        order = mb["sample"][mb["valid"]].argsort()
        learned[pack] = {
            "columns": mb["valid"].shape[1],
            "sample": mb["sample"][mb["valid"]][order],
            **{
                k: getattr(now, k)[mb["valid"]][order]
                for k in ("log_ratio", "values", "advantages", "targets")
            },
        }
    assert learned[False]["columns"] == 6 and learned[True]["columns"] == 3
    assert learned[True]["sample"].tolist() == slots["sample"][slots["valid"]].tolist()
    for name in ("log_ratio", "values", "advantages", "targets"):
        torch.testing.assert_close(
            learned[True][name], learned[False][name], msg=lambda m, name=name: f"{name}: {m}"
        )


def test_full_slots_keep_a_column_each_and_their_bptt_chunk_starts():
    """Nothing to pack (APPO's and lock-step ppo's full slots): the column-per-slot layout,
    unchanged."""
    valid = torch.ones(3, T, dtype=torch.bool)
    mb = time_major({"valid": valid, "obs": torch.randn(3, T + 1, OBS)}, 4, pack=True)
    assert mb["valid"].shape == (T, 3) and mb["state_starts"][:, 0].tolist() == [
        t % 4 == 0 for t in range(T)
    ]


def test_packing_keeps_a_column_per_minibatch():
    """Two short slots fit one column, but two minibatches need two: an empty one would still take
    an Adam step."""
    valid = torch.zeros(2, T, dtype=torch.bool)
    valid[:, :2] = True
    slots = {"valid": valid, "obs": torch.randn(2, T + 1, OBS)}
    assert time_major(dict(slots), T, pack=True)["valid"].shape == (T, 1)
    assert time_major(dict(slots), T, pack=True, min_columns=2)["valid"].shape == (T, 2)
