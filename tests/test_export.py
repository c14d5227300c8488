"""ONNX export of the deterministic actor: graphs run in onnxruntime and match the torch policy; CLI and bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

import syncfree
from conftest import grid_config, recurrent_config, small_config
from syncfree.cli import main
from syncfree.errors import UserError
from syncfree.export import export_checkpoint
from syncfree.policy.settings import RecurrentCoreConfig, TokenEncoderConfig
from syncfree.policy.token_encoder import ENCODER_INDEX_PART
from syncfree.train import checkpoint
from syncfree.train.evaluate import load_policy
from syncfree.train.run import Run


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny graphs: intra-op threads only add overhead (and stall when another process holds a core)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train(run_dir: Path, task: str, token: bool = False) -> Run:
    """One iteration of the small preset (normalizers have seen real observations); writes `latest.pt`."""
    cfg = small_config(task)
    cfg.iterations = 1
    if token:
        cfg.policy.kind = "token"
        cfg.policy.token = TokenEncoderConfig(encoder_hidden=[32], decoder_hidden=[32, 32], critic_hidden=[32],
                                              reconstruction_hidden=[32])
    trainer = Run(cfg, run_dir)
    trainer.learn()
    trainer.close()
    return trainer


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory) -> Run:
    return train(tmp_path_factory.mktemp("pendulum"), "pendulum")


def run_onnx(file: Path, **inputs: torch.Tensor) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    runner = ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])
    return runner.run(None, {name: t.detach().cpu().numpy() for name, t in inputs.items()})


def actor_obs(trainer: Run) -> torch.Tensor:
    return trainer.runner.policy.actor_input(trainer.runner.obs).clone()


def test_continuous_mlp_actor_matches_torch(pendulum: Run) -> None:
    policy = pendulum.runner.policy
    assert int(policy.actor_norm.count) > 0  # the normalizer is not the identity: it must be in the graph
    files = export_checkpoint(pendulum.run_dir / "latest.pt")  # default: next to the checkpoint
    assert files == [pendulum.run_dir / "pendulum-actor.onnx", pendulum.run_dir / "pendulum-actor.json"]
    obs = actor_obs(pendulum)
    with torch.no_grad():
        expected = policy.act_deterministic(obs)
    for rows in (obs, obs[:5]):  # the batch axis is dynamic
        (actions,) = run_onnx(files[0], actor_obs=rows)
        assert actions.shape == (rows.shape[0], 1)
        np.testing.assert_allclose(actions, expected[: rows.shape[0]].numpy(), rtol=0, atol=1e-5)

    meta = json.loads(files[1].read_text())
    assert meta["syncfree_version"] == syncfree.__version__
    assert meta["task"] == "pendulum" and meta["policy_kind"] == "mlp"
    assert meta["observation"]["layout"] == [{"name": "policy", "start": 0, "width": 3}]
    graph = meta["graphs"]["actor"]
    assert graph["file"] == "pendulum-actor.onnx" and graph["exporter"] == "dynamo"
    assert graph["inputs"] == [{"name": "actor_obs", "shape": ["batch", 3], "dtype": "float32"}]
    assert graph["outputs"] == [{"name": "actions", "shape": ["batch", 1], "dtype": "float32"}]


def test_discrete_actor_from_the_cli(capsys, tmp_path: Path) -> None:
    trainer = train(tmp_path / "run", "cartpole")
    out = tmp_path / "onnx"
    code = main(["export", str(tmp_path / "run" / "latest.pt"), "--format", "onnx", "--out", str(out)])
    assert code == 0
    assert capsys.readouterr().out.splitlines() == [f"wrote {out / 'cartpole-actor.onnx'}",
                                                    f"wrote {out / 'cartpole-actor.json'}"]
    obs = actor_obs(trainer)
    with torch.no_grad():
        logits = trainer.runner.policy.dist_params(obs)
    actions, onnx_logits = run_onnx(out / "cartpole-actor.onnx", actor_obs=obs)
    assert actions.dtype == np.int64 and actions.shape == (obs.shape[0],)
    np.testing.assert_array_equal(actions, trainer.runner.policy.act_deterministic(obs).numpy())
    np.testing.assert_allclose(onnx_logits, logits.numpy(), rtol=0, atol=1e-5)
    outputs = json.loads((out / "cartpole-actor.json").read_text())["graphs"]["actor"]["outputs"]
    assert [(o["name"], o["dtype"]) for o in outputs] == [("actions", "int64"), ("logits", "float32")]


@pytest.mark.slow
def test_token_policy_encoder_decoder_and_combined_graphs(tmp_path: Path) -> None:
    trainer = train(tmp_path / "run", "g1-track", token=True)
    policy = trainer.runner.policy
    files = export_checkpoint(tmp_path / "run" / "latest.pt", tmp_path / "onnx")
    assert [f.name for f in files] == ["g1-track-encoder.onnx", "g1-track-decoder.onnx", "g1-track-actor.onnx",
                                       "g1-track-actor.json"]
    # real observations, each row once with each encoder index, so that both encoders are checked
    obs = actor_obs(trainer).repeat(2, 1)
    policy.part(obs, ENCODER_INDEX_PART).copy_((torch.arange(obs.shape[0]) % 2).float().unsqueeze(-1))
    with torch.no_grad():
        tokens = policy.encode(obs)
        mean = policy.act_deterministic(obs)

    (onnx_tokens,) = run_onnx(files[0], actor_obs=obs)
    assert onnx_tokens.shape == tuple(tokens.shape)
    assert torch.equal(policy.fsq.codes_to_indices(torch.from_numpy(onnx_tokens)), policy.fsq.codes_to_indices(tokens))
    (decoded,) = run_onnx(files[1], tokens=tokens, actor_obs=obs)
    np.testing.assert_allclose(decoded, mean.numpy(), rtol=0, atol=1e-5)
    (combined,) = run_onnx(files[2], actor_obs=obs[:7])
    np.testing.assert_allclose(combined, mean[:7].numpy(), rtol=0, atol=1e-5)

    meta = json.loads(files[3].read_text())
    assert meta["policy_kind"] == "token"
    assert [(p["name"], p["width"]) for p in meta["observation"]["layout"]] == list(policy.layout.items())
    assert meta["graphs"]["decoder"]["inputs"][0] == {"name": "tokens", "shape": ["batch", 4, 4], "dtype": "float32"}
    assert meta["tokens"]["encoders"] == policy.encoder_names


@pytest.mark.parametrize(("task", "core", "layers"), [("pendulum", "lstm", 2), ("cartpole", "gru", 1)])
def test_a_recurrent_policy_steps_as_the_live_one_carrying_its_state(tmp_path: Path, task: str, core: str,
                                                                     layers: int) -> None:
    """The graph takes the state and returns the next one (`h_in`, `c_in` -> `h_out`, `c_out`, `[layers, batch,
    hidden]`); stepped over an episode carrying it, from zeros, it acts as the live policy's `act_deterministic`."""
    cfg = recurrent_config(task)
    cfg.iterations, cfg.policy.rnn = 1, RecurrentCoreConfig(core=core, hidden=16, num_layers=layers)
    trainer = Run(cfg, tmp_path / "run")
    trainer.learn()
    trainer.close()
    policy = trainer.runner.policy
    files = export_checkpoint(tmp_path / "run" / "latest.pt", tmp_path / "onnx")
    assert [f.name for f in files] == [f"{task}-actor.onnx", f"{task}-actor.json"]
    state_names = ["h", "c"] if core == "lstm" else ["h"]
    meta = json.loads(files[1].read_text())
    assert meta["policy_kind"] == "recurrent" and meta["observation"]["input"] == "actor_obs"
    graph = meta["graphs"]["actor"]
    assert graph["exporter"] == "dynamo"
    assert [i["name"] for i in graph["inputs"]] == ["actor_obs", *(f"{s}_in" for s in state_names)]
    assert graph["inputs"][1] == {"name": "h_in", "shape": [layers, "batch", 16], "dtype": "float32"}
    discrete = task == "cartpole"
    assert [o["name"] for o in graph["outputs"]] == ["actions", *(["logits"] if discrete else []),
                                                     *(f"{s}_out" for s in state_names)]
    state = meta["state"]
    assert [(c["input"], c["output"], c["shape"]) for c in state["carried"]] == [
        (f"{s}_in", f"{s}_out", [layers, "batch", 16]) for s in state_names]
    assert "the caller carries the state" in state["note"] and "zeros start an episode" in state["note"]

    env = trainer.runner.env
    obs = env.reset()
    live_state = policy.initial_actor_state(env.num_envs)
    carried = {f"{s}_in": torch.zeros(layers, env.num_envs, 16) for s in state_names}
    for _ in range(6):  # shorter than an episode: every row carries its state throughout
        actor = obs["policy"]
        with torch.no_grad():
            expected, live_state = policy.act_deterministic(actor, live_state)
        actions, *rest = run_onnx(files[0], actor_obs=actor, **carried)
        after = rest[1:] if discrete else rest
        carried = {f"{s}_in": torch.from_numpy(value) for s, value in zip(state_names, after, strict=True)}
        if discrete:
            np.testing.assert_array_equal(actions, expected.numpy())
        else:
            np.testing.assert_allclose(actions, expected.numpy(), rtol=0, atol=1e-5)
        obs = env.step(expected).obs
    assert not torch.equal(carried["h_in"], torch.zeros_like(carried["h_in"]))


