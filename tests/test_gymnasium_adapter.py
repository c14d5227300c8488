"""Gymnasium vector envs behind syncfree's env protocol, and time-outs bootstrapped from the final observation."""

from __future__ import annotations

import signal
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from conftest import TEST_DEVICE, StagingCopies, small_config
from syncfree.algo.storage import RolloutStorage
from syncfree.envs.adapters.gymnasium import GymnasiumVecEnv, make_gymnasium
from syncfree.errors import UserError
from syncfree.policy.actor_critic import Act
from syncfree.tasks import with_algorithm
from syncfree.train.runner import Runner

SAME_STEP = AutoresetMode.SAME_STEP


class Counter(gymnasium.Env):
    """Observation = [steps taken in the episode]; reward 1; episodes end only by truncation after `limit` steps."""

    def __init__(self, limit: int = 3, obs_space: gymnasium.Space | None = None,
                 action_space: gymnasium.Space | None = None) -> None:
        self.limit = limit
        self.observation_space = obs_space or Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = action_space or Discrete(2)
        self.k = 0
        self.last_action = None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.k = 0
        return np.array([0.0], np.float32), {}

    def step(self, action: object) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.last_action = np.array(action, copy=True)
        self.k += 1
        return np.array([self.k], np.float32), 1.0, False, self.k >= self.limit, {}


def counter_env(num_envs: int, **kwargs: object) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: Counter(**kwargs) for _ in range(num_envs)], autoreset_mode=SAME_STEP)


def test_cartpole_steps_with_discrete_actions_and_resets_in_the_same_step() -> None:
    env = make_gymnasium("CartPole-v1", 4, seed=0)
    assert env.action_spec.kind == "discrete" and env.action_spec.size == 2
    assert env.obs_shapes == {"policy": (4,), "critic": (4,)} and env.max_episode_length == 500
    assert not env.saveable
    obs = env.reset()
    assert obs["policy"].dtype == torch.float32 and obs["policy"].shape == (4, 4)
    ended = 0
    for _ in range(60):  # always pushing right topples the pole within a few dozen steps
        step = env.step(torch.ones(4, dtype=torch.int64))
        assert step.reward.shape == (4,) and step.reward.dtype == torch.float32
        assert step.terminated.dtype == torch.bool and step.truncated.dtype == torch.bool
        final = step.info["final_obs"]["critic"]
        for i in step.terminated.nonzero().flatten().tolist():
            ended += 1
            assert final[i].abs().max() > 0.2  # the fallen pole's state ...
            assert step.obs["policy"][i].abs().max() <= 0.05  # ... and already a fresh reset state
            assert step.info["episode_length"][i] > 0
            assert step.info["episode_return"][i] == step.info["episode_length"][i]
        alive = ~(step.terminated | step.truncated)
        assert torch.equal(final[alive], step.obs["critic"][alive])
    assert ended >= 4
    env.close()


def test_pendulum_maps_unbounded_continuous_actions_onto_the_box() -> None:
    env = make_gymnasium("Pendulum-v1", 3, seed=1)
    assert env.action_spec.kind == "continuous" and env.action_spec.size == 1
    assert env.obs_shapes["policy"] == (3,) and env.max_episode_length == 200
    env.reset()
    step = env.step(torch.tensor([[-5.0], [0.25], [0.5]]))
    assert step.obs["policy"].shape == (3, 3) and step.obs["policy"].dtype == torch.float32
    # policy units: clip to [-1, 1], then scale onto [-2, 2] N·m
    assert env._actions_np.tolist() == [[-2.0], [0.5], [1.0]]
    assert not step.terminated.any() and not step.truncated.any()


def test_box_actions_with_infinite_bounds_pass_through() -> None:
    space = Box(np.array([0.0, -np.inf], np.float32), np.array([4.0, np.inf], np.float32))
    env = GymnasiumVecEnv(counter_env(2, action_space=space))
    env.reset()
    env.step(torch.tensor([[0.0, 7.0], [3.0, -7.0]]))
    assert env._actions_np.tolist() == [[2.0, 7.0], [4.0, -7.0]]
    assert env.vector_env.envs[1].last_action.tolist() == [4.0, -7.0]


def test_a_half_bounded_box_dimension_passes_unscaled_within_its_bound() -> None:
    space = Box(np.array([0.0, -np.inf, -2.0], np.float32), np.array([np.inf, 1.0, 2.0], np.float32))
    env = GymnasiumVecEnv(counter_env(2, action_space=space))
    env.reset()
    env.step(torch.tensor([[-0.98, 5.0, 0.5], [3.0, -7.0, -9.0]]))
    assert env.vector_env.envs[0].last_action.tolist() == [0.0, 1.0, 1.0]
    assert env.vector_env.envs[1].last_action.tolist() == [3.0, -7.0, -2.0]


