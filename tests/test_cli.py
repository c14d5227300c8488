"""The commands a user runs: train, eval, tasks, switches, --help; logs and TensorBoard files."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import torch

from syncfree.cli import main
from syncfree.config import PerfConfig, TrainConfig, from_dict, to_dict
from syncfree.tasks import preset
from syncfree.train import checkpoint
from syncfree.train.compile_choice import choose_compile


def test_train_then_eval(capsys, tmp_path: Path) -> None:
    code = main(["train", "--task", "pendulum", "--iterations", "3", "--save_every", "2", "--env.num_envs", "16",
                 "--env.max_episode_length", "10",
                 "--ppo.steps_per_env", "8", "--log.dir", str(tmp_path), "--log.run_name", "run",
                 "--log.tensorboard", "true", "--log.progress", "false"])
    assert code == 0
    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2, 3]
    assert {"env_steps", "steps_per_s", "mean_return", "surrogate_loss", "value_loss", "learning_rate"} <= set(records[-1])
    assert records[-1]["env_steps"] == 3 * 16 * 8
    assert sorted(p.name for p in run.glob("checkpoint_*.pt")) == ["checkpoint_000002.pt", "checkpoint_000003.pt"]
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    capsys.readouterr()

    assert main(["eval", str(run / "latest.pt"), "--num_envs", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pendulum: mean return -") and "over the first episodes of 5 envs, deterministic actions" in out
    assert "iteration 3" in out


def test_eval_samples_reproducibly_and_leaves_the_generator_alone(capsys, tmp_path: Path) -> None:
    """`--sample` plays actions drawn from the policy (its std is about 1 after 2 iterations, so the returns differ
    from the deterministic policy's); the draws are seeded by --seed, and torch's generator is as it was."""
    assert main(["train", "--task", "pendulum", "--iterations", "2", "--env.num_envs", "16", "--ppo.steps_per_env", "8",
                 "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress", "false"]) == 0
    ckpt = str(tmp_path / "run" / "latest.pt")
    capsys.readouterr()

    def eval_line(*extra: str) -> str:
        assert main(["eval", ckpt, "--num_envs", "4", *extra]) == 0
        return capsys.readouterr().out

    generator = torch.get_rng_state()
    sampled = eval_line("--sample")
    assert torch.equal(torch.get_rng_state(), generator)
    assert "over the first episodes of 4 envs, sampled actions" in sampled
    assert eval_line("--sample") == sampled
    assert eval_line("--sample", "--seed", "7").split(" over ")[0] != sampled.split(" over ")[0]
    deterministic = eval_line()
    assert "deterministic actions" in deterministic
    assert deterministic.split(" over ")[0] != sampled.split(" over ")[0]


def iterations_logged(run: Path) -> list[int]:
    return [json.loads(line)["iteration"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_resume_from_cli_continues_the_run_in_a_new_folder_or_in_place(tmp_path: Path, caplog) -> None:
    """A resume writes a new run folder beside the resumed one, which starts with that run's records up to the
    checkpoint and leaves the resumed run as it was; a resume of it names the first run once; `resume_in_place`
    writes on in the checkpoint's folder, dropping its records past the checkpoint."""
    args = ["--task", "cartpole", "--env.num_envs", "16", "--ppo.steps_per_env", "8", "--log.dir", str(tmp_path),
            "--log.run_name", "run", "--log.progress", "false", "--save_every", "1"]
    assert main(["train", "--iterations", "3", *args]) == 0
    run = tmp_path / "run"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with caplog.at_level(logging.INFO, logger="syncfree"):
        assert main(["train", "--resume", str(run / "checkpoint_000002.pt"), "--iterations", "4"]) == 0
    assert f"--resume_in_place true writes on in {run} instead" in caplog.text
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    (forked,) = [p for p in tmp_path.iterdir() if p.name != "run"]
    assert re.fullmatch(r"run-resumed-\d{8}-\d{6}", forked.name), forked.name
    assert iterations_logged(forked) == [1, 2, 3, 4] and (forked / "checkpoint_000004.pt").is_file()
    assert main(["train", "--resume", str(forked / "latest.pt"), "--iterations", "5"]) == 0
    again = sorted(p.name for p in tmp_path.iterdir() if p not in (run, forked))
    assert len(again) == 1 and re.fullmatch(r"run-resumed-\d{8}-\d{6}(-2)?", again[0]), again
    assert iterations_logged(tmp_path / again[0]) == [1, 2, 3, 4, 5]
    assert main(["train", "--resume", str(run / "checkpoint_000002.pt"), "--resume_in_place", "true",
                 "--iterations", "4"]) == 0
    assert iterations_logged(run) == [1, 2, 3, 4] and "resume_in_place: false" in (run / "config.yaml").read_text()
    assert len(list(tmp_path.iterdir())) == 3


def test_tasks_lists_every_task(capsys) -> None:
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("cartpole", "cartpole-continuous", "pendulum"))


