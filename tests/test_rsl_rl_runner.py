"""`syncfree.rsl_rl.OnPolicyRunner` against rsl_rl 5's own runner (rsl-rl-lib, the `bench` extra): driven the same
way, its checkpoints load into rsl_rl's runner and rsl_rl's into it, acting equal; rsl_rl's config keys are each
mapped or refused by name."""

from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import inspect
import io
import json
import os
import re
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

pytest.importorskip("rsl_rl")
import rsl_rl
from rsl_rl.algorithms import PPO as RslRlPPO
from rsl_rl.models import MLPModel
from rsl_rl.modules.distribution import GaussianDistribution
from rsl_rl.runners import OnPolicyRunner as RslRlRunner

from syncfree.envs.adapters.rsl_rl import SyncfreeToRslRl
from syncfree.errors import UserError
from syncfree.rsl_rl import OnPolicyRunner
from syncfree.rsl_rl.checkpoint import rnd_to_rsl_rl
from syncfree.tasks import make_env
from syncfree.tasks.rsl_rl_config import MAPPED, READ_ELSEWHERE


def rsl_env(seed: int = 0, step_dt: float | None = None) -> SyncfreeToRslRl:
    """Pendulum (continuous actions, `policy` and `critic` groups) as an rsl_rl `VecEnv`, 16 envs; with `step_dt`,
    an `unwrapped` env that has it, as Isaac Lab's and mjlab's wrappers do (rsl_rl's RND reads it)."""
    env = SyncfreeToRslRl(make_env("pendulum", 16, device="cpu", seed=seed))
    if step_dt is not None:
        env.unwrapped = SimpleNamespace(step_dt=step_dt)  # type: ignore[attr-defined]
    return env


RND_CFG = {"weight": 2.0, "weight_schedule": {"mode": "linear", "initial_step": 2, "final_step": 20,
                                               "final_value": 0.5},
           "reward_normalization": True, "state_normalization": True, "learning_rate": 3e-3, "num_outputs": 4,
           "predictor_hidden_dims": [16, -1], "target_hidden_dims": [-1], "activation": "elu"}
"""rsl_rl's `rnd_cfg` (the arguments of its `RandomNetworkDistillation` a config gives)."""


def train_cfg(std_type: str = "scalar", normalize: bool = True, activation: str = "elu") -> dict[str, Any]:
    """A runner config as mjlab's train script passes it (`dataclasses.asdict` of its `RslRlOnPolicyRunnerCfg`),
    small."""
    model = {"class_name": "MLPModel", "hidden_dims": [16, 16], "activation": activation,
             "obs_normalization": normalize, "cnn_cfg": None, "rnn_type": None, "rnn_hidden_dim": 256, "rnn_num_layers": 1}
    return {
        "seed": 1, "num_steps_per_env": 8, "max_iterations": 3, "save_interval": 2,
        "obs_groups": {"actor": ("policy",), "critic": ("critic",)}, "experiment_name": "pendulum", "run_name": "",
        "logger": "tensorboard", "wandb_project": "mjlab", "wandb_tags": (), "resume": False, "load_run": ".*",
        "load_checkpoint": "model_.*.pt", "clip_actions": None, "upload_model": True, "class_name": "OnPolicyRunner",
        "algorithm": {"class_name": "PPO", "num_learning_epochs": 2, "num_mini_batches": 2, "learning_rate": 1e-3,
                      "schedule": "adaptive", "gamma": 0.99, "lam": 0.95, "entropy_coef": 0.005, "desired_kl": 0.01,
                      "max_grad_norm": 1.0, "value_loss_coef": 1.0, "use_clipped_value_loss": True,
                      "clip_param": 0.2, "normalize_advantage_per_mini_batch": False, "optimizer": "adam",
                      "share_cnn_encoders": False},
        "actor": {**model, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0,
                                                "std_type": std_type}},
        "critic": {**model, "distribution_cfg": None},
    }


def for_rsl_rl(cfg: dict[str, Any]) -> dict[str, Any]:
    """`cfg` as rsl_rl's own runner takes it: without the None-valued model keys (mjlab's runner strips them)."""
    cfg = copy.deepcopy(cfg)
    for net in ("actor", "critic"):
        for key in ("cnn_cfg", "rnn_type", "rnn_hidden_dim", "rnn_num_layers"):
            cfg[net].pop(key)
        if cfg[net]["distribution_cfg"] is None:
            cfg[net].pop("distribution_cfg")
    return cfg


def assert_same_adam_moments(ours: Any, theirs: Any) -> None:
    """The Adam moments of `theirs` (rsl_rl's runner) carried over into `ours` index by index."""
    their_state = theirs.alg.optimizer.state_dict()["state"]
    our_state = ours.alg.optimizer.state_dict()["state"]
    assert len(our_state) == len(their_state) > 0
    for index, entry in their_state.items():
        torch.testing.assert_close(our_state[index]["exp_avg_sq"], entry["exp_avg_sq"], rtol=0, atol=0)


def actions(runner: Any, obs: Any) -> torch.Tensor:
    with torch.inference_mode():
        return runner.get_inference_policy()(obs).clone()


@pytest.mark.parametrize("std_type, normalize, activation", [("scalar", True, "elu"), ("log", False, "elu"),
                                                              ("scalar", True, "swish")])
def test_a_drop_in_checkpoint_loads_into_rsl_rl_and_acts_the_same(tmp_path: Path, std_type: str, normalize: bool,
                                                                   activation: str, one_thread) -> None:
    """rsl_rl's `swish` is SiLU: the drop-in trains it as `silu`, and rsl_rl's model acts as the drop-in's."""
    cfg = train_cfg(std_type, normalize, activation)
    runner = OnPolicyRunner(rsl_env(), copy.deepcopy(cfg), log_dir=str(tmp_path), device="cpu")
    runner.learn(3)
    # rsl_rl's layout: model_<it>.pt every save_interval iterations from 0, and the last
    assert sorted(p.name for p in tmp_path.glob("model_*.pt")) == ["model_0.pt", "model_2.pt"]
    assert runner.current_learning_iteration == 2
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 3

    env = rsl_env(seed=5)
    theirs = RslRlRunner(env, for_rsl_rl(cfg), log_dir=None, device="cpu")
    theirs.load(str(tmp_path / "model_2.pt"))
    assert theirs.current_learning_iteration == 2
    obs = env.get_observations()
    torch.testing.assert_close(actions(theirs, obs), actions(runner, obs), rtol=0, atol=1e-5)
    trained = actions(runner, obs)
    assert not torch.equal(trained, actions(OnPolicyRunner(rsl_env(), copy.deepcopy(cfg)), obs)), \
        "the trained policy acts as a fresh one: the test would not see a lost checkpoint"
    ours = runner.alg.save()["actor_state_dict"]
    assert theirs.alg.get_policy().state_dict().keys() == ours.keys()
    for key, value in theirs.alg.get_policy().state_dict().items():
        assert torch.equal(value, ours[key]), key
    # the optimizer state is rsl_rl's Adam's: it loads and rsl_rl trains on from it
    assert theirs.alg.learning_rate == pytest.approx(runner.alg.learning_rate)
    theirs.learn(1)


