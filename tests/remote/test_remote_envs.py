"""Remote envs (asyncrl/remote): real `asyncrl env-server` processes on loopback, trained
against."""

import grpc
import gymnasium as gym
import numpy as np
import pytest
from env_servers import MARKED, serving, start_server, start_servers
from helpers import (
    flags,
    read_stats,
    run_cli,
    start_cli,
)

from asyncrl.envs import EnvError
from asyncrl.remote import RemoteEnv, RemoteSettings, remote_parallel_env, side_channel
from asyncrl.remote.connection import Connection, RemoteEnvError
from asyncrl.remote.wire import pb


def test_remote_env_alone_as_gymnasium_env_with_side_channel():
    server, address = start_server("--env", MARKED, "--num_envs", "2")
    env = RemoteEnv(address)
    obs, _ = env.reset(seed=3)
    # made on the server, episode 1, step 0
    assert obs.tolist() == [serving(server).pid, 1, 0]
    assert side_channel(address, {"bonus": 0.5, "level": "hard"}) == {"bonus": 0.5, "level": "hard"}
    total = 0.0
    steps = 0
    while True:
        obs, reward, terminated, truncated, info = env.step(1)
        total = total + reward
        steps = steps + 1
        if terminated:
            break
    assert steps == 20 and total == pytest.approx(30.0) and info["episode_stats"] == {"bonus": 0.5}
    # the server reset it at the episode's end
    assert env.reset()[0].tolist() == [serving(server).pid, 2, 0]
    env.close()


def marks(frame) -> tuple[int, int]:
    """The (episode, step) a MarkedEnv frame shows."""
    return int(frame[0, 0, 0]), int(frame[0, 0, 1])


def test_frames_come_with_the_results_they_show_for_a_client_that_asks():
    """Served with render_mode rgb_array, a client that asks for frames gets each reset's and step's
    with its results: the final step's frame before the server's own reset, then the next episode's
    first. A client that does not ask gets none; a server that does not render is refused with what
    to do, on both sides."""
    _, address = start_server(
        *flags(env=MARKED, num_envs="2", env_options='{"render_mode": "rgb_array"}')
    )
    _, bare = start_server("--env", MARKED, "--num_envs", "1")
    env = RemoteEnv(address, render_mode="rgb_array")
    assert env.metadata["render_fps"] == 20
    env.reset(seed=1)
    seen = [marks(env.render())]
    for _ in range(20):
        env.step(1)
        seen.append(marks(env.render()))
    env.reset()
    seen.append(marks(env.render()))
    assert seen == [(1, t) for t in range(21)] + [(2, 0)]
    # other settings, so another lease: results without frames
    plain = RemoteEnv(address)
    plain.reset()
    plain.step(1)
    with pytest.raises(EnvError, match="render_mode='rgb_array'"):
        plain.render()
    with pytest.raises(EnvError, match="render_mode"):
        RemoteEnv(bare, render_mode="rgb_array")
    with pytest.raises(grpc.RpcError) as refused:
        grpc.insecure_channel(bare).unary_unary("/asyncrl.remote.EnvServer/Open")(
            pb.OpenRequest(num_envs=1, frames=True).SerializeToString(), timeout=10
        )
    assert (
        refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        and "--env_options" in refused.value.details()
    )
    for client in (env, plain):
        client.close()


def test_a_lost_life_reaches_the_client_with_its_step():
    """info["life_lost"] (Atari's life-loss signal, a terminal for learning) crosses the wire as the
    env gives it."""
    _, address = start_server(*flags(env=MARKED, num_envs="1", env_options='{"life_every": 6}'))
    env = RemoteEnv(address)
    env.reset()
    assert [t for t in range(1, 21) if env.step(1)[4].get("life_lost")] == [6, 12, 18]
    env.close()


@pytest.mark.parametrize("env", ["multi_discrete", "multi_binary"])
def test_multi_discrete_actions_cross_the_wire_and_bad_ones_are_refused(env):
    """A MultiDiscrete (or MultiBinary) env serves its choices per dimension; the env gets the
    actions in its own space (it asserts so), and an action outside a dimension's choices is
    refused."""
    _, address = start_server("--env", f"tests.action_envs:{env}", "--num_envs", "1")
    client = RemoteEnv(address)
    nvec = [3, 4] if env == "multi_discrete" else [2, 2, 2]
    assert client.action_space == gym.spaces.MultiDiscrete(nvec)
    obs, _ = client.reset(seed=0)
    targets = [int(part.argmax()) for part in np.split(obs, np.cumsum(nvec)[:-1])]
    assert client.step(np.array(targets))[1] == 1.0
    with pytest.raises(RemoteEnvError, match="INVALID_ARGUMENT"):
        client.step(np.array(nvec))
    client.close()


def test_a_served_env_s_action_mask_reaches_the_client_s_space():
    """The server's env gives its mask in a Dict observation: Describe says how many of the
    observation's last entries it holds, so the client's space is an ObservationWithActionMask (the
    model masks its logits); an allowed action is played, a forbidden one ends the episode as the
    env's rules say."""
    from asyncrl.envs.action_masks import ObservationWithActionMask

    _, address = start_server("--env", "tests.action_envs:legal_moves", "--num_envs", "1")
    client = RemoteEnv(address)
    assert isinstance(client.observation_space, ObservationWithActionMask)
    assert client.observation_space.mask_size == 10 and client.observation_space.shape == (20,)
    obs, _ = client.reset(seed=0)
    masks = np.split(obs[10:], [4])
    assert all(0 < m.sum() < len(m) for m in masks)
    assert client.step(np.array([int(np.flatnonzero(m)[0]) for m in masks]))[1] >= 0
    # the same first masks again
    client.reset(seed=0)
    _, reward, terminated, _, _ = client.step(
        np.array([int(np.flatnonzero(m == 0)[0]) for m in masks])
    )
    assert (reward, terminated) == (-1.0, True)
    client.close()