@pytest.mark.parametrize("algorithm", ["ppo", "sac"])
def test_an_env_without_a_declared_time_limit_is_evaluated_to_its_episodes_end(algorithm: str) -> None:
    """A Gymnasium env whose spec declares no `max_episode_steps` ends its episodes itself: evaluation plays each
    env's first episode to its end rather than no step at all (every return NaN)."""
    from syncfree.algo import algorithm_named
    from syncfree.train.run import Run

    space = Box(-1.0, 1.0, (1,), np.float32)
    env = GymnasiumVecEnv(counter_env(3, limit=70, action_space=space))  # past one check of the loop's
    assert env.max_episode_length == 0
    cfg = small_config("pendulum")
    cfg.env.num_envs = 3
    run = Run(cfg if algorithm == "ppo" else with_algorithm(cfg, algorithm), None, env=env)
    returns = algorithm_named(algorithm).evaluate(run.runner.policy, env)
    run.close()
    assert returns.tolist() == [70.0, 70.0, 70.0]


def test_an_env_that_never_ends_is_evaluated_for_a_bounded_number_of_steps(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from syncfree.algo import base
    from syncfree.algo.base import first_episode_returns

    monkeypatch.setattr(base, "EVALUATION_STEP_LIMIT", 200)
    env = GymnasiumVecEnv(counter_env(2, limit=10**9))
    returns = first_episode_returns(env, lambda obs: torch.zeros(2, dtype=torch.int64))
    assert np.isnan(returns).all() and env.vector_env.envs[0].k == 200
    assert "2 of 2 envs ran 200 steps without ending their first episode" in caplog.text


def test_episode_statistics_and_truncation() -> None:
    env = GymnasiumVecEnv(counter_env(2, limit=3))
    assert env.max_episode_length == 0  # no spec: no declared limit
    env.reset()
    for _ in range(3):
        step = env.step(torch.zeros(2, dtype=torch.int64))
    assert step.truncated.all() and not step.terminated.any()
    assert step.obs["policy"].flatten().tolist() == [0.0, 0.0]
    assert step.info["final_obs"]["critic"].flatten().tolist() == [3.0, 3.0]
    assert step.info["episode_return"].tolist() == [3.0, 3.0] and step.info["episode_length"].tolist() == [3, 3]
    assert env.episode_return.tolist() == [0.0, 0.0]


def test_time_outs_bootstrap_from_the_value_of_the_final_observation() -> None:
    cfg = small_config("cartpole")
    cfg.env.num_envs = 2
    trainer = Runner(cfg, env=GymnasiumVecEnv(counter_env(2, limit=3), TEST_DEVICE))
    trainer.policy.value = lambda critic_obs: 10.0 * critic_obs[:, 0] + 1.0  # V(x) = 10 x + 1
    gamma = cfg.ppo.gamma
    with torch.inference_mode():
        for t in range(3):
            trainer.rollout_step(t)
    s = trainer.algorithm.storage
    assert s.values[:3, 0].tolist() == [1.0, 11.0, 21.0]  # V of the observations the policy acted on
    assert s.time_outs[:3, 0].tolist() == [0.0, 0.0, 1.0]
    assert s.rewards[:2].flatten().tolist() == [1.0] * 4
    expected = torch.tensor(1.0 + gamma * 31.0, device=s.rewards.device)  # r + gamma V(final obs = 3), not r + gamma V(obs_t = 2) = 1 + gamma 21
    assert torch.allclose(s.rewards[2], expected.expand(2))
    assert trainer.obs["policy"].flatten().tolist() == [0.0, 0.0]


def test_storage_keeps_its_own_values_without_bootstrap_values() -> None:
    from syncfree.envs.api import ActionSpec

    s = RolloutStorage(1, 2, 1, 1, ActionSpec("discrete", 2), 2, torch.device("cpu"))
    s.store_policy_step(0, torch.zeros(2, 1), torch.zeros(2, 1),
                        Act(torch.zeros(2, dtype=torch.int64), torch.zeros(2), torch.tensor([5.0, 5.0]), torch.zeros(2, 2)))
    reward, done, time_out = torch.ones(2), torch.tensor([True, True]), torch.tensor([True, False])
    s.store_env_step(0, reward, done, time_out, 0.5)
    assert s.rewards[0].tolist() == [3.5, 1.0]
    s.store_env_step(0, reward, done, time_out, 0.5, bootstrap_values=torch.tensor([9.0, 9.0]))
    assert s.rewards[0].tolist() == [5.5, 1.0]


def test_trainer_runs_two_iterations_on_cartpole() -> None:
    cfg = small_config("cartpole")
    cfg.env.num_envs = 8
    cfg.iterations = 2
    env = make_gymnasium("CartPole-v1", 8, TEST_DEVICE, seed=0)
    trainer = Runner(cfg, env=env)
    record = trainer.learn()
    assert record["iteration"] == 2 and record["env_steps"] == 2 * 8 * cfg.ppo.steps_per_env
    assert np.isfinite(record["mean_return"]) and record["episodes"] >= 0
    state = trainer.state_dict()
    assert state["env"] is None
    trainer.load_state_dict(state)  # an external env resets instead of restoring
    env.close()


def test_next_step_autoreset_is_refused() -> None:
    with pytest.raises(UserError, match="autoreset mode NextStep"):
        GymnasiumVecEnv(gymnasium.make_vec("CartPole-v1", 2, vectorization_mode="sync"))
    with pytest.raises(UserError, match="autoreset mode NextStep"):
        GymnasiumVecEnv(gymnasium.make_vec("CartPole-v1", 2, vectorization_mode="vector_entry_point"))
    with pytest.raises(UserError, match="vectorization="):
        make_gymnasium("CartPole-v1", 2, vectorization="vector_entry_point")


def test_unsupported_spaces_and_envs_are_refused_with_one_line() -> None:
    obs_space = Dict({"a": Box(-1, 1, (2,)), "b": Discrete(3)})
    with pytest.raises(UserError, match=r"observation space Dict\(.*needs a Box") as e:
        GymnasiumVecEnv(counter_env(1, obs_space=obs_space))
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match=r"action space MultiBinary\(3\).*needs a Box or a Discrete"):
        GymnasiumVecEnv(counter_env(1, action_space=MultiBinary(3)))
    with pytest.raises(UserError, match=r"not a gymnasium\.vector\.VectorEnv"):
        GymnasiumVecEnv(Counter())
    with pytest.raises(UserError, match="NoSuchEnv"):
        make_gymnasium("NoSuchEnv-v0", 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_copies_match_the_cpu_path() -> None:
    cpu, cuda = make_gymnasium("Pendulum-v1", 4, seed=2), make_gymnasium("Pendulum-v1", 4, "cuda", seed=2)
    assert torch.equal(cpu.reset()["policy"], cuda.reset()["policy"].cpu())
    actions = torch.randn(250, 4, 1, generator=torch.Generator().manual_seed(0))
    for a in actions:
        x, y = cpu.step(a), cuda.step(a.cuda())
        assert y.obs["policy"].is_cuda and y.info["final_obs"]["critic"].is_cuda
        for u, v in ((x.obs["policy"], y.obs["policy"]), (x.reward, y.reward), (x.truncated, y.truncated),
                     (x.info["final_obs"]["critic"], y.info["final_obs"]["critic"]),
                     (x.info["episode_return"], y.info["episode_return"])):
            assert torch.equal(u, v.cpu())


@pytest.mark.slow
def test_gym_tasks_train_and_evaluate_from_the_command_line(tmp_path, capsys) -> None:
    from syncfree.cli import main

    argv = ["train", "--task", "gym:CartPole-v1", "--env.num_envs", "4", "--ppo.steps_per_env", "16",
            "--iterations", "2", "--log.dir", str(tmp_path), "--log.run_name", "cp", "--log.progress", "false"]
    assert main(argv) == 0
    assert main(["eval", str(tmp_path / "cp" / "latest.pt"), "--num_envs", "2"]) == 0
    assert "gym:CartPole-v1: mean return" in capsys.readouterr().out


@pytest.mark.parametrize("argv,culprit", [
    (["--task", "gym:NoSuchEnv-v0"], "NoSuchEnv-v0"),
    (["--task", "gym:CartPole-v1", "--env.max_episode_length", "50"], "env.max_episode_length"),
    (["--task", "gym:"], "task"),
])
def test_bad_gym_task_is_one_line(tmp_path, capsys, argv, culprit) -> None:
    from syncfree.cli import main

    code = main(["train", *argv, "--iterations", "1", "--log.dir", str(tmp_path), "--log.progress", "false"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and culprit in lines[0]


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_a_staged_step_is_one_copy_each_way_and_matches_the_unstaged_one(env_id: str) -> None:
    """With host buffers apart from the device tensors (the CUDA path, here on the CPU), a step's observation,
    final observation, reward and episode ends reach the device in one copy and the actions the host in one; every
    output equals the unstaged adapter's, through time-outs (Pendulum's 200 steps) and terminations."""
    direct, staged = make_gymnasium(env_id, 4, seed=3), make_gymnasium(env_id, 4, seed=3, staged=True)
    assert not direct._pack.staged and staged._pack.staged
    assert torch.equal(direct.reset()["policy"], staged.reset()["policy"])
    n, steps, ended = direct.action_spec.size, 210, 0
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        a = (torch.randn(4, n, generator=gen) if direct.action_spec.kind == "continuous"
             else torch.randint(n, (4,), generator=gen))
        x = direct.step(a)
        with StagingCopies(staged) as copies:
            y = staged.step(a)
        assert (copies.uploads, copies.downloads) == (1, 1)
        for u, v in ((x.obs["policy"], y.obs["policy"]), (x.reward, y.reward), (x.terminated, y.terminated),
                     (x.truncated, y.truncated), (x.info["final_obs"]["critic"], y.info["final_obs"]["critic"]),
                     (x.info["episode_return"], y.info["episode_return"]),
                     (x.info["episode_length"], y.info["episode_length"])):
            assert torch.equal(u, v)
        ended += int((x.terminated | x.truncated).sum())
    assert ended >= 4
    assert staged.transfers() == {"uploads": steps + 1, "downloads": steps}  # the reset's upload too
    assert direct.transfers() == {"uploads": 0, "downloads": 0}
    direct.close()
    staged.close()


def _rollout(env_id: str, num_envs: int, worker: bool, steps: int) -> list[torch.Tensor]:
    """Every output of `steps` seeded random steps (the actions drawn from one generator, as the policy would)."""
    env = make_gymnasium(env_id, num_envs, seed=3, worker=worker)
    gen = torch.Generator().manual_seed(0)
    out = [env.reset()["policy"].clone()]
    try:
        for _ in range(steps):
            if env.action_spec.kind == "continuous":
                actions = 2 * torch.randn(num_envs, env.action_spec.size, generator=gen)
            else:
                actions = torch.randint(0, env.action_spec.size, (num_envs,), generator=gen)
            step = env.step(actions)
            out += [step.obs["policy"].clone(), step.reward.clone(), step.terminated.clone(), step.truncated.clone(),
                    step.info["final_obs"]["critic"].clone(), step.info["episode_return"].clone(),
                    step.info["episode_length"].clone()]
    finally:
        env.close()
    return out


@pytest.mark.parametrize(("env_id", "num_envs", "steps"), [("CartPole-v1", 5, 120), ("Hopper-v5", 4, 150)])
def test_host_env_worker_steps_the_same_episodes_as_one_process(env_id: str, num_envs: int, steps: int) -> None:
    """`perf.host_env_worker` (equivalence): the envs split between this process and a worker process (an odd
    count splits unevenly) give every output bit for bit as one sync vector env, episode ends and final
    observations included."""
    if env_id.startswith("Hopper"):
        pytest.importorskip("mujoco")
    split, whole = (_rollout(env_id, num_envs, worker, steps) for worker in (True, False))
    assert len(split) == len(whole) == 1 + 7 * steps
    assert all(torch.equal(a, b) for a, b in zip(split, whole, strict=True))
    ended = sum(int(torch.logical_or(t, u).sum()) for t, u in zip(whole[3::7], whole[4::7], strict=True))
    assert ended >= num_envs  # the comparison covered restarts and final observations


def test_host_env_worker_closes_its_process_and_names_a_dead_one() -> None:
    env = make_gymnasium("CartPole-v1", 4, seed=0, worker=True)
    split = env.vector_env
    assert split.local_envs == 2 and split.worker.alive
    env.reset()
    split.worker.process.kill()
    split.worker.process.wait()
    with pytest.raises(UserError, match=r"CartPole-v1 envs 2-3: its worker process exited \(code -9\)"):
        env.step(torch.zeros(4, dtype=torch.int64))
    env.close()

    env = make_gymnasium("CartPole-v1", 2, seed=0, worker=True)
    process = env.vector_env.worker.process
    env.reset()
    process.send_signal(signal.SIGINT)  # Ctrl-C reaches the worker too: the trainer's to handle, not the worker's
    env.step(torch.zeros(2, dtype=torch.int64))
    assert process.poll() is None
    env.close()
    assert process.returncode == 0


def voluntary_context_switches(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("voluntary_ctxt_switches")))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the kernel's per-process counts")
def test_the_worker_polls_between_steps_rather_than_sleeping(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps that follow each other closely (a rollout's) find the worker polling its socket: it is not put to sleep
    and woken by the scheduler at each step (sleeping on the socket costs one voluntary context switch per step).
    Where the process may run on one core, the worker does not poll (the two sides would take turns)."""
    from syncfree.envs.adapters import host_worker

    monkeypatch.setattr(host_worker, "usable_cores", lambda: 2)
    env = make_gymnasium("CartPole-v1", 4, seed=0, worker=True)
    worker = env.vector_env.worker
    env.reset()
    actions = torch.zeros(4, dtype=torch.int64)
    env.step(actions)
    slept = []  # the best of five tries: a busy machine preempts the polling sides now and then (11, 155 and 150
    for _ in range(5):  # switches in 200 steps in three probes beside two busy processes on two cores; 7 idle)
        before = voluntary_context_switches(worker.process.pid)
        for _ in range(200):
            env.step(actions)
        slept.append(voluntary_context_switches(worker.process.pid) - before)
        if slept[-1] < 100:
            break
    env.close()
    # without polling every step sleeps: 234 to 334 switches in 200 steps, idle or busy
    assert worker.spin == host_worker.SPIN_SECONDS and min(slept) < 100, slept
    monkeypatch.setattr(host_worker, "usable_cores", lambda: 1)
    env = make_gymnasium("CartPole-v1", 2, seed=0, worker=True)
    assert env.vector_env.worker.spin == 0.0
    env.close()


def test_host_env_worker_refuses_what_it_cannot_split() -> None:
    with pytest.raises(UserError, match="splitting needs at least 2 envs"):
        make_gymnasium("CartPole-v1", 1, worker=True)
    with pytest.raises(UserError, match="worker=True splits a sync vector env"):
        make_gymnasium("CartPole-v1", 2, vectorization="async", worker=True)
    with pytest.raises(UserError, match="make_gymnasium: 'NoSuchEnv-v0'"):
        make_gymnasium("NoSuchEnv-v0", 2, worker=True)


def test_host_env_worker_is_inert_on_one_core_and_with_one_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that may run on one core gets no worker (the two halves would take turns), and `syncfree
    switches` says so; nor does a run of one env."""
    import syncfree.tasks
    from syncfree.config import PerfConfig
    from syncfree.envs.adapters import host_worker
    from syncfree.envs.adapters.gymnasium import SplitVectorEnv
    from syncfree.tasks import get_task, preset, switch_scope

    monkeypatch.setattr(host_worker, "usable_cores", lambda: 2)
    monkeypatch.setattr(syncfree.tasks, "usable_cores", lambda: 2)
    cfg = preset("gym:CartPole-v1")
    cfg.env.num_envs = 4
    spec = get_task(cfg.task)
    assert PerfConfig().inert_reason("host_env_worker", switch_scope(cfg)) is None
    env = spec.make_env(cfg, 4, torch.device("cpu"), 0)
    assert isinstance(env.vector_env, SplitVectorEnv)
    env.close()
    monkeypatch.setattr(host_worker, "usable_cores", lambda: 1)
    monkeypatch.setattr(syncfree.tasks, "usable_cores", lambda: 1)
    assert "one CPU core" in PerfConfig().inert_reason("host_env_worker", switch_scope(cfg))
    env = spec.make_env(cfg, 4, torch.device("cpu"), 0)
    assert not isinstance(env.vector_env, SplitVectorEnv)
    env.close()
    cfg.env.num_envs = 1
    assert "one env" in PerfConfig().inert_reason("host_env_worker", switch_scope(cfg))


def test_a_worker_that_cannot_build_its_part_says_why_in_one_line() -> None:
    from syncfree.envs.adapters import gymnasium_rows as adapter
    from syncfree.envs.adapters.host_worker import HostWorker, SharedArrays

    arrays = SharedArrays({name: ((2, 1), "<f8") for name in adapter.SPLIT_FIELDS})
    with pytest.raises(UserError, match=r"^rows \(worker process\): building it: \w+: .*NoSuchEnv") as error:
        HostWorker("rows", arrays, adapter.GymnasiumRows, "NoSuchEnv-v0", 0, 2, {})
    assert "\n" not in str(error.value)
    arrays.close()


def test_the_worker_side_imports_no_torch() -> None:
    """A worker process loads the host worker and its part's module only: numpy, the simulator, no torch (which
    would add about a second and 190 MB to every worker)."""
    import subprocess
    import sys

    pytest.importorskip("mettagrid")
    code = ("import sys, syncfree.envs.adapters.host_worker, syncfree.envs.adapters.gymnasium_rows, "
            "syncfree.envs.adapters.mettagrid_sims; print(sorted(m for m in sys.modules if m.split('.')[0] == "
            "'torch'))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"