def test_an_rsl_rl_checkpoint_loads_into_the_drop_in_and_training_goes_on(tmp_path: Path, one_thread) -> None:
    cfg = train_cfg()
    theirs = RslRlRunner(rsl_env(seed=2), for_rsl_rl(cfg), log_dir=str(tmp_path / "rsl_rl"), device="cpu")
    theirs.learn(2)
    saved = tmp_path / "rsl_rl" / "model_1.pt"
    ours = OnPolicyRunner(rsl_env(seed=3), copy.deepcopy(cfg), log_dir=str(tmp_path / "ours"), device="cpu")
    assert ours.load(str(saved)) is None  # rsl_rl's runner saves infos=None
    assert ours.current_learning_iteration == 1
    env = rsl_env(seed=4)
    obs = env.get_observations()
    torch.testing.assert_close(actions(ours, obs), actions(theirs, obs), rtol=0, atol=1e-5)
    assert_same_adam_moments(ours, theirs)
    assert ours.alg.learning_rate == pytest.approx(theirs.alg.learning_rate)
    ours.learn(2)  # iterations 1 and 2, as rsl_rl numbers a resumed run
    assert sorted(p.name for p in (tmp_path / "ours").glob("model_*.pt")) == ["model_2.pt"]
    assert not torch.equal(actions(ours, obs), actions(theirs, obs))


def rnn_cfg(core: str, layers: int) -> dict[str, Any]:
    """`train_cfg` with rsl_rl 5's `RNNModel` for the actor and the critic."""
    cfg = train_cfg()
    for net in ("actor", "critic"):
        cfg[net].update(class_name="RNNModel", rnn_type=core, rnn_hidden_dim=16, rnn_num_layers=layers)
    return cfg


def for_rsl_rl_rnn(cfg: dict[str, Any]) -> dict[str, Any]:
    """An `RNNModel` config as rsl_rl's runner takes it (its keys kept, `cnn_cfg` and a None distribution left
    out)."""
    cfg = copy.deepcopy(cfg)
    for net in ("actor", "critic"):
        cfg[net].pop("cnn_cfg")
        if cfg[net]["distribution_cfg"] is None:
            cfg[net].pop("distribution_cfg")
    return cfg


def rollout_actions(policy: Any, env: SyncfreeToRslRl, steps: int = 6) -> list[torch.Tensor]:
    """`policy`'s actions over `steps` env steps, its state carried and reset where episodes end (as mjlab's play
    script drives an inference policy)."""
    out, obs = [], env.get_observations()
    policy.reset()  # from the zero state (a policy that has trained holds its rollout's)
    with torch.inference_mode():
        for _ in range(steps):
            action = policy(obs).clone()
            out.append(action)
            obs, _, dones, _ = env.step(action)
            policy.reset(dones)
    return out


