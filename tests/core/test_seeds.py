"""Every random stream from --seed."""

import torch

from asyncrl.cfg.config import Config


def test_a_seed_gives_each_role_its_own_stream_and_no_seed_leaves_torchs_own():
    import gymnasium as gym

    from asyncrl.core.seeds import seed_torch
    from asyncrl.model.actor_critic import build_model

    cfg = Config(env="x", use_rnn=False)

    def initial_weights(*seeding):
        seed_torch(*seeding)
        return torch.cat(
            [
                p.flatten()
                for p in build_model(
                    gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), cfg
                ).parameters()
            ]
        )

    assert torch.equal(initial_weights(1, "learner", 0), initial_weights(1, "learner", 0))
    for other in [(2, "learner", 0), (1, "learner", 1), (1, "policy_worker", 0, 0)]:
        assert not torch.equal(initial_weights(1, "learner", 0), initial_weights(*other))
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    seed_torch(None, "learner", 0)
    assert torch.equal(torch.rand(3), expected)