def test_switches_lists_both_polarities(capsys) -> None:
    assert main(["switches"]) == 0
    out = capsys.readouterr().out
    for f in PerfConfig.switches():
        assert f"{f.name}: baseline={f.metadata['baseline']} optimized={f.metadata['optimized']}" in out


def test_switches_for_a_task_mark_the_inert_ones_with_the_reason(capsys) -> None:
    assert main(["switches", "--task", "grid-arena"]) == 0
    lines = capsys.readouterr().out.splitlines()
    marks = {line.split(":")[0]: line for line in lines if "  live" in line or "INERT:" in line}
    assert len(marks) == len(PerfConfig.switches())
    assert "INERT: the learning-rate schedule does not adapt" in marks["device_adaptive_lr"]
    assert marks["compile"].endswith("live") and marks["cpu_time_index"].endswith("live")
    assert "INERT" in marks["device_loss_stats"]
    assert main(["switches", "--task", "point-mass", "--perf.compile", "step"]) == 0
    out = capsys.readouterr().out
    assert "fused_adamw" in out and "compile=step makes the whole minibatch update one graph" in out
    cfg = preset("point-mass")
    chosen = choose_compile(cfg, torch.device("cpu")).mode
    assert main(["switches", "--task", "point-mass"]) == 0  # under the mode auto chooses for the preset's run
    assert capsys.readouterr().out.startswith(f"point-mass, ppo (perf.compile={chosen}, device=cpu)")
    assert main(["switches", "--task", "point-mass", "--perf.compile", "off"]) == 0
    marks = {line.split(":")[0]: line for line in capsys.readouterr().out.splitlines() if "live" in line}
    assert "fused_adamw" in marks and "zero_grad_set_to_none" in marks  # eager: the optimizer kernel acts
    assert main(["switches", "--task", "point-mass", "--device", "cuda"]) == 0  # judged for a GPU, even here
    marks = {line.split(":")[0]: line for line in capsys.readouterr().out.splitlines() if "  live" in line}
    assert "cuda_graphs" in marks
    assert main(["switches", "--perf.compile", "off"]) == 2


def test_setting_an_inert_switch_warns_in_one_line(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="syncfree")
    args = ["train", "--task", "cartpole", "--iterations", "1", "--log.progress", "false", "--log.dir", str(tmp_path)]
    assert main([*args, "--perf.fast_history", "false", "--log.run_name", "a"]) == 0
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == ["perf.fast_history=False changes nothing here: acts only in a manager-based env (g1-track)"]
    caplog.clear()
    assert main([*args, "--perf.deferred_episode_stats", "false", "--log.run_name", "b"]) == 0  # it acts here
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_a_stored_config_with_a_removed_switch_loads_with_a_warning(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="syncfree")
    stored = to_dict(TrainConfig())
    stored["perf"]["cached_batch_metadata"] = True
    assert from_dict(TrainConfig, stored) == TrainConfig()
    assert "perf.cached_batch_metadata is ignored: the switch was removed" in caplog.text