@pytest.mark.parametrize("core, layers", [("lstm", 2), ("gru", 1)])
def test_rnn_models_train_in_the_drop_in_and_cross_over_to_rsl_rl_both_ways(tmp_path: Path, core: str, layers: int,
                                                                           one_thread) -> None:
    """rsl_rl 5's `RNNModel` maps to syncfree's recurrent MLP policy: the drop-in trains it, its checkpoint loads
    into rsl_rl's runner (same parameter names, same Adam moments index by index) and acts the same step after
    step with the state carried, and rsl_rl's checkpoint loads back."""
    from syncfree.policy.recurrent_mlp import RecurrentMLPPolicy

    cfg = rnn_cfg(core.upper() if core == "gru" else core, layers)  # rsl_rl reads the name in any case
    runner = OnPolicyRunner(rsl_env(), copy.deepcopy(cfg), log_dir=str(tmp_path / "ours"), device="cpu")
    assert isinstance(runner.runner.policy, RecurrentMLPPolicy) and runner.get_inference_policy().is_recurrent
    assert runner.config.policy.rnn.num_layers == layers and runner.config.ppo.horizon() == 8
    runner.learn(2)
    theirs = RslRlRunner(rsl_env(seed=5), for_rsl_rl_rnn(cfg), log_dir=None, device="cpu")
    theirs.load(str(tmp_path / "ours" / "model_1.pt"))
    assert theirs.alg.get_policy().state_dict().keys() == runner.alg.save()["actor_state_dict"].keys()
    ours_acting = rollout_actions(runner.get_inference_policy(), rsl_env(seed=7))
    theirs_acting = rollout_actions(theirs.get_inference_policy(), rsl_env(seed=7))
    for a, b in zip(ours_acting, theirs_acting, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert not torch.equal(ours_acting[0], ours_acting[1])
    their_state = theirs.alg.optimizer.state_dict()["state"]
    our_state = runner.alg.optimizer.state_dict()["state"]
    assert len(their_state) == len(our_state) > 0
    for index, entry in our_state.items():
        torch.testing.assert_close(their_state[index]["exp_avg"], entry["exp_avg"], rtol=0, atol=0)
    theirs.learn(1)  # rsl_rl trains on from the drop-in's checkpoint

    back = OnPolicyRunner(rsl_env(), copy.deepcopy(cfg), device="cpu")
    theirs.save(str(tmp_path / "theirs.pt"))
    back.load(str(tmp_path / "theirs.pt"))
    for a, b in zip(rollout_actions(back.get_inference_policy(), rsl_env(seed=8)),
                    rollout_actions(theirs.get_inference_policy(), rsl_env(seed=8)), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    back.learn(1)


@pytest.mark.parametrize("core, layers", [("lstm", 2), ("gru", 1)])
def test_recurrent_exports_act_as_the_live_policy(tmp_path: Path, core: str, layers: int, one_thread) -> None:
    """TorchScript keeps the state inside (`reset()` zeroes it); ONNX takes and returns it (`h_in`, `c_in`), as
    rsl_rl exports its recurrent models."""
    pytest.importorskip("onnxruntime")
    import onnxruntime

    runner = OnPolicyRunner(rsl_env(), rnn_cfg(core, layers), device="cpu")
    runner.learn(1)
    policy = runner.get_inference_policy()
    policy(rsl_env().get_observations())  # outside inference mode: the carried state holds no graph
    assert policy.state is not None and all(s.grad_fn is None for s in policy.state)
    runner.export_policy_to_jit(str(tmp_path))
    runner.export_policy_to_onnx(str(tmp_path))
    env = rsl_env(seed=3)
    live = rollout_actions(runner.get_inference_policy(), env, steps=4)
    jit = torch.jit.load(str(tmp_path / "policy.pt"))
    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"))
    state = ["h", "c"] if core == "lstm" else ["h"]
    assert [i.name for i in session.get_inputs()] == ["obs", *(f"{s}_in" for s in state)]
    env = rsl_env(seed=3)
    obs = env.get_observations()
    carried = {f"{s}_in": torch.zeros(layers, 1, 16).numpy() for s in state}
    for expected in live:  # env 0 (no episode of pendulum ends within 4 steps: no reset to mirror)
        torch.testing.assert_close(jit(obs["policy"][:1]), expected[:1], rtol=0, atol=1e-5)
        got, *after = session.run(["actions", *(f"{s}_out" for s in state)],
                                  {"obs": obs["policy"][:1].numpy(), **carried})
        carried = {f"{s}_in": value for s, value in zip(state, after, strict=True)}
        torch.testing.assert_close(torch.from_numpy(got), expected[:1], rtol=0, atol=1e-5)
        obs = env.step(expected)[0]
    jit.reset()
    torch.testing.assert_close(jit(rsl_env(seed=3).get_observations()["policy"][:1]), live[0][:1], rtol=0, atol=1e-5)


def test_learn_may_be_called_again_and_goes_on_logging_into_the_same_folder(tmp_path: Path, one_thread) -> None:
    runner = OnPolicyRunner(rsl_env(), train_cfg(), log_dir=str(tmp_path), device="cpu")
    runner.learn(2)
    assert not (tmp_path / ".lock").exists()  # the folder is the script's again: another runner may write there
    runner.learn(2)  # rsl_rl numbers it from its current iteration: 1 and 2
    assert not (tmp_path / ".lock").exists()
    assert [json.loads(line)["iteration"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == \
        [1, 2, 3, 4]
    assert sorted(p.name for p in tmp_path.glob("model_*.pt")) == ["model_0.pt", "model_1.pt", "model_2.pt"]
    assert runner.current_learning_iteration == 2


class ClosedPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_console_that_goes_away_ends_the_block_not_the_run(tmp_path: Path, monkeypatch, one_thread) -> None:
    """stdout piped into a reader that closed: rsl_rl's console block is dropped and the run trains on and saves."""
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    runner = OnPolicyRunner(rsl_env(), train_cfg(), log_dir=str(tmp_path), device="cpu")
    runner.learn(3)
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3
    assert sorted(p.name for p in tmp_path.glob("model_*.pt")) == ["model_0.pt", "model_2.pt"]


class LoggingEnv(SyncfreeToRslRl):
    """Pendulum with 10-step episodes whose `extras["log"]` holds terms as Isaac Lab's and mjlab's managers name
    them (and one without a `/`, which rsl_rl files under `Episode/`)."""

    def __init__(self, seed: int) -> None:
        super().__init__(make_env("pendulum", 16, device="cpu", seed=seed, max_episode_length=10))

    def step(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, dict]:
        obs, rewards, dones, extras = super().step(actions)
        extras["log"] = {"Episode_Reward/swing": rewards.mean(), "Episode_Termination/time_out": dones.float().mean(),
                         "Metrics/effort": actions.abs().mean(dim=1), "upright": 0.5}
        return obs, rewards, dones, extras


@dataclasses.dataclass
class Logged:
    """What a runner logged in `log_dir` and printed, learning 2 iterations, then 1 more."""

    scalars: dict[str, list[int]]
    """TensorBoard's tags and the steps of each."""
    console: str
    reads: list[str] = dataclasses.field(default_factory=list)
    """The files whose lines read the host in the last `learn(1)`, and how often (the drop-in's)."""


def learn_and_read_logs(runner: Any, log_dir: Path) -> Logged:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from syncfree.core.counters import count_syncs

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runner.learn(2)
        with count_syncs(sites=True) as counts:
            runner.learn(1)
    writer = getattr(getattr(runner, "logger", None), "writer", None)  # rsl_rl's writes its events every 10 s
    if writer is not None and hasattr(writer, "flush"):
        writer.flush()
    events = EventAccumulator(str(log_dir))
    events.Reload()
    scalars = {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    reads = sorted(f"{Path(line.split(':')[0]).name} {sum(site.syncs.values())}"
                   for line, site in (counts.sites or {}).items() if site.syncs)
    return Logged(scalars, out.getvalue(), reads)


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> tuple[Logged, Logged]:
    """rsl_rl's runner and the drop-in, the same script on the same env: (rsl_rl's logs, the drop-in's)."""
    pytest.importorskip("tensorboard")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("logs")
    cfg = train_cfg()
    theirs = learn_and_read_logs(RslRlRunner(LoggingEnv(0), for_rsl_rl(cfg), str(folder / "rsl_rl"), "cpu"),
                                 folder / "rsl_rl")
    ours = learn_and_read_logs(OnPolicyRunner(LoggingEnv(0), copy.deepcopy(cfg), str(folder / "ours"), "cpu"),
                               folder / "ours")
    torch.set_num_threads(threads)
    return theirs, ours


def test_the_drop_in_writes_rsl_rls_tensorboard_tags_in_log_dir_against_its_iteration(logs) -> None:
    theirs, ours = logs
    assert {"Loss/value", "Policy/mean_std", "Perf/collection_time", "Train/mean_reward", "Episode_Reward/swing",
            "Episode_Termination/time_out", "Metrics/effort", "Episode/upright"} <= theirs.scalars.keys()
    assert theirs.scalars.keys() <= ours.scalars.keys(), sorted(theirs.scalars.keys() - ours.scalars.keys())
    for tag, steps in theirs.scalars.items():
        if not tag.endswith("/time"):  # plotted against the seconds elapsed
            # rsl_rl's iterations: 0, 1, then 1 again (a learn starts at the last); the event files of two learns
            # created within one second may be read in either order
            assert sorted(ours.scalars[tag]) == sorted(steps), tag
    assert ours.scalars["syncfree/approx_kl"] == [0, 1, 1]  # syncfree's own figures beside them
    # the action std rides the iteration's one transfer; the checkpoint saved at the end reads the learning rate
    assert ours.reads == ["optim.py 1", "transfer.py 1"]


def test_the_drop_in_prints_rsl_rls_console_block_with_the_envs_terms(logs) -> None:
    theirs, ours = logs

    def labels(console: str) -> list[str]:
        return [line.split(":")[0].strip() for line in console.splitlines() if ":" in line and "git" not in line]

    headers = [line.strip() for line in ours.console.splitlines() if "Learning iteration" in line]
    assert headers == [line.strip() for line in theirs.console.splitlines() if "Learning iteration" in line]
    assert [h.split()[-2] for h in headers] == ["0/2", "1/2", "1/2"]  # rsl_rl's `it/total`: a learn starts at the last
    assert labels(ours.console) == labels(theirs.console)
    terms = [line.strip() for line in ours.console.splitlines() if line.strip().startswith(("Episode_", "Metrics/"))]
    assert [t.split(":")[0] for t in terms[:3]] == ["Episode_Reward/swing", "Episode_Termination/time_out",
                                                    "Metrics/effort"]
    assert "Mean episode upright: 0.5000" in ours.console


def test_load_cfg_strict_and_bad_files_as_rsl_rl_reads_them(tmp_path: Path, one_thread) -> None:
    cfg = train_cfg()
    source = OnPolicyRunner(rsl_env(), copy.deepcopy(cfg), device="cpu")
    path = tmp_path / "model.pt"
    source.save(str(path), infos={"env_state": {"common_step_counter": 48}})
    fresh = OnPolicyRunner(rsl_env(), copy.deepcopy(cfg), device="cpu")
    before = {k: v.clone() for k, v in fresh.alg.policy.state_dict().items()}
    # actor only: the critic and the iteration stay
    fresh.current_learning_iteration = 7
    assert fresh.load(str(path), load_cfg={"actor": True}) == {"env_state": {"common_step_counter": 48}}
    assert fresh.current_learning_iteration == 7
    after = fresh.alg.policy.state_dict()
    assert torch.equal(after["critic.0.weight"], before["critic.0.weight"])
    assert torch.equal(after["actor.0.weight"], source.alg.policy.state_dict()["actor.0.weight"])
    # a checkpoint of another std_type: strict names the key, non-strict loads the rest
    other = OnPolicyRunner(rsl_env(), train_cfg(std_type="log"), device="cpu")
    with pytest.raises(UserError, match=r"model\.pt: actor_state_dict\.distribution\.std_param is not in this "
                                        r"policy \(the checkpoint's distribution_cfg\.std_type differs"):
        other.load(str(path))
    other.load(str(path), load_cfg={"actor": True, "critic": True}, strict=False)
    assert torch.equal(other.alg.policy.state_dict()["actor.0.weight"], source.alg.policy.state_dict()["actor.0.weight"])
    # wider layers: one line naming the tensor
    wide = train_cfg()
    wide["actor"]["hidden_dims"] = [32, 16]
    with pytest.raises(UserError, match=r"actor_state_dict\.mlp\.0\.weight: expected a float32 tensor of shape "
                                        r"\(32, 3\), found a float32 tensor of shape \(16, 3\)"):
        OnPolicyRunner(rsl_env(), wide, device="cpu").load(str(path))
    # a file that is not a checkpoint, and one that would run code
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    with pytest.raises(UserError, match=r"notes\.pt: not a readable checkpoint"):
        fresh.load(str(tmp_path / "notes.pt"))
    torch.save({"actor_state_dict": torch.nn.Linear(2, 2)}, tmp_path / "code.pt")
    with pytest.raises(UserError, match=r"code\.pt: holds a reference to torch\.nn\..* could run code"):
        fresh.load(str(tmp_path / "code.pt"))
    torch.save({"critic_state_dict": {}}, tmp_path / "other.pt")
    with pytest.raises(UserError, match=r"other\.pt: not an rsl_rl 5 checkpoint"):
        fresh.load(str(tmp_path / "other.pt"))
    nan = torch.load(path, weights_only=True)
    nan["actor_state_dict"]["mlp.0.bias"][0] = float("nan")
    torch.save(nan, tmp_path / "nan.pt")
    with pytest.raises(UserError, match=r"nan\.pt: actor_state_dict\.mlp\.0\.bias: holds non-finite values"):
        fresh.load(str(tmp_path / "nan.pt"))


class SubclassLikeMjlabs(OnPolicyRunner):
    """Overrides `save` and `load` as mjlab's `MjlabOnPolicyRunner` does: extra `infos`, its own `torch.load`,
    `alg.save()` / `alg.load()`, `logger.save_model` behind the config's `upload_model`."""

    step_counter = 0

    def save(self, path: str, infos: dict | None = None) -> None:
        infos = {**(infos or {}), "env_state": {"common_step_counter": self.step_counter}}
        saved = self.alg.save()
        saved["iter"] = self.current_learning_iteration
        saved["infos"] = infos
        torch.save(saved, path)
        if self.cfg["upload_model"]:
            self.logger.save_model(path, self.current_learning_iteration)

    def load(self, path: str, load_cfg: dict | None = None, strict: bool = True,
             map_location: str | None = None) -> dict:
        loaded = torch.load(path, map_location=map_location, weights_only=False)
        if self.alg.load(loaded, load_cfg, strict):
            self.current_learning_iteration = loaded["iter"]
        infos = loaded["infos"]
        if infos and "env_state" in infos:
            self.step_counter = infos["env_state"]["common_step_counter"]
        return infos


def test_a_subclass_that_overrides_save_and_load_as_mjlab_does_works_unchanged(tmp_path: Path, one_thread) -> None:
    runner = SubclassLikeMjlabs(rsl_env(), train_cfg(), log_dir=str(tmp_path), device="cpu")
    runner.step_counter = 96
    runner.learn(1)
    assert runner.logger.logger_type == "tensorboard"
    resumed = SubclassLikeMjlabs(rsl_env(), train_cfg(), device="cpu")
    assert resumed.load(str(tmp_path / "model_0.pt"))["env_state"] == {"common_step_counter": 96}
    obs = rsl_env(seed=9).get_observations()
    torch.testing.assert_close(actions(resumed, obs), actions(runner, obs), rtol=0, atol=0)


def test_exports_act_as_the_live_policy(tmp_path: Path, one_thread) -> None:
    pytest.importorskip("onnxruntime")
    import onnxruntime

    runner = OnPolicyRunner(rsl_env(), train_cfg(), device="cpu")
    runner.learn(1)
    runner.add_git_repo_to_log(__file__)
    runner.export_policy_to_jit(str(tmp_path))
    runner.export_policy_to_onnx(str(tmp_path))
    obs = rsl_env(seed=3).get_observations()
    expected = actions(runner, obs)
    jit = torch.jit.load(str(tmp_path / "policy.pt"))
    torch.testing.assert_close(jit(obs["policy"]), expected, rtol=0, atol=0)
    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"))
    got = session.run(["actions"], {"obs": obs["policy"][:1].numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(got), expected[:1], rtol=0, atol=1e-5)


def test_git_state_is_logged_for_the_repositories_added(tmp_path: Path, one_thread) -> None:
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "train.py").write_text("print('hi')\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b"}
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "x"], check=True, env=env)
    (repo / "train.py").write_text("print('changed')\n")
    runner = OnPolicyRunner(rsl_env(), train_cfg(), log_dir=str(tmp_path / "log"), device="cpu")
    runner.add_git_repo_to_log(str(repo / "train.py"))
    runner.learn(1)
    text = (tmp_path / "log" / "git" / "repo.diff").read_text()
    assert text.startswith("commit ") and "+print('changed')" in text


@pytest.mark.parametrize("model", ["MLPModel", "RNNModel"])
def test_the_drop_in_reads_the_host_once_per_iteration_where_rsl_rl_reads_it_every_step(model: str,
                                                                                        one_thread) -> None:
    from syncfree.core.counters import count_syncs

    cfg = train_cfg() if model == "MLPModel" else rnn_cfg("lstm", 1)
    ours = OnPolicyRunner(rsl_env(), copy.deepcopy(cfg), device="cpu")
    ours.learn(1)
    loop = ours.runner
    loop.algorithm.begin_rollout()
    with torch.inference_mode(), count_syncs() as counts:
        for t in range(loop.algorithm.steps_per_env):
            loop.rollout_step(t)
    assert counts.num_ops > 0 and counts.syncs == 0
    with count_syncs() as counts:
        ours.learn(1)
    assert counts.syncs == 1  # the iteration's one transfer
    theirs = RslRlRunner(rsl_env(), for_rsl_rl(cfg) if model == "MLPModel" else for_rsl_rl_rnn(cfg), device="cpu")
    with count_syncs() as counts:
        theirs.learn(1)
    assert counts.syncs >= cfg["num_steps_per_env"]


def test_replace_rsl_rl_runner_puts_syncfrees_under_classes_defined_later_and_names_those_defined_before() -> None:
    import subprocess
    import sys

    script = textwrap.dedent("""
        from syncfree.rsl_rl import OnPolicyRunner, replace_rsl_rl_runner
        replace_rsl_rl_runner()
        replace_rsl_rl_runner()  # twice is once
        import rsl_rl.runners
        from rsl_rl.runners.on_policy_runner import OnPolicyRunner as deep
        class StacksRunner(rsl_rl.runners.OnPolicyRunner):
            pass
        assert deep is OnPolicyRunner and issubclass(StacksRunner, OnPolicyRunner)
        print("replaced")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "replaced", result.stderr[-2000:]

    class DefinedBefore(RslRlRunner):
        pass

    from syncfree.rsl_rl import replace_rsl_rl_runner

    with pytest.raises(UserError, match=r"test_rsl_rl_runner\.test_replace_.*DefinedBefore already subclass"):
        replace_rsl_rl_runner()
    assert rsl_rl.runners.OnPolicyRunner is RslRlRunner  # left as it was


# -- the config ------------------------------------------------------------------------------------------------


def test_the_mapped_config_says_what_rsl_rl_does() -> None:
    cfg = train_cfg()
    cfg["algorithm"].update(num_learning_epochs=3, entropy_coef=0.02, optimizer="adamw", desired_kl=None)
    cfg["critic"]["hidden_dims"] = [-1, 8]
    runner = OnPolicyRunner(rsl_env(), cfg, device="cpu")
    mapped = runner.config
    assert (mapped.ppo.steps_per_env, mapped.ppo.num_epochs, mapped.ppo.num_minibatches) == (8, 3, 2)
    assert (mapped.ppo.entropy_coef, mapped.ppo.weight_decay) == (0.02, 0.01)
    assert mapped.ppo.schedule == "fixed"  # rsl_rl adapts only with a desired KL
    assert mapped.ppo.grad_clip == "per_network" and mapped.ppo.kl_adapt_every == "minibatch"
    assert (mapped.policy.actor_hidden, mapped.policy.critic_hidden) == ([16, 16], [3, 8])
    assert (mapped.policy.std_type, mapped.policy.obs_norm_std_offset) == ("scalar", 0.01)
    assert mapped.seed == 1 and mapped.env.num_envs == 16 and mapped.iterations == 3
    assert runner.cfg["obs_groups"] == {"actor": ["policy"], "critic": ["critic"]}


def test_the_older_policy_section_maps_too() -> None:
    cfg = {k: v for k, v in train_cfg().items() if k not in ("actor", "critic")}
    cfg["policy"] = {"class_name": "ActorCritic", "init_noise_std": 0.5, "noise_std_type": "log",
                     "actor_hidden_dims": [16], "critic_hidden_dims": [8], "activation": "tanh"}
    cfg["empirical_normalization"] = True
    mapped = OnPolicyRunner(rsl_env(), cfg, device="cpu").config.policy
    assert (mapped.actor_hidden, mapped.critic_hidden, mapped.activation) == ([16], [8], "tanh")
    assert (mapped.init_std, mapped.std_type, mapped.normalize_obs) == (0.5, "log", True)


def refused(change) -> str:
    cfg = train_cfg()
    change(cfg)
    with pytest.raises(UserError) as error:
        OnPolicyRunner(rsl_env(step_dt=0.05), cfg, device="cpu")
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("change, key", [
    (lambda c: c["algorithm"].update(rnd_cfg={"weight": 1.0}), "algorithm.rnd_cfg.num_outputs"),
    (lambda c: c["algorithm"].update(rnd_cfg={**RND_CFG, "predictor_hidden_dim": [8]}),
     "algorithm.rnd_cfg.predictor_hidden_dim"),
    (lambda c: c["algorithm"].update(rnd_cfg={**RND_CFG, "weight_schedule": {"mode": "cosine"}}),
     "algorithm.rnd_cfg.weight_schedule"),
    (lambda c: c["algorithm"].update(rnd_cfg={**RND_CFG, "weight_schedule": {"mode": "step", "final_step": 9}}),
     "algorithm.rnd_cfg.weight_schedule.final_value"),
    (lambda c: c["algorithm"].update(rnd_cfg=RND_CFG) or c.update(obs_groups={**c["obs_groups"],
                                                                               "rnd_state": ["policy", "critic"]}),
     "obs_groups.rnd_state"),
    (lambda c: c.update(obs_groups={**c["obs_groups"], "rnd_state": ["policy"]}), "obs_groups.rnd_state"),
    (lambda c: c["algorithm"].update(rnd_cfg={**RND_CFG, "num_outputs": "many"}), "algorithm.rnd_cfg.num_outputs"),
    (lambda c: c["algorithm"].update(symmetry_cfg={"use_data_augmentation": True}),
     "algorithm.symmetry_cfg.data_augmentation_func"),
    (lambda c: c["algorithm"].update(symmetry_cfg={"data_augmentation_func": pendulum_mirror, "num_aug": 2}),
     "algorithm.symmetry_cfg.num_aug"),
    (lambda c: c["algorithm"].update(normalize_advantage_per_mini_batch=True),
     "algorithm.normalize_advantage_per_mini_batch"),
    (lambda c: c["algorithm"].update(optimizer="sgd"), "algorithm.optimizer"),
    (lambda c: c["algorithm"].update(class_name="Distillation"), "algorithm.class_name"),
    (lambda c: c["algorithm"].update(lr_decay=0.5), "algorithm.lr_decay"),
    (lambda c: c["actor"].update(class_name="CNNModel"), "actor.class_name"),
    (lambda c: c["actor"].update(class_name="RNNModel", rnn_type="lstm"), "critic.class_name"),
    (lambda c: c["actor"].update(rnn_type="lstm"), "actor.rnn_type"),
    (lambda c: [c[n].update(class_name="RNNModel", rnn_type=t) for n, t in (("actor", "gru"), ("critic", "lstm"))],
     "critic.rnn_type"),
    (lambda c: [c[n].update(class_name="RNNModel", rnn_type="rnn") for n in ("actor", "critic")], "actor.rnn_type"),
    (lambda c: [c[n].update(class_name="RNNModel", rnn_type=None) for n in ("actor", "critic")], "actor.rnn_type"),
    (lambda c: [c[n].update(class_name="RNNModel", rnn_type="gru", rnn_num_layers=0) for n in ("actor", "critic")],
     "actor.rnn_num_layers"),
    (lambda c: c["critic"].update(activation="tanh"), "critic.activation"),
    (lambda c: c["critic"].update(obs_normalization=False), "critic.obs_normalization"),
    (lambda c: c["actor"].update(activation="gelu"), "actor.activation"),
    (lambda c: c["actor"]["distribution_cfg"].update(class_name="BetaDistribution"),
     "actor.distribution_cfg.class_name"),
    (lambda c: c["actor"]["distribution_cfg"].update(std_range=(0.1, 2.0)), "actor.distribution_cfg.std_range"),
    (lambda c: c["critic"].update(distribution_cfg={"class_name": "GaussianDistribution"}),
     "critic.distribution_cfg"),
    (lambda c: c.update(logger="neptune"), "logger"),
    (lambda c: c.update(obs_groups={"actor": ["policy"], "critic": ["privileged"]}), "obs_groups.critic"),
    (lambda c: c.update(num_step_per_env=24), "num_step_per_env"),
    (lambda c: c.pop("save_interval"), "save_interval"),
    (lambda c: c.update(syncfree={"ppo.learning_rat": 1e-3}), "syncfree"),
    (lambda c: c.update(syncfree={"policy.layer_norm": True}), "syncfree.policy.layer_norm"),
    (lambda c: c.update(syncfree={"policy.activation": "silu"}), "syncfree.policy.activation"),
    (lambda c: c.update(syncfree={"policy": {"actor_hidden": [32]}}), "syncfree.policy.actor_hidden"),
])
def test_a_key_syncfree_cannot_honour_is_refused_by_name(change, key: str) -> None:
    assert refused(change).startswith(f"rsl_rl config: {key}: ")


@pytest.mark.parametrize("change, key", [
    (lambda c: c.update(seed="one"), "seed"),
    (lambda c: c.update(num_steps_per_env="24"), "num_steps_per_env"),
    (lambda c: c.update(save_interval=2.5), "save_interval"),
    (lambda c: c.update(save_interval=0), "save_interval"),
    (lambda c: c.update(save_interval=-1), "save_interval"),
    (lambda c: c.update(max_iterations="many"), "max_iterations"),
    (lambda c: c.update(algorithm="PPO"), "algorithm"),
    (lambda c: c["algorithm"].update(learning_rate="fast"), "algorithm.learning_rate"),
    (lambda c: c["algorithm"].update(gamma=None), "algorithm.gamma"),
    (lambda c: c["algorithm"].update(num_mini_batches=[4]), "algorithm.num_mini_batches"),
    (lambda c: c["algorithm"].update(use_clipped_value_loss="false"), "algorithm.use_clipped_value_loss"),
    (lambda c: c["algorithm"].update(rnd_cfg={**RND_CFG, "state_normalization": "no"}),
     "algorithm.rnd_cfg.state_normalization"),
    (lambda c: c["algorithm"].update(rnd_cfg={**RND_CFG, "weight": "heavy"}), "algorithm.rnd_cfg.weight"),
    (lambda c: c["algorithm"].update(symmetry_cfg={"data_augmentation_func": pendulum_mirror,
                                                   "mirror_loss_coeff": "half"}),
     "algorithm.symmetry_cfg.mirror_loss_coeff"),
    (lambda c: c.update(actor=[16, 16]), "actor"),
    (lambda c: c["actor"].update(obs_normalization="yes"), "actor.obs_normalization"),
    (lambda c: c["actor"]["distribution_cfg"].update(init_std="big"), "actor.distribution_cfg.init_std"),
    (lambda c: c["actor"]["distribution_cfg"].update(std_range=3), "actor.distribution_cfg.std_range"),
    (lambda c: c["actor"].update(distribution_cfg="GaussianDistribution"), "actor.distribution_cfg"),
    (lambda c: c.update(obs_groups=["policy"]), "obs_groups"),
    (lambda c: c.update(obs_groups={"actor": 5}), "obs_groups.actor"),
    (lambda c: c.update(empirical_normalization="true"), "empirical_normalization"),
])
def test_a_value_of_the_wrong_type_is_refused_by_its_key(change, key: str) -> None:
    """Read as rsl_rl's runner reads it, a string would be a number or a switch that is on; refused by name."""
    assert refused(change).startswith(f"rsl_rl config: {key}: ")


def pendulum_mirror(env: Any, obs: Any = None, actions: torch.Tensor | None = None) -> tuple[Any, Any]:
    """An rsl_rl symmetry function for the pendulum (angle and torque change sign: (cos, sin, rate) -> (cos, -sin,
    -rate)), written as rsl_rl's users write them: the originals, then their reflection."""
    flip = torch.tensor([1.0, -1.0, -1.0])
    if obs is not None:
        obs = torch.cat([obs, obs.apply(lambda x: x * flip)])
    if actions is not None:
        actions = torch.cat([actions, -actions])
    return obs, actions


def test_symmetry_cfg_trains_through_the_drop_in_with_the_users_function(tmp_path: Path, one_thread) -> None:
    cfg = train_cfg()
    cfg["algorithm"]["symmetry_cfg"] = {"use_data_augmentation": True, "use_mirror_loss": True,
                                        "mirror_loss_coeff": 0.5, "data_augmentation_func": pendulum_mirror}
    runner = OnPolicyRunner(rsl_env(), cfg, log_dir=str(tmp_path), device="cpu")
    assert dataclasses.astuple(runner.config.symmetry) == (True, True, 0.5, False, "")
    mirror = runner.runner.env.mirror()
    probe = torch.tensor([[0.6, 0.8, 2.0]])
    assert torch.equal(mirror.observations("policy", probe), torch.tensor([[0.6, -0.8, -2.0]]))
    runner.learn(num_learning_iterations=2)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["symmetry_loss"] > 0 for r in records)
    named = dict(cfg)
    named["algorithm"] = {**cfg["algorithm"], "symmetry_cfg": {**cfg["algorithm"]["symmetry_cfg"],
                                                              "data_augmentation_func": "test_rsl_rl_runner:pendulum_mirror"}}
    assert OnPolicyRunner(rsl_env(), named, device="cpu").runner.env.mirror().function is pendulum_mirror


def test_symmetry_cfg_with_rnn_models_trains_through_the_drop_in_where_rsl_rl_refuses_it(tmp_path: Path,
                                                                                          one_thread) -> None:
    """rsl_rl refuses symmetry with recurrent models; the drop-in trains them, the rollout carrying the mirrored
    history's state (docs/symmetry.md)."""
    cfg = rnn_cfg("gru", 1)
    cfg["algorithm"]["symmetry_cfg"] = {"use_data_augmentation": True, "use_mirror_loss": True,
                                        "mirror_loss_coeff": 0.5, "data_augmentation_func": pendulum_mirror}
    with pytest.raises(ValueError):
        RslRlRunner(rsl_env(), for_rsl_rl_rnn(cfg), log_dir=None, device="cpu")
    runner = OnPolicyRunner(rsl_env(), cfg, log_dir=str(tmp_path), device="cpu")
    assert runner.config.policy.kind == "recurrent" and runner.runner.algorithm.symmetry is not None
    runner.learn(num_learning_iterations=2)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["symmetry_loss"] > 0 for r in records)


def test_rnd_cfg_trains_through_the_drop_in_and_its_state_crosses_to_rsl_rl_both_ways(tmp_path: Path,
                                                                                      one_thread) -> None:
    """The weight scaled by the env's step_dt and the schedule as rsl_rl reads them; the networks, normalizers and
    the predictor's Adam state saved under rsl_rl's names: rsl_rl's runner loads them into its own RND (and trains
    on), and the drop-in loads rsl_rl's back."""
    cfg = train_cfg()
    cfg["algorithm"]["rnd_cfg"] = copy.deepcopy(RND_CFG)
    ours = OnPolicyRunner(rsl_env(step_dt=0.05), copy.deepcopy(cfg), log_dir=str(tmp_path / "ours"), device="cpu")
    rnd = ours.config.rnd
    assert (rnd.enabled, rnd.state, rnd.weight, rnd.weight_schedule, rnd.final_value) == (
        True, "policy", pytest.approx(0.1), "linear", 0.5)  # rsl_rl scales the weight, not the final value
    ours.learn(2)
    records = [json.loads(line) for line in (tmp_path / "ours" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["rnd_loss"] > 0 and r["rnd_reward"] > 0 for r in records)
    ours.save(str(tmp_path / "ours.pt"))

    theirs = RslRlRunner(rsl_env(seed=2, step_dt=0.05), for_rsl_rl(cfg), log_dir=str(tmp_path / "rsl_rl"),
                         device="cpu")
    theirs.load(str(tmp_path / "ours.pt"))
    mine = ours.alg.rnd
    assert mine is not None
    their_state = theirs.alg.rnd.state_dict()
    for key, value in rnd_to_rsl_rl(mine.module.state_dict()).items():
        torch.testing.assert_close(their_state[key], value, rtol=0, atol=0, msg=key)
    their_moments = theirs.alg.rnd.optimizer.state_dict()["state"]
    for index, entry in mine.optimizer.state_dict()["state"].items():
        assert torch.equal(their_moments[index]["exp_avg"], entry["exp_avg"])
    theirs.learn(1)  # rsl_rl trains on from the drop-in's state
    theirs.save(str(tmp_path / "theirs.pt"))

    back = OnPolicyRunner(rsl_env(seed=3, step_dt=0.05), copy.deepcopy(cfg), device="cpu")
    back.load(str(tmp_path / "theirs.pt"))
    loaded = back.alg.rnd
    assert loaded is not None
    for key, value in rnd_to_rsl_rl(loaded.module.state_dict()).items():
        torch.testing.assert_close(value, theirs.alg.rnd.state_dict()[key], rtol=0, atol=0, msg=key)
    back.learn(1)
    plain = OnPolicyRunner(rsl_env(seed=3, step_dt=0.05), copy.deepcopy(cfg), device="cpu")
    torch.save({k: v for k, v in torch.load(tmp_path / "theirs.pt").items() if not k.startswith("rnd")},
               tmp_path / "without.pt")
    with pytest.raises(UserError, match="no rnd_state_dict"):
        plain.load(str(tmp_path / "without.pt"))
    plain.load(str(tmp_path / "without.pt"), load_cfg={"actor": True, "critic": True, "rnd": False})
    plain.load(str(tmp_path / "without.pt"), load_cfg={"actor": True, "critic": True})  # rsl_rl: no key, not loaded


def test_rnd_cfg_with_rnn_models_saves_its_state_for_rsl_rl(tmp_path: Path, one_thread) -> None:
    cfg = rnn_cfg("gru", 1)
    cfg["algorithm"]["rnd_cfg"] = copy.deepcopy(RND_CFG)
    ours = OnPolicyRunner(rsl_env(step_dt=0.05), cfg, device="cpu")
    assert ours.config.policy.kind == "recurrent" and ours.alg.rnd is ours.runner.algorithm.rnd is not None
    ours.learn(1)
    ours.save(str(tmp_path / "ours.pt"))
    saved = torch.load(tmp_path / "ours.pt", weights_only=True)
    assert torch.equal(saved["rnd_state_dict"]["predictor.0.weight"], ours.alg.rnd.module.predictor[0].weight)
    assert saved["rnd_optimizer_state_dict"]["state"]


def test_rnd_cfg_needs_the_envs_step_dt() -> None:
    cfg = train_cfg()
    cfg["algorithm"]["rnd_cfg"] = copy.deepcopy(RND_CFG)
    with pytest.raises(UserError, match=r"rsl_rl config: algorithm.rnd_cfg.weight: rsl_rl multiplies it by the "
                                        r"env's step_dt"):
        OnPolicyRunner(rsl_env(), cfg, device="cpu")


def test_several_processes_are_refused_in_one_line(monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError, match=r"^rsl_rl runner: WORLD_SIZE=2: this runner trains in one process"):
        OnPolicyRunner(rsl_env(), train_cfg(), device="cpu")


def _keys_read(source: str, names: tuple[str, ...]) -> set[str]:
    """The string keys `source` reads from the dicts called `names` (`x["k"]`, `x.get("k")`)."""
    keys = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and \
                isinstance(node.slice.value, str) and ast.unparse(node.value) in names:
            keys.add(node.slice.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and \
                ast.unparse(node.func.value) in names and node.args and isinstance(node.args[0], ast.Constant):
            keys.add(node.args[0].value)
    return keys


def test_every_key_rsl_rl_reads_is_mapped_or_left_to_the_script() -> None:
    """Walks rsl_rl 5's installed source: every argument of its PPO, MLPModel and GaussianDistribution, and every
    key its runner and algorithm read from the runner config, is in `MAPPED` or `READ_ELSEWHERE`."""
    root = Path(rsl_rl.__file__).parent
    runner_keys = _keys_read((root / "runners" / "on_policy_runner.py").read_text(), ("self.cfg", "train_cfg"))
    runner_keys |= _keys_read((root / "utils" / "logger.py").read_text(), ("self.cfg",))
    runner_keys |= _keys_read(textwrap.dedent(inspect.getsource(RslRlPPO.construct_algorithm)), ("cfg",))
    runner_keys -= {"class_name"}  # of the algorithm section, read as algorithm.class_name
    assert {"num_steps_per_env", "save_interval", "algorithm", "actor", "critic", "obs_groups"} <= runner_keys
    sections = {"algorithm", "actor", "critic"}
    missing = sorted(k for k in runner_keys - sections if k not in MAPPED and k not in READ_ELSEWHERE)
    assert not missing, f"rsl_rl's runner reads {missing}: map them or say who reads them"

    def arguments(fn, skip: set[str]) -> set[str]:
        return {p for p in inspect.signature(fn).parameters if p not in skip | {"self"}}

    ppo = arguments(RslRlPPO.__init__, {"actor", "critic", "storage", "device", "multi_gpu_cfg"})
    model = arguments(MLPModel.__init__, {"obs", "obs_groups", "obs_set", "output_dim"})
    dist = arguments(GaussianDistribution.__init__, {"output_dim"})
    assert {"learning_rate", "rnd_cfg", "symmetry_cfg"} <= ppo and {"hidden_dims", "distribution_cfg"} <= model
    unmapped = sorted({f"algorithm.{k}" for k in ppo} - set(MAPPED))
    unmapped += sorted({f"model.{k}" for k in model} - set(MAPPED))
    unmapped += sorted({f"model.distribution_cfg.{k}" for k in dist} - set(MAPPED))
    assert not unmapped, f"rsl_rl arguments with no mapping: {unmapped}"


def test_the_docs_table_lists_every_mapped_key() -> None:
    text = (Path(__file__).parents[1] / "docs" / "rsl_rl.md").read_text()
    listed = dict(re.findall(r"^\| `([\w.*]+)` \| (.*) \|$", text, flags=re.M))
    assert listed == {**MAPPED, **READ_ELSEWHERE}