def test_the_grid_arena_recurrent_token_policy_steps_as_the_live_one_carrying_its_state(tmp_path: Path) -> None:
    """The tokens the policy reads (uint8), the cell's state and the previous action one-hot in; the arg-max
    action, the logits and the next state out: stepped from zeros it acts as the policy's greedy rollout step."""
    pytest.importorskip("mettagrid")
    cfg = grid_config(iterations=1)
    trainer = Run(cfg, tmp_path / "run")
    trainer.learn()
    trainer.close()
    loaded = load_policy(tmp_path / "run" / "latest.pt")
    policy = loaded.policy
    files = export_checkpoint(tmp_path / "run" / "latest.pt", tmp_path / "onnx")
    meta = json.loads(files[1].read_text())
    assert meta["policy_kind"] == "recurrent-token" and meta["action"]["kind"] == "discrete"
    assert meta["graphs"]["actor"]["exporter"] == "dynamo"
    read = cfg.policy.recurrent.max_tokens
    assert meta["graphs"]["actor"]["inputs"][0] == {"name": "actor_obs", "shape": ["batch", read, 3], "dtype": "uint8"}
    assert [c["input"] for c in meta["state"]["carried"]] == ["h_in", "c_in", "last_action_in"]

    env = loaded.make_env(2, seed=1)
    obs = env.reset()
    n = env.num_envs
    state, done = policy.initial_state(n), torch.ones(n, dtype=torch.bool)
    last = torch.zeros(n, dtype=torch.int64)
    carrying = policy.initial_actor_state(n)  # how play acts: the previous action rides in the state
    carried = {"h_in": torch.zeros(n, 16), "c_in": torch.zeros(n, 16),
               "last_action_in": torch.zeros(n, env.action_spec.size)}
    for _ in range(6):
        with torch.no_grad():
            out, state = policy.step(obs["policy"], state, done, last, greedy=True)
            carried_actions, carrying = policy.act_carrying(obs["policy"], carrying)
        assert torch.equal(carried_actions, out.actions)
        actions, _, h, c, previous = run_onnx(files[0], actor_obs=obs["policy"][:, :read], **carried)
        np.testing.assert_array_equal(actions, out.actions.numpy())
        np.testing.assert_allclose(h, state.h.numpy(), rtol=0, atol=1e-5)
        carried = {"h_in": torch.from_numpy(h), "c_in": torch.from_numpy(c),
                   "last_action_in": torch.from_numpy(previous)}
        step = env.step(out.actions)
        done, last, obs = step.terminated | step.truncated, out.actions, step.obs
        assert not bool(done.any())  # no episode ends here: the graph's state runs on as the policy's
    env.close()