@pytest.mark.slow
def test_a_served_env_with_images_beside_a_vector_keeps_its_packed_layout(tmp_path):
    """Describe carries a packed observation's layout (each image's key and shape, the vector's
    size, the mask's), so the client's space unpacks what the server's env packed; a run trains
    through the server without a masked action."""
    from asyncrl.envs import make_env
    from asyncrl.envs.packed_observations import PackedObservation

    _, address = start_server(
        *flags(env="synthetic_image_and_vector", env_options='{"action_mask": true}', num_envs="4"),
    )
    client = RemoteEnv(address)
    local = make_env("synthetic_image_and_vector", action_mask=True).observation_space
    space = client.observation_space
    assert isinstance(space, PackedObservation) and space.shape == local.shape
    assert (space.image_shapes, space.vector_size, space.mask_size) == (local.image_shapes, 8, 4)
    parts = space.unpack(client.reset(seed=0)[0])
    # shift, 2 legal
    assert set(np.unique(parts["image"])) == {0, 255} and parts["vector"].tolist().count(1.0) == 3
    client.close()
    r = run_cli(
        "train",
        *flags(
            env=f"remote:{address}",
            train_dir=tmp_path,
            experiment="packed",
            num_workers="1",
            num_envs_per_worker="4",
            train_for_env_steps="3000",
        ),
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert read_stats(tmp_path / "packed")[-1]["episode_illegal_mean"] == 0


@pytest.mark.slow
def test_enjoy_records_a_video_of_a_remote_env(tmp_path):
    """`asyncrl enjoy --save_video` on a remote env: the frames come from the server, one per reset
    and step."""
    _, address = start_server(
        *flags(env=MARKED, num_envs="3", env_options='{"render_mode": "rgb_array"}')
    )
    env = f"remote:{address}"
    trained = run_cli(
        "train",
        *flags(
            env=env,
            train_dir=tmp_path,
            experiment="m",
            num_workers="1",
            num_envs_per_worker="2",
            train_for_env_steps="2000",
        ),
        timeout=120,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    r = run_cli(
        "enjoy",
        *flags(env=env, train_dir=tmp_path, experiment="m", max_num_episodes=2, save_video="True"),
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # 2 episodes of 20 steps
    assert "video: " in r.stdout and "(42 frames at 20 fps)" in r.stdout, r.stdout
    import imageio.v2 as imageio

    reader = imageio.get_reader(tmp_path / "m" / "replay.mp4")
    assert reader.count_frames() == 42 and reader.get_data(0).shape == (32, 48, 3)
    reader.close()


def test_trains_through_two_env_servers(tmp_path):
    """CartPole through two loopback servers: the env's defaults come from the servers, the run
    learns."""
    servers = start_servers(2, "--env", "CartPole-v1", "--num_envs", "8")
    env = "remote:" + ",".join(address for _, address in servers)
    result = run_cli(
        "train",
        *flags(
            env=env,
            train_dir=tmp_path,
            experiment="r",
            num_workers="2",
            num_envs_per_worker="8",
            train_for_env_steps="20000",
            seed="1",
        ),
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_stats(tmp_path / "r")
    assert rows[-1]["env_steps"] >= 20000
    # random play: ~22
    assert rows[-1]["episode_reward_mean"] > 60
    # CartPole's default, via Describe
    assert '"reward_scale": 0.1' in (tmp_path / "r" / "config.json").read_text()


def test_a_connection_is_shared_only_by_the_same_settings():
    """The OS hands a port out again to a later server: a connection cached for the address with
    other settings (here the default 10 s timeout) must not be reused (a silent server then failed a
    step after 10 s, not 1 s)."""
    # never contacted: making a channel does not connect
    address = "127.0.0.1:1"
    default = Connection.to(address, RemoteSettings(agents=(0,)))
    short = Connection.to(address, RemoteSettings(agents=(0,), timeout=1.0))
    assert short is not default and short.settings.timeout == 1.0
    assert Connection.to(address, RemoteSettings(agents=(0,), timeout=1.0)) is short


@pytest.mark.slow
def test_two_clients_each_own_one_agent_of_a_two_agent_env(tmp_path):
    """UDE's distributed multi-agent case: two training runs on one server, each acting for one
    agent of grid_duel; each env steps once both runs' actions are in, and both runs train."""
    _, address = start_server("--env", "grid_duel", "--num_envs", "4", "--step_timeout", "90")
    # the PettingZoo face of a remote env (both agents)
    env = remote_parallel_env(address)
    obs, _ = env.reset(seed=0)
    assert len(env.possible_agents) == 2 and set(obs) == set(env.agents) == set(env.possible_agents)
    obs, rewards, terminated, truncated, infos = env.step({agent: 0 for agent in env.agents})
    assert set(obs) == set(rewards) == set(env.possible_agents)
    env.close()
    runs = [
        start_cli(
            "train",
            *flags(
                env=f"remote:{address}",
                remote_agents=f"[{agent}]",
                remote_timeout="90",
                train_dir=tmp_path,
                experiment=f"agent{agent}",
                num_workers="1",
                num_envs_per_worker="4",
                train_for_env_steps="1024",
                seed=str(agent),
            ),
        )
        for agent in (0, 1)
    ]
    for run in runs:
        out, _ = run.communicate(timeout=300)
        assert run.returncode == 0, out[-3000:]
    for agent in (0, 1):
        last = read_stats(tmp_path / f"agent{agent}")[-1]
        assert last["env_steps"] >= 1024 and last["train_step"] >= 1, last