def test_help_documents_every_field(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["train", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for name in ("--ppo.learning_rate", "--env.num_envs", "--perf.fused_adamw", "--log.tensorboard", "--resume"):
        assert name in out
    assert "Use PyTorch's fused AdamW kernel" in out


def test_help_is_the_task_config_types_own(capsys) -> None:
    """`--help` lists the options of the task's config type, and names the switches that change nothing there."""
    from syncfree.train.arguments import parse_train_config

    def help_of(*args: str) -> str:
        with pytest.raises(SystemExit) as info:
            main(["train", *args])
        assert info.value.code == 0
        return " ".join(capsys.readouterr().out.split())

    cartpole = help_of("--task", "cartpole", "--help")
    assert "--ppo.learning_rate" in cartpole and "--perf.fused_adamw" in cartpole and "--env.max_episode_length" in cartpole
    for other in ("--env.map", "--losses.supervised", "--policy.token.", "--env.history", "--ppo.bptt_horizon"):
        assert other not in cartpole, other
    inert = cartpole.split("change nothing for it here: ")[1].split(" (")[0].split(", ")
    assert "fast_history" in inert and "cpu_time_index" in inert and "fused_adamw" not in inert
    # short enough to read: one usage line; a switch by its first sentence, one inert here not listed (it parses)
    assert cartpole.startswith("usage: syncfree train [--task TASK] [--algorithm NAME] [--config FILE] [--SECTION")
    assert "--perf.fast_history" not in cartpole
    assert parse_train_config(["--perf.fast_history", "false"]).perf.fast_history is False
    assert "Use PyTorch's fused AdamW kernel. (`syncfree switches`)" in cartpole
    assert "Off: AdamW with PyTorch's default" not in cartpole  # what `syncfree switches` says
    grid = help_of("--task", "grid-arena", "--help")
    assert "--env.map" in grid and "--losses.supervised" in grid and "--ppo.bptt_horizon" in grid
    assert "--env.history" not in grid and "--policy.token." not in grid and "--env.max_episode_length" not in grid
    g1 = help_of("--task", "g1-track", "--help")
    assert "--env.history" in g1 and "--policy.token.num_tokens" in g1 and "--losses." not in g1
    assert "--env.num_envs" in help_of("--task", "gym:Hopper-v5", "--help")
    assert "--env.max_episode_length" not in help_of("--task", "gym:Hopper-v5", "--help")


def test_preset_shows_in_help(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--task", "pendulum", "--help"])
    assert "default: 300" in capsys.readouterr().out  # pendulum's preset iteration count


def test_unknown_command(capsys) -> None:
    assert main(["fly"]) == 2
    assert "unknown command 'fly'" in capsys.readouterr().err


def test_config_file_task_selects_its_preset(tmp_path: Path) -> None:
    from syncfree.train.arguments import parse_train_config

    path = tmp_path / "run.yaml"
    path.write_text("task: pendulum\nenv:\n  num_envs: 16\n")
    cfg = parse_train_config(["--config", str(path), "--iterations", "7"])
    assert (cfg.task, cfg.env.num_envs, cfg.iterations) == ("pendulum", 16, 7)
    assert cfg.ppo.gamma == 0.95  # from the pendulum preset, not cartpole's


def test_unreadable_config_file(capsys, tmp_path: Path) -> None:
    assert main(["train", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_threads_are_chosen_and_said(monkeypatch, tmp_path: Path, caplog) -> None:
    import logging

    import torch

    from syncfree.core import device
    from syncfree.core.device import choose_threads

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(device, "TORCH_DEFAULT_THREADS", 8)
    monkeypatch.setattr(device, "_chosen", [])
    threads = [8]
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads[0])
    monkeypatch.setattr(torch, "set_num_threads", lambda n: threads.__setitem__(0, n))
    assert choose_threads(3, cpu, 4, True, 16) == (3, "threads")
    assert choose_threads(0, cpu, 2, False, 4096) == (1, "2 processes share the cores")
    assert choose_threads(0, cpu, 1, True, 4096) == (1, "the simulator steps on threads of its own")
    assert choose_threads(0, cpu, 1, False, 1023) == (1, "fewer than 1024 envs on the CPU")
    assert choose_threads(0, cpu, 1, False, 1024) == (8, "torch's default")
    assert choose_threads(0, cuda, 1, False, 64) == (8, "torch's default")
    device.apply_threads(1)  # syncfree's own choice: the next run may choose again
    assert choose_threads(0, cpu, 1, False, 4096) == (8, "torch's default")
    threads[0] = 3  # the program's: kept, also by the runs after the one that kept it
    assert choose_threads(0, cpu, 1, False, 16) == (3, "set by the program")
    device.apply_threads(3, "set by the program")
    assert choose_threads(0, cpu, 1, False, 4096) == (3, "set by the program")
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert choose_threads(0, cpu, 2, True, 16) == (3, "OMP_NUM_THREADS")
    monkeypatch.undo()

    before = torch.get_num_threads()
    try:
        with caplog.at_level(logging.INFO, logger="syncfree"):
            assert main(["train", "--task", "cartpole", "--iterations", "1", "--env.num_envs", "16", "--threads", "2",
                         "--perf.autocast", "off", "--log.dir", str(tmp_path), "--log.progress", "false"]) == 0
        assert torch.get_num_threads() == 2
        assert "; on cpu, 2 threads, float32, perf.compile=" in caplog.text
    finally:
        torch.set_num_threads(before)


def test_the_run_folder_holds_its_config_and_it_reads_back(tmp_path: Path) -> None:
    from syncfree.config import to_dict
    from syncfree.train.arguments import parse_train_config

    args = ["--task", "pendulum", "--iterations", "1", "--env.num_envs", "16", "--ppo.learning_rate", "0.0005",
            "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress", "false"]
    assert main(["train", *args]) == 0
    written = tmp_path / "run" / "config.yaml"
    again = parse_train_config(["--config", str(written), "--log.run_name", "again"])
    expected = to_dict(parse_train_config(args))
    expected["log"]["run_name"] = "again"
    assert expected["perf"]["compile"] == "auto"
    expected["perf"]["compile"] = "off"  # what auto chose for 1 iteration: the run records it, not auto
    assert to_dict(again) == expected and again.ppo.learning_rate == 0.0005


@pytest.mark.parametrize(("argv", "yaml_text", "guess"), [
    (["--ppo.learning_rat", "1e-3"], None, "did you mean ppo.learning_rate?"),
    (["--iteration", "3"], None, "did you mean iterations?"),
    (["--ppp.learning_rate", "1e-3"], None, "did you mean ppo.learning_rate or rnd.learning_rate?"),
    ([], "task: pendulum\nppo:\n  learning_rat: 0.001\n", "did you mean ppo.learning_rate?"),
    ([], "task: pendulum\niteration: 3\n", "did you mean iterations?"),
    ([], "task: grid-arena\nenv:\n  agent_per_env: 3\n", "did you mean env.agents_per_env?"),
])
def test_a_typo_gets_the_nearest_key(capsys, tmp_path: Path, argv: list[str], yaml_text: str | None,
                                     guess: str) -> None:
    if yaml_text is not None:
        (tmp_path / "typo.yaml").write_text(yaml_text)
        argv = ["--config", str(tmp_path / "typo.yaml")]
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and guess in err and "(allowed: " in err, err
    assert yaml_text is None or "typo.yaml" in err


def test_tensorboard_counts_env_steps_and_a_resume_replaces_what_it_repeats(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = ["--task", "pendulum", "--env.num_envs", "16", "--ppo.steps_per_env", "8", "--save_every", "1",
            "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.tensorboard", "true", "--log.progress", "false"]
    assert main(["train", "--iterations", "3", *args]) == 0
    run = tmp_path / "run"
    assert main(["train", "--resume", str(run / "checkpoint_000001.pt"), "--resume_in_place", "true",
                 "--iterations", "2"]) == 0
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    iterations = events.Scalars("iteration")
    assert [(e.step, e.value) for e in iterations] == [(128, 1.0), (256, 2.0)]  # iteration 3 of the first run purged
    assert [e.step for e in events.Scalars("value_loss")] == [128, 256]
    assert [json.loads(line)["iteration"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_wandb_logs_to_the_configured_project_and_a_resume_continues_its_run(tmp_path: Path,
                                                                             monkeypatch) -> None:
    """In W&B's offline mode (files only): project, entity and group as configured; the run id is saved with the
    checkpoints and a resume in place logs to the same run (W&B's sync merges the two offline folders), a resume
    into a new folder to a new run; `log.wandb_id` names the run. A resume logs to W&B only when told again."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    args = ["--task", "pendulum", "--env.num_envs", "16", "--ppo.steps_per_env", "8", "--log.dir", str(tmp_path),
            "--log.progress", "false", "--log.wandb", "true", "--log.wandb_project", "proj-x",
            "--log.wandb_entity", "team-y", "--log.wandb_group", "group-z"]
    assert main(["train", "--iterations", "2", "--log.run_name", "run", *args]) == 0
    run = tmp_path / "run"
    wandb_id = checkpoint.load(run / "latest.pt")["wandb_id"]
    assert wandb_id
    # a file does not choose where this machine sends data: a resume logs to W&B when its own command line says so
    assert main(["train", "--resume", str(run / "latest.pt"), "--log.run_name", "quiet", "--iterations", "3"]) == 0
    assert not (tmp_path / "quiet" / "wandb").exists()
    again = ["--log.wandb", "true", "--log.wandb_entity", "team-y"]
    assert main(["train", "--resume", str(run / "latest.pt"), "--resume_in_place", "true", "--iterations", "3",
                 *again]) == 0
    assert checkpoint.load(run / "latest.pt")["wandb_id"] == wandb_id
    folders = sorted((run / "wandb").glob("offline-run-*"))
    assert len(folders) == 2 and all(f"-{wandb_id}" in f.name for f in folders), [f.name for f in folders]
    first = (folders[0] / f"run-{wandb_id}.wandb").read_bytes()
    assert all(text in first for text in (b"proj-x", b"team-y", b"group-z", b"value_loss", b"env_steps"))
    assert main(["train", "--iterations", "1", "--log.run_name", "named", "--log.wandb_id", "chosen1", *args]) == 0
    assert list((tmp_path / "named" / "wandb").glob("offline-run-*-chosen1"))
    assert main(["train", "--resume", str(run / "latest.pt"), "--log.run_name", "fork", "--iterations", "4",
                 "--log.wandb", "true"]) == 0
    forked_id = checkpoint.load(tmp_path / "fork" / "latest.pt")["wandb_id"]
    assert forked_id and forked_id != wandb_id
    assert [f.name.endswith(forked_id) for f in (tmp_path / "fork" / "wandb").glob("offline-run-*")] == [True]


def test_a_compiled_run_says_its_first_iteration_compiles(tmp_path: Path, caplog) -> None:
    """What the line says follows the config (the suite runs with dynamo disabled, so nothing compiles here)."""
    import logging

    args = ["train", "--task", "cartpole", "--env.num_envs", "16", "--ppo.steps_per_env", "4", "--log.dir",
            str(tmp_path), "--log.progress", "false"]
    with caplog.at_level(logging.INFO, logger="syncfree"):
        assert main([*args, "--iterations", "0", "--perf.compile", "hot", "--log.run_name", "none"]) == 0
        assert main([*args, "--iterations", "1", "--perf.compile", "off", "--log.run_name", "off"]) == 0
        assert "compiles the loop" not in caplog.text  # nothing to compile, or nothing compiled
        assert main([*args, "--iterations", "1", "--perf.compile", "hot", "--log.run_name", "hot"]) == 0
        assert "perf.compile=hot: the first iteration compiles the loop" in caplog.text
        # an off-policy learner's gradient step compiles where it first takes one, after its random steps
        assert main(["train", "--task", "pendulum", "--algorithm", "sac", "--env.num_envs", "16", "--iterations",
                     "1", "--perf.compile", "step", "--log.dir", str(tmp_path), "--log.run_name", "sac",
                     "--log.progress", "false"]) == 0
    assert ("perf.compile=step: the first iteration compiles the loop, the first with gradient steps compiles them"
            in caplog.text)


def test_the_command_line_runs_off_the_main_thread(tmp_path: Path) -> None:
    """Signal handlers can only be set on the main thread: elsewhere (a notebook's worker, a thread pool) `main`
    trains without them."""
    import threading

    codes = []
    worker = threading.Thread(target=lambda: codes.append(main(
        ["train", "--task", "cartpole", "--iterations", "1", "--env.num_envs", "16", "--log.dir", str(tmp_path),
         "--log.progress", "false"])))
    worker.start()
    worker.join(timeout=120)
    assert codes == [0]


def test_g1_track_settings_from_the_command_line(tmp_path: Path) -> None:
    from syncfree.train import checkpoint

    assert main(["train", "--task", "g1-track", "--env.num_envs", "4", "--ppo.steps_per_env", "2", "--iterations", "1",
                 "--perf.compile", "off", "--env.history", "2", "--env.sampler_bin_frames", "25", "--log.dir",
                 str(tmp_path), "--log.run_name", "run", "--log.progress", "false"]) == 0
    state = checkpoint.load(tmp_path / "run" / "latest.pt")
    assert state["config"]["env"]["history"] == 2
    two_steps = state["obs_dims"]  # the groups' widths with 2 steps of history
    assert main(["train", "--task", "g1-track", "--env.num_envs", "4", "--ppo.steps_per_env", "2", "--iterations", "1",
                 "--perf.compile", "off", "--log.dir", str(tmp_path), "--log.run_name", "default",
                 "--log.progress", "false"]) == 0
    assert checkpoint.load(tmp_path / "default" / "latest.pt")["obs_dims"] != two_steps


def test_plot_draws_seeds_as_a_band_and_other_runs_beside_them(tmp_path: Path, capsys) -> None:
    import matplotlib.image

    from syncfree.plot import group_runs, read_run

    base = ["train", "--task", "pendulum", "--iterations", "3", "--env.num_envs", "16", "--ppo.steps_per_env", "8",
            "--env.max_episode_length", "8", "--log.dir", str(tmp_path), "--log.progress", "false"]
    for name, extra in (("a", ["--seed", "0"]), ("b", ["--seed", "1"]), ("c", ["--ppo.learning_rate", "3e-4"])):
        assert main([*base, "--log.run_name", name, *extra]) == 0
    runs = [tmp_path / name for name in "abc"]
    assert group_runs({d: read_run(d) for d in runs}) == {"a": runs[:2], "c": runs[2:]}
    # a resume in a folder of its own, with a's config and seed: a curve of its own, not a third seed of a
    assert main(["train", "--resume", str(runs[0] / "latest.pt"), "--iterations", "4", "--log.run_name", "a2"]) == 0
    both = [*runs[:2], tmp_path / "a2"]
    assert group_runs({d: read_run(d) for d in both}) == {"a": runs[:2], "a2": [tmp_path / "a2"]}
    capsys.readouterr()
    assert main(["plot", *map(str, runs), "--out", str(tmp_path / "curves.png")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'curves.png'}"
    image = matplotlib.image.imread(tmp_path / "curves.png")
    assert image.shape[1] > 4 * image.shape[0] * 0.8  # mean_return, mean_length, value_loss, steps_per_s side by side
    assert image[..., :3].std() > 0.05  # not blank

    assert main(["plot", str(tmp_path / "none")]) == 2
    assert "plot: cannot read" in capsys.readouterr().err
    assert main(["plot", str(runs[0]), "--metrics", "mean_retrun"]) == 2
    assert "no metric 'mean_retrun'" in capsys.readouterr().err


def test_seeds_are_averaged_where_every_seed_has_a_value() -> None:
    from syncfree.plot import mean_band

    xs, means, stds = mean_band([[(1.0, 2.0), (2.0, 4.0), (3.0, 6.0)], [(2.0, 2.0), (3.0, 2.0)]])
    assert (xs, means, stds) == ([2.0, 3.0], [3.0, 4.0], [1.0, 2.0])


def test_version_is_single_sourced(capsys) -> None:
    """`syncfree --version` prints the package's version, which is also what the installed metadata says."""
    import importlib.metadata

    import syncfree

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"syncfree {syncfree.__version__}"
    assert importlib.metadata.version("syncfree") == syncfree.__version__
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and not any(line.startswith("version =") for line in
                                                             pyproject.split("[project.optional-dependencies]")[0]
                                                             .splitlines())


def test_output_piped_into_a_reader_that_stops_early_ends_quietly() -> None:
    import subprocess
    import sys

    # `true` exits before the command has imported torch: every write goes to a closed pipe
    done = subprocess.run(f"{sys.executable} -m syncfree switches | true", shell=True, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0
    assert done.stderr == ""  # no BrokenPipeError traceback


def test_the_command_ends_with_an_idle_thread_pool_alive() -> None:
    """torch's compiler leaves a thread pool behind; its idle workers are told to stop by the threading module's exit
    callbacks, which the command's ending runs before it waits for threads (as the interpreter's own exit does)."""
    import subprocess
    import sys

    script = ("import concurrent.futures, sys; pool = concurrent.futures.ThreadPoolExecutor(2); "
              "pool.submit(lambda: 0).result(); sys.argv = ['syncfree', 'tasks']; from syncfree.cli import run; run()")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "point-mass-goal" in done.stdout


def test_a_task_whose_package_is_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """`syncfree tasks` marks a task whose package is not installed, and training one is one line naming the extra
    that installs it."""
    import importlib.util
    import sys

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gymnasium" else find_spec(name, *a))
    monkeypatch.setitem(sys.modules, "syncfree.envs.adapters.gymnasium", None)  # its import then fails
    assert main(["tasks"]) == 0
    assert re.search(r"^gym:<id> .*\(needs pip install 'syncfree\[gym\]'\)$", capsys.readouterr().out, re.M)
    assert main(["train", "--task", "gym:Pendulum-v1", "--iterations", "1", "--log.progress", "false"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("syncfree: error: task gym:Pendulum-v1: Gymnasium is not installed: pip install "
                           "'syncfree[gym]'"), err


def test_wandb_that_cannot_start_a_run_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    """No login (or no network): W&B's own error in one line, nothing left that blocks the same command again."""
    import sys
    import types

    def refuse(**_: object) -> None:
        raise RuntimeError("No API key configured. Use `wandb login` to log in.\nmore detail")

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=refuse))
    argv = ["train", "--task", "pendulum", "--env.num_envs", "8", "--ppo.steps_per_env", "4", "--iterations", "1",
            "--log.dir", str(tmp_path), "--log.run_name", "run", "--log.progress", "false", "--log.wandb", "true"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("syncfree: error: log.wandb: W&B did not start a run: No API key configured. Use `wandb login` to "
                   "log in. (`wandb login`, WANDB_MODE=offline, or leave --log.wandb off)"), err
    assert main(argv[:-2]) == 0 and not (tmp_path / "run" / ".lock").exists()
