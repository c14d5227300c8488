"""`syncfree.learn`: the README's Python examples run, overrides of every form reach the config, and a misspelt
key names the nearest one."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

import syncfree
from syncfree.errors import UserError

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_python_examples() -> list[str]:
    section = re.split(r"\n#{2,3} ", README.read_text().split("## From Python\n", 1)[1], maxsplit=1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 1], ids=["own torch env", "gymnasium"])
def test_the_readme_examples_run(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 caplog: pytest.LogCaptureFixture) -> None:
    if index == 1:
        pytest.importorskip("gymnasium")
    examples = readme_python_examples()
    assert len(examples) == 2
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO, logger="syncfree")
    namespace: dict = {}
    exec(compile(examples[index], f"README example {index}", "exec"), namespace)
    result = namespace["result"]
    run = tmp_path / result.run_dir
    assert (run / "latest.pt").is_file() and (run / "config.yaml").is_file() and (run / "metrics.jsonl").is_file()
    assert f"-> {result.run_dir}" in caplog.text  # the start line names the run's folder
    if index == 0:  # the point is pushed to 0: a random policy drifts and returns about -25 over 50 steps
        assert result.run.cfg.task == "Reach" and result.record["mean_return"] > -15, result.record


def test_overrides_of_every_form_reach_the_config() -> None:
    result = syncfree.learn("pendulum", run_dir=False, iterations=1, env={"num_envs": 16},
                            perf={"compile": "off"}, log={"progress": False}, **{"ppo.steps_per_env": 8})
    cfg = result.run.cfg
    assert (cfg.iterations, cfg.env.num_envs, cfg.ppo.steps_per_env, cfg.perf.compile) == (1, 16, 8, "off")
    assert cfg.ppo.learning_rate == 1e-3 and cfg.ppo.gamma == 0.95  # the rest is pendulum's preset
    assert result.run_dir is None and result.record["env_steps"] == 16 * 8


@pytest.mark.parametrize(("overrides", "guess"), [
    ({"ppo": {"learning_rat": 1e-3}}, "did you mean ppo.learning_rate?"),
    ({"iteration": 3}, "did you mean iterations?"),
    ({"perf.compil": "off"}, "did you mean perf.compile?"),
])
def test_a_misspelt_override_names_the_nearest_key(overrides: dict, guess: str) -> None:
    with pytest.raises(UserError, match=re.escape(guess)):
        syncfree.learn("pendulum", run_dir=False, **overrides)


def test_load_policy_reads_a_checkpoint_without_an_env_or_a_trainer(tmp_path: Path) -> None:
    """`syncfree.load_policy`: the policy as trained (its actions equal the trainer's), envs of the run's task at
    the size asked, its evaluation equal to `syncfree eval`'s, and torch's generator left as it was."""
    import torch

    from syncfree.train.evaluate import evaluate_task

    result = syncfree.learn("pendulum", run_dir=tmp_path / "run", iterations=2, env={"num_envs": 16},
                            ppo={"steps_per_env": 8}, log={"progress": False}, perf={"compile": "off"})
    generator = torch.get_rng_state()
    loaded = syncfree.load_policy(tmp_path / "run" / "latest.pt")
    assert torch.equal(torch.get_rng_state(), generator)
    assert (loaded.iteration, loaded.task.name, loaded.cfg.env.num_envs) == (2, "pendulum", 16)
    env = loaded.make_env(5, seed=3)
    assert env.num_envs == 5
    obs = env.reset()
    trained = result.policy
    with torch.no_grad():
        assert torch.equal(loaded.policy.act_deterministic(obs["policy"]), trained.act_deterministic(obs["policy"]))
    returns = loaded.evaluate(loaded.make_env(5, seed=3))
    assert returns.shape == (5,) and (returns == evaluate_task(loaded.cfg, loaded.policy, 5, loaded.device, 3)).all()
    with pytest.raises(UserError, match=r"missing\.pt"):
        syncfree.load_policy(tmp_path / "missing.pt")


def test_learn_resumes_a_checkpoint_and_continues_exactly(tmp_path: Path) -> None:
    """`syncfree.learn(resume=...)` continues the run from its checkpoint, as `syncfree train --resume` does: the
    same weights as a run that never stopped, and one record per iteration, in a new folder beside the run's (or
    in the run's own with `resume_in_place=True`)."""
    import json

    import torch

    settings = dict(env={"num_envs": 16}, ppo={"steps_per_env": 8}, log={"progress": False},
                    perf={"compile": "off"}, save_every=100)
    straight = syncfree.learn("pendulum", run_dir=tmp_path / "straight", iterations=3, **settings)
    syncfree.learn("pendulum", run_dir=tmp_path / "split", iterations=2, **settings)
    torch.manual_seed(12345)  # whatever happened in between must not matter
    for in_place in (False, True):
        resumed = syncfree.learn("cartpole", resume=tmp_path / "split" / "latest.pt", iterations=3,
                                 resume_in_place=in_place)
        assert resumed.run_dir is not None and resumed.record["iteration"] == 3
        assert (resumed.run_dir == tmp_path / "split") == in_place and resumed.run_dir.parent == tmp_path
        for (name, a), b in zip(straight.policy.state_dict().items(), resumed.policy.state_dict().values(),
                                strict=True):
            assert torch.equal(a, b), name
        lines = (resumed.run_dir / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3]
    with pytest.raises(UserError, match=r"missing\.pt"):
        syncfree.learn(resume=tmp_path / "missing.pt")
    folders = sorted(tmp_path.iterdir())
    with pytest.raises(UserError, match=r"is at iteration 3; iterations=3 is the total to reach, not how many more "
                                        r"\(--iterations 6 trains 3 more\)"):
        syncfree.learn(resume=tmp_path / "split" / "latest.pt", iterations=3)
    assert sorted(tmp_path.iterdir()) == folders  # nothing trained, no folder left


def test_evaluating_a_run_on_an_env_of_your_own_asks_for_the_env(tmp_path: Path) -> None:
    from syncfree.envs.builtin.classic import Pendulum

    syncfree.learn(Pendulum(8, "cpu", 0), run_dir=tmp_path / "own", iterations=1, ppo={"steps_per_env": 8},
                   log={"progress": False}, perf={"compile": "off"})
    with pytest.raises(UserError, match=r"trained on an env of your own \(Pendulum\); pass it as env="):
        syncfree.evaluate(tmp_path / "own" / "latest.pt")
    assert syncfree.evaluate(tmp_path / "own" / "latest.pt", env=Pendulum(3, "cpu", 1)).shape == (3,)


def test_learn_resumes_a_checkpoint_kept_alone_under_runs_not_where_the_file_says(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch
                                                                                  ) -> None:
    """A checkpoint outside any run folder does not choose where the resume writes: the current folder's `runs/`,
    or the `log.dir` the call gives."""
    from syncfree.train import checkpoint

    trained = syncfree.learn("pendulum", run_dir=tmp_path / "trained", iterations=1, env={"num_envs": 16},
                             ppo={"steps_per_env": 8}, log={"progress": False}, perf={"compile": "off"})
    state = checkpoint.load(trained.run_dir / "latest.pt")
    state["config"]["log"]["dir"] = str(tmp_path / "named-by-the-file")
    checkpoint.save_atomic(state, tmp_path / "alone" / "kept.pt")
    monkeypatch.chdir(tmp_path)
    resumed = syncfree.learn(resume=tmp_path / "alone" / "kept.pt", iterations=2)
    assert resumed.run_dir is not None and resumed.run_dir.resolve().parent == tmp_path / "runs"
    chosen = syncfree.learn(resume=tmp_path / "alone" / "kept.pt", iterations=2, **{"log.dir": str(tmp_path / "c")})
    assert chosen.run_dir is not None and chosen.run_dir.parent == tmp_path / "c"
    assert not (tmp_path / "named-by-the-file").exists()


def test_evaluate_on_an_env_the_policy_was_not_trained_on_is_one_line(tmp_path: Path) -> None:
    """The policy acts only on an env that gives its observations and takes its actions."""
    from syncfree.envs.builtin.classic import CartPole

    syncfree.learn("pendulum", run_dir=tmp_path / "run", iterations=1, env={"num_envs": 16},
                   ppo={"steps_per_env": 8}, log={"progress": False}, perf={"compile": "off"})
    with pytest.raises(UserError, match=r"latest\.pt: the policy was trained on observations policy \(3,\), critic "
                       r"\(3,\) and continuous actions of size 1, but this env gives policy \(4,\), critic \(4,\) and "
                       r"takes discrete actions of size 2"):
        syncfree.evaluate(tmp_path / "run" / "latest.pt", num_envs=4, env=CartPole(4))


def test_learn_takes_a_gymnasium_vector_env_and_names_what_it_cannot_take(tmp_path: Path) -> None:
    """A Gymnasium vector env is wrapped as the adapter wraps it; one Gymnasium env, or anything else that is not an
    env, is one line saying what is taken; a resume naming another algorithm than its run's is one line too."""
    gymnasium = pytest.importorskip("gymnasium")
    from gymnasium.vector import AutoresetMode

    def vector(n: int) -> object:
        return gymnasium.make_vec("Pendulum-v1", n, vectorization_mode="sync",
                                  vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})

    sac = {"learning_starts": 8, "batch_size": 8, "buffer_size": 64, "steps_per_env": 2, "updates_per_iteration": 1}
    result = syncfree.learn(vector(4), algorithm="sac", run_dir=tmp_path / "gym", iterations=3, sac=sac,
                            log={"progress": False})
    assert result.record["iteration"] == 3 and result.record["gradient_steps"] == 1
    assert syncfree.evaluate(tmp_path / "gym" / "latest.pt", env=vector(2)).shape == (2,)
    with pytest.raises(UserError, match=r"^learn: PendulumEnv is one Gymnasium env; pass a vector of them"):
        syncfree.learn(gymnasium.make("Pendulum-v1"), run_dir=False)  # its TimeLimit wrapper named by what it wraps
    with pytest.raises(UserError, match=r"^learn: list is not an env; allowed: a task name, a syncfree VecEnv or a "
                                        r"Gymnasium vector env$"):
        syncfree.learn([], run_dir=False)  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"was trained with sac; a resumed run keeps its algorithm \(drop "
                                        r"algorithm='td3', or train a new run with it\)"):
        syncfree.learn(vector(4), resume=tmp_path / "gym" / "latest.pt", algorithm="td3", iterations=4)