def test_dynamo_failure_falls_back_to_the_torchscript_exporter(pendulum: Run, tmp_path: Path,
                                                                monkeypatch) -> None:
    export = torch.onnx.export

    def dynamo_fails(*args, dynamo: bool = True, **kwargs):
        if dynamo:
            raise RuntimeError("unsupported operator")
        return export(*args, dynamo=False, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", dynamo_fails)
    files = export_checkpoint(pendulum.run_dir / "latest.pt", tmp_path)
    assert json.loads(files[-1].read_text())["graphs"]["actor"]["exporter"] == "torchscript"
    obs = actor_obs(pendulum)
    (actions,) = run_onnx(files[0], actor_obs=obs)
    with torch.no_grad():
        expected = pendulum.runner.policy.act_deterministic(obs)
    np.testing.assert_allclose(actions, expected.numpy(), rtol=0, atol=1e-5)

    def both_fail(*args, **kwargs):
        raise RuntimeError("unsupported operator")

    monkeypatch.setattr(torch.onnx, "export", both_fail)
    with pytest.raises(UserError, match=r"the actor graph cannot be exported to ONNX .*unsupported operator"):
        export_checkpoint(pendulum.run_dir / "latest.pt", tmp_path / "failed")
    assert not list((tmp_path / "failed").glob("*"))


def export_error(capsys, *args: str) -> str:
    assert main(["export", *args]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("syncfree: error: ") and not captured.out, captured.err
    return lines[0]


def test_bad_input_is_one_line_and_exit_2(capsys, pendulum: Run, tmp_path: Path, monkeypatch) -> None:
    good = str(pendulum.run_dir / "latest.pt")
    assert str(tmp_path / "missing.pt") in export_error(capsys, str(tmp_path / "missing.pt"))
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    assert "junk.pt: not a readable checkpoint" in export_error(capsys, str(tmp_path / "junk.pt"))
    line = export_error(capsys, good, "--format", "tflite")
    assert "format='tflite'" in line and "allowed: onnx" in line

    state = checkpoint.load(good)
    state["config"]["policy"]["kind"] = "recurrent"  # the MLP's weights, a config of the recurrent policy
    checkpoint.save_atomic(state, tmp_path / "recurrent.pt")
    line = export_error(capsys, str(tmp_path / "recurrent.pt"))
    assert "recurrent.pt: config: policy.kind='recurrent' is invalid; allowed: mlp" in line  # PPO's, as it says
    state["config"]["algorithm"] = "recurrent-ppo"
    checkpoint.save_atomic(state, tmp_path / "recurrent.pt")
    line = export_error(capsys, str(tmp_path / "recurrent.pt"))
    assert "recurrent.pt: config: ppo.bptt_horizon=16 is invalid" in line  # read as recurrent PPO's
    state["config"]["ppo"]["bptt_horizon"] = 0
    checkpoint.save_atomic(state, tmp_path / "recurrent.pt")
    line = export_error(capsys, str(tmp_path / "recurrent.pt"))
    assert "recurrent.pt: policy: lacks 'actor_core.cells.0.weight_ih'" in line  # the weights of the MLP it has

    monkeypatch.setitem(sys.modules, "onnxscript", None)  # find_spec then reports it missing
    line = export_error(capsys, good)
    assert "onnxscript not installed" in line and "pip install 'syncfree[export]'" in line
    assert not list(tmp_path.glob("*.onnx"))


@pytest.mark.parametrize("name", ["pendulum-actor.onnx", "pendulum-actor.json"])
def test_a_folder_where_a_file_goes_is_one_line_and_nothing_is_written(capsys, pendulum: Run, tmp_path: Path,
                                                                       name: str) -> None:
    (tmp_path / name).mkdir()
    line = export_error(capsys, str(pendulum.run_dir / "latest.pt"), "--out", str(tmp_path))
    assert f"export: {tmp_path / name} is a folder" in line
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_export_replaces_a_link_in_the_folder_and_never_writes_through_it(pendulum: Run, tmp_path: Path) -> None:
    """Each file is written beside its name and then put in its place: a link there (to a file outside the folder)
    is replaced, its target left as it was, and no temporary file stays."""
    victim = tmp_path / "elsewhere" / "keep"
    victim.parent.mkdir()
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    for name in ("pendulum-actor.onnx", "pendulum-actor.json"):
        (out / name).symlink_to(victim)
    assert main(["export", str(pendulum.run_dir / "latest.pt"), "--out", str(out)]) == 0
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in out.iterdir()) == ["pendulum-actor.json", "pendulum-actor.onnx"]
    assert not any(p.is_symlink() for p in out.iterdir())
    assert json.loads((out / "pendulum-actor.json").read_text())["graphs"]


@pytest.mark.parametrize("algorithm", ["ppo", "sac", "td3"])
def test_layer_norm_and_silu_networks_train_and_export_as_the_live_actor(algorithm: str, tmp_path: Path) -> None:
    """`policy.layer_norm` with `policy.activation=silu` (FastSAC's networks): every hidden layer of the actor and
    the critics is a linear layer, a `LayerNorm` and a SiLU; after training, the exported graph acts as the live
    deterministic actor."""
    from syncfree.tasks import with_algorithm

    cfg = small_config("pendulum")
    if algorithm != "ppo":
        cfg = with_algorithm(cfg, algorithm)
        section = getattr(cfg, algorithm)
        section.learning_starts, section.batch_size, section.updates_per_iteration = 0, 32, 2
        section.steps_per_env = 4
    cfg.iterations = 2
    cfg.policy.layer_norm, cfg.policy.activation = True, "silu"
    trainer = Run(cfg, tmp_path / "run")
    trainer.learn()
    trainer.close()
    policy = trainer.runner.policy
    networks = [policy.actor, *((policy.q1, policy.q2) if algorithm != "ppo" else (policy.critic,))]
    for network in networks:
        kinds = [type(layer).__name__ for layer in network]
        assert kinds == ["Linear", "LayerNorm", "SiLU"] * 2 + ["Linear"], kinds
    norm = policy.actor[1]
    assert not torch.equal(norm.weight, torch.ones_like(norm.weight))  # its scale trained (it starts at 1)
    files = export_checkpoint(tmp_path / "run" / "latest.pt", tmp_path / "onnx")
    obs = actor_obs(trainer)
    with torch.no_grad():
        expected = policy.act_deterministic(obs)
    (actions,) = run_onnx(files[0], actor_obs=obs)
    np.testing.assert_allclose(actions, expected.numpy(), rtol=0, atol=1e-5)


def test_a_namespaced_gymnasium_task_exports_to_one_file_and_its_sidecar_names_the_adapters_map(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """`gym:<module>:Team/Env-v0`: the run folder and the exported files are one name each (the `/` in the id
    replaced); the graph gives the actor's [-1, 1] and the sidecar says the Gymnasium adapter maps it onto the Box
    after the graph."""
    from conftest import user_gym_task

    task = user_gym_task(tmp_path, monkeypatch)
    sac = ["--sac.learning_starts", "8", "--sac.batch_size", "8", "--sac.buffer_size", "64"]
    assert main(["train", "--task", task, "--algorithm", "sac", "--env.num_envs", "2", "--iterations", "2",
                 "--log.dir", str(tmp_path / "runs"), "--log.progress", "false", *sac]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    stem = task.replace(":", "-").replace("/", "-")
    assert run.name.startswith(f"{stem}-") and (run / "latest.pt").is_file()
    assert main(["export", str(run / "latest.pt"), "--out", str(tmp_path / "onnx")]) == 0
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == [f"{stem}-actor.json", f"{stem}-actor.onnx"]
    sidecar = json.loads((tmp_path / "onnx" / f"{stem}-actor.json").read_text())
    assert "Gymnasium adapter" in sidecar["action"]["env_map"] and "low + (a + 1) / 2" in sidecar["action"]["env_map"]
    assert "[-1, 1] with unit" in sidecar["action"]["note"]
    loaded = load_policy(run / "latest.pt")
    obs = torch.tensor([[3.0, 0.5], [-3.0, 0.5]])
    (onnx_actions,) = run_onnx(tmp_path / "onnx" / f"{stem}-actor.onnx", actor_obs=obs)
    np.testing.assert_allclose(onnx_actions, loaded.policy.act_deterministic(obs).detach().numpy(), atol=1e-5)
    assert np.abs(onnx_actions).max() <= 1.0
