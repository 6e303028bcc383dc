"""Observations with images beside other entries (packed_observations.PackedObservation): packed into one
byte vector at the env, read back by the model as views, a conv encoder per image beside an MLP on
the rest; in real processes, through PettingZoo's agents and the ONNX graph."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers import flags, read_stats, run_cli

from asyncrl.cfg.config import Config
from asyncrl.envs.gym_adapter import adapt, with_mask_from_info
from asyncrl.envs.packed_observations import PackedObservation
from asyncrl.model.actor_critic import build_model
from asyncrl.model.distributions import ILLEGAL_LOGIT
from asyncrl.model.encoders import unpack_observation


class Mixed(gym.Env):
    """An HWC camera, a CHW depth map, a Discrete and a Box entry and an action mask, all random."""

    observation_space = gym.spaces.Dict(
        {
            "camera": gym.spaces.Box(0, 255, (40, 44, 3), np.uint8),
            "depth": gym.spaces.Box(0, 255, (1, 37, 36), np.uint8),
            "health": gym.spaces.Discrete(5),
            "position": gym.spaces.Box(-10, 10, (3,), np.float32),
            "action_mask": gym.spaces.MultiBinary(4),
        }
    )
    action_space = gym.spaces.Discrete(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.shown = self.observation_space.sample()
        # one action allowed, one forbidden, whatever the sample
        self.shown["action_mask"][:2] = (1, 0)
        return self.shown, {}


def test_a_dict_with_images_packs_into_bytes_that_unpack_to_its_entries():
    env = adapt("mixed", Mixed())
    space = env.observation_space
    obs, _ = env.reset(seed=0)
    shown = env.unwrapped.shown
    assert isinstance(space, PackedObservation) and obs.dtype == np.uint8 and space.contains(obs)
    assert (
        space.image_shapes == {"camera": (3, 40, 44), "depth": (1, 37, 36)}
        and space.vector_offset % 4 == 0
    )
    parts = space.unpack(obs)
    # HWC made CHW
    assert np.array_equal(parts["camera"], np.transpose(shown["camera"], (2, 0, 1)))
    assert np.array_equal(parts["depth"], shown["depth"])
    # one-hot, as gymnasium's flatten lays it out
    health = np.eye(5, dtype=np.float32)[shown["health"]]
    expected = np.concatenate([health, shown["position"], shown["action_mask"]]).astype(np.float32)
    assert (
        space.vector_size == 12
        and space.mask_size == 4
        and np.array_equal(parts["vector"], expected)
    )
    sample = space.sample()
    assert space.contains(sample) and np.isfinite(space.unpack(sample)["vector"]).all()


def test_the_model_reads_both_parts_masks_the_logits_and_learns_through_both():
    env = adapt("mixed", Mixed())
    space = env.observation_space
    torch.manual_seed(0)
    model = build_model(space, env.action_space, Config(env="mixed", use_rnn=True, rnn_size=32))
    # the vector's entries; the images are scaled
    assert model.normalizer.mean.shape == (space.vector_size,)
    observations = [env.reset(seed=seed)[0] for seed in range(4)]
    # rows past the first: views at an offset into the bytes
    batch = torch.as_tensor(np.stack(observations))[1:]
    images, vector = unpack_observation(space, batch)
    numpy_parts = space.unpack(batch.numpy())
    assert torch.equal(images[0], torch.as_tensor(numpy_parts["camera"]))
    assert torch.equal(vector, torch.as_tensor(numpy_parts["vector"]))
    # no copy
    assert images[0].data_ptr() == batch.data_ptr() and torch.equal(
        model.normalized_part(batch), vector
    )

    logits, value, state = model.forward_step(batch, torch.zeros(3, model.rnn_state_size))
    assert (logits[:, 1] == ILLEGAL_LOGIT).all() and (logits[:, 0] > ILLEGAL_LOGIT).all()
    (logits[:, 0].sum() + value.sum()).backward()
    for encoder in (model.encoder.images[0], model.encoder.images[1], model.encoder.vector):
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())

    def logits_with(part: str = "vector", change=lambda values: values) -> torch.Tensor:
        one = {key: value.copy() for key, value in space.unpack(observations[0]).items()}
        one[part] = change(one[part])
        packed = space.pack([one["camera"], one["depth"]], one["vector"])
        with torch.no_grad():
            return model.forward_step(
                torch.as_tensor(packed[None]), torch.zeros(1, model.rnn_state_size)
            )[0]

    original = logits_with()
    assert not torch.allclose(logits_with("camera", lambda camera: 255 - camera), original)
    other_health = lambda vector: np.concatenate([np.roll(vector[:5], 1), vector[5:]])  # noqa: E731
    assert not torch.allclose(logits_with("vector", other_health), original)


@pytest.mark.parametrize("normalize_input", [None, True])
def test_normalize_input_true_normalizes_a_packed_observation_s_pixels_too(normalize_input):
    """As for plain observations: by default (None) the vector alone is normalized and the encoder
    scales the uint8 images; True normalizes every pixel as well, with the same running
    statistics."""
    env = adapt("mixed", Mixed())
    space = env.observation_space
    model = build_model(
        space, env.action_space, Config(env="mixed", use_rnn=False, normalize_input=normalize_input)
    )
    pixels = 3 * 40 * 44 + 37 * 36 if normalize_input else 0
    assert model.normalizer.mean.shape == (pixels + space.vector_size,)
    model.normalizer.mean.fill_(100.0)
    model.normalizer.var.fill_(50.0**2)
    batch = torch.as_tensor(np.stack([env.reset(seed=seed)[0] for seed in range(2)]))
    (camera, depth), vector = unpack_observation(space, batch)
    images, normalized = model.packed_input([camera, depth], vector)
    assert torch.allclose(normalized, ((vector - 100) / 50).clamp(-5, 5), atol=1e-5)
    if normalize_input:
        assert torch.allclose(images[0], ((camera.float() - 100) / 50).clamp(-5, 5), atol=1e-5)
    else:
        # left uint8: the encoder scales it to [0, 1]
        assert images[0] is camera
    assert model.normalized_part(batch).shape == (2, pixels + space.vector_size)


def test_an_image_with_its_action_mask_in_the_info_is_packed_with_the_mask():
    class ImageWithInfoMask(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
        action_space = gym.spaces.Discrete(3)

        def reset(self, *, seed=None, options=None):
            return np.full((36, 36, 3), 7, np.uint8), {"action_mask": np.array([0, 1, 1], np.int8)}

    env = with_mask_from_info(ImageWithInfoMask(), "info_mask")
    parts = env.observation_space.unpack(env.reset(seed=0)[0])
    assert (
        env.observation_space.image_shapes == {"obs": (3, 36, 36)}
        and env.observation_space.mask_size == 3
    )
    assert (parts["obs"] == 7).all() and parts["vector"].tolist() == [0, 1, 1]


def test_pettingzoo_agents_with_images_beside_a_vector_are_packed_and_get_an_image_env_s_defaults():
    from pettingzoo import ParallelEnv

    from asyncrl.envs.gym_adapter import spaces_defaults
    from asyncrl.envs.multi_agent import ParallelEnvAgents

    class TwoCameras(ParallelEnv):
        possible_agents = ["a", "b"]
        space = gym.spaces.Dict(
            {
                "view": gym.spaces.Box(0, 255, (36, 36, 1), np.uint8),
                "me": gym.spaces.Box(0, 1, (2,), np.float32),
            }
        )

        def observation_space(self, agent):
            return self.space

        def action_space(self, agent):
            return gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            self.agents = list(self.possible_agents)
            return {
                a: {"view": np.full((36, 36, 1), i, np.uint8), "me": np.eye(2, dtype=np.float32)[i]}
                for i, a in enumerate(self.agents)
            }, {}

    agents = ParallelEnvAgents("cameras", TwoCameras())
    observations, _ = agents.reset(seed=0)
    for i, obs in enumerate(observations):
        parts = agents.observation_space.unpack(obs)
        assert parts["view"].shape == (1, 36, 36) and (parts["view"] == i).all()
        assert parts["vector"].tolist() == np.eye(2)[i].tolist()
    # an image env's defaults, not a vector env's
    assert spaces_defaults(agents.observation_space, agents.action_space) == {}


@pytest.mark.slow
def test_a_policy_of_images_beside_a_vector_and_a_mask_learns_in_real_processes(tmp_path):
    """synthetic_image_and_vector: the rewarded action is the image's band plus the vector's shift;
    its action mask allows that action and one other. Playing the legal actions at random scores 10
    of 20, and so does a policy that sees only one part; 15 needs both, through shared memory, the
    policy workers and the learner. A critic of its own (measured: every run at 16 of 20 by 20k
    steps, 19.6 by 50k; the shared encoder, whose value gradient pulls at the actor's features, was
    still at 10 after 100k steps in three of four runs). Two epochs a batch: the learner is the
    bottleneck, and with half its work a run reached 18.2 and 18.5 by 30k steps in 14.5 s (four
    epochs: 17.4 by 26k in 21 s)."""
    r = run_cli(
        "train",
        *flags(
            env="synthetic_image_and_vector",
            env_options='{"action_mask": true}',
            actor_critic_share_weights="False",
            num_epochs=2,
            train_for_env_steps=30_000,
            train_dir=tmp_path,
            experiment="iv",
            experiment_summaries_interval=2,
        ),
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    last = read_stats(tmp_path / "iv")[-1]
    assert last["episode_reward_mean"] >= 15 and last["episode_illegal_mean"] == 0, last
