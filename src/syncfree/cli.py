"""Command line: `syncfree train | eval | export | plot | bench | doctor | tasks | switches`."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from syncfree.errors import DistributedError, UserError

if TYPE_CHECKING:
    from syncfree.config import TrainConfig
    from syncfree.train.distributed import Distributed

log = logging.getLogger("syncfree")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("OpenGL").setLevel(logging.WARNING)  # PyOpenGL (rendering) reports its optional modules
    commands = {"train": cmd_train, "eval": cmd_eval, "play": cmd_play, "export": cmd_export, "plot": cmd_plot,
                "bench": cmd_bench, "tasks": cmd_tasks, "switches": cmd_switches, "doctor": cmd_doctor}
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: syncfree {train,eval,play,export,plot,bench,doctor,tasks,switches} [--help]\n\n"
              "  train     train PPO on a task (default: cartpole, on CPU unless CUDA is available)\n"
              "  eval      run a checkpoint's deterministic policy for N episodes and print the mean return\n"
              "  play      record a checkpoint's policy acting in one env as a video (MP4 or GIF)\n"
              "  export    write a checkpoint's deterministic actor as ONNX graphs (normalizer included)\n"
              "  plot      draw runs' learning curves (seeds of one config as mean and band) to a PNG\n"
              "  bench     time, count and compare configurations of the perf switches\n"
              "  doctor    find the host syncs, allocations and ops of an env or a training loop, by source line\n"
              "  tasks     list the built-in tasks\n"
              "  switches  list the performance switches with their baseline and optimized values")
        return 0
    if argv[0] not in commands:
        print(f"syncfree: unknown command {argv[0]!r}; choose from {', '.join(commands)}", file=sys.stderr)
        return 2
    # until training installs its own handlers, a signal stops start-up quietly (signals reach the main thread only)
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGINT, signal.SIGTERM)
                if on_main_thread}
    try:
        return commands[argv[0]](argv[1:])
    except UserError as e:
        print(f"syncfree: error: {e}", file=sys.stderr)
        return 2
    except DistributedError as e:
        print(f"syncfree: error: {e}", file=sys.stderr)
        from syncfree.train import distributed

        return distributed.exit_now(1)
    except KeyboardInterrupt:
        print("syncfree: interrupted", file=sys.stderr)
        return INTERRUPTED
    except (MemoryError, RuntimeError) as e:
        message = out_of_memory(e)
        if message is None:
            raise
        print(f"syncfree: error: {message}", file=sys.stderr)
        return 2
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run() -> None:
    """The `syncfree` command: `main`, then exit with its code. After an interrupt the process ends at once,
    output flushed: a signal that lands while torch is being imported leaves modules half set up, whose exit
    handlers would print their diagnostics or die on the way out."""
    code = main()
    if code == INTERRUPTED:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


INTERRUPTED = 130
"""Exit code of a run stopped by a signal without saving (128 + SIGINT)."""


def interrupt(signum, frame):
    """Ctrl-C, or SIGTERM (from `timeout`, SLURM, Kubernetes), outside the training loop: there is nothing to save
    yet, so the process ends at once, quietly. (A KeyboardInterrupt raised here could land inside an import of
    torch or NumPy, which then fail later with unrelated errors.)"""
    os.write(2, b"syncfree: interrupted\n")
    os._exit(INTERRUPTED)


def out_of_memory(error: BaseException) -> str | None:
    """One line for an allocation that failed (the config asks for more memory than there is), else None."""
    text = str(error)
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError" or "can't allocate memory" in text:
        tried = re.search(r"tried to allocate (\d+) bytes", text)
        what = f"an allocation of {int(tried.group(1)) / 2**30:.1f} GiB failed" if tried else first
        return f"out of memory: {what}; lower env.num_envs (or ppo.steps_per_env)"
    return None


def parse_train_config(argv: Sequence[str]):
    """Defaults come from the task's preset (or the resumed checkpoint's config); arguments override them."""
    from jsonargparse import ArgumentParser, set_parsing_settings

    from syncfree.config import TrainConfig, from_dict, validate
    from syncfree.envs.tasks import check_task
    from syncfree.presets import preset
    from syncfree.train import checkpoint

    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--task")
    pre.add_argument("--resume")
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.resume:
        base = from_dict(TrainConfig, checkpoint.load(known.resume)["config"])
        base.resume = known.resume
    else:
        task = known.task or task_in_config_file(known.config) or TrainConfig.task
        check_task(task)
        base = preset(task)
    parser = ArgumentParser(prog="syncfree train", exit_on_error=False, allow_abbrev=False,
                            description="Train PPO on a built-in task. Defaults shown are the task's preset.")
    parser.add_argument("--config", action="config", help="YAML file with any of the options below.")
    parser.add_class_arguments(TrainConfig, as_group=False, default=base)
    if "--help-all" in argv:
        print(parser.format_help())
        raise SystemExit(0)
    if any(a in ("-h", "--help") for a in argv):
        print(task_help(parser.format_help(), base))
        raise SystemExit(0)
    try:
        ns = parser.parse_args(list(argv))
    except Exception as e:
        message = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        from_file = "does not accept" in message or "is not accepted" in message
        where = f" (in {known.config})" if known.config and from_file else ""
        raise UserError(f"config: {message}{where}{unknown_key_hint(message)}") from None
    ns.pop("config", None)
    cfg = validate(from_dict(TrainConfig, ns.as_dict()))
    check_task(cfg.task)
    return cfg


RECURRENT_OPTIONS = ("--env.grid", "--policy.recurrent", "--losses", "--ppo.bptt_horizon", "--ppo.advantage",
                     "--ppo.vtrace", "--ppo.minibatch_sampler", "--ppo.prio")
"""Option prefixes only the recurrent algorithm reads (grid-arena)."""
G1_TRACK_OPTIONS = ("--env.g1", "--env.robot", "--env.motions", "--env.backend", "--policy.token")
"""Option prefixes only g1-track reads."""


def task_help(text: str, cfg: TrainConfig) -> str:
    """The help of `syncfree train` without the options the task of `cfg` (its preset) does not read and the perf
    switches inert for it, under a one-line usage (`--help-all` shows everything)."""
    from syncfree.algo.scope import switch_scope
    from syncfree.core.device import resolve_device

    hidden = (() if cfg.policy.kind == "recurrent" else RECURRENT_OPTIONS) + (
        () if cfg.task == "g1-track" else G1_TRACK_OPTIONS)
    inert = cfg.perf.inert_switches(switch_scope(cfg, resolve_device(cfg.device)))
    hidden += tuple(f"--perf.{name} " for name in inert)  # the switches that change nothing for this task
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if not line.strip())  # the usage ends at the first blank line
    out = [f"usage: syncfree train [--task TASK] [--config CONFIG] [--OPTION VALUE ...]  (the options {cfg.task} "
           "reads, and the perf switches that act on it; --help-all lists them all)"]
    group: list[str] = []
    options = kept = 0

    def flush() -> None:
        nonlocal group, options, kept
        if kept or not options:  # a group loses its title when all its options are hidden
            out.extend(group)
        group, options, kept = [], 0, 0

    entry_hidden = False
    for line in lines[start:]:
        if not line.strip() or not line.startswith(" "):  # a blank line or a group's title starts a group
            flush()
            group.append(line)
            continue
        if line.startswith("  -"):  # an option: its continuation lines follow, indented further
            entry_hidden = bool(hidden) and line.strip().startswith(hidden)
            options += 1
            kept += not entry_hidden
        if not entry_hidden:
            group.append(line)
    flush()
    return "\n".join(out)


def task_in_config_file(path: str | None) -> str | None:
    """The `task` a YAML config file names, so that its preset supplies the defaults."""
    if not path:
        return None
    import yaml

    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise UserError(f"config: cannot read {path} ({type(e).__name__})") from None
    return data.get("task") if isinstance(data, dict) else None


UNKNOWN_KEY = (r"unrecognized arguments: --([\w.]+)", r"Group '([\w.]+)' does not accept option '([\w.]+)'",
               r"Option '([\w.]+)' is not accepted")
"""How the parser names an unknown key: on the command line, in a section of a YAML file, at its top level."""


def unknown_key_hint(message: str) -> str:
    """For an unknown key (on the command line or in a YAML file), the nearest known key and the keys of its
    section."""
    from syncfree.config import key_hint

    match = next((m for m in (re.search(p, message) for p in UNKNOWN_KEY) if m), None)
    return key_hint(".".join(match.groups())) if match else ""


def cmd_train(argv: Sequence[str]) -> int:
    from syncfree.train import distributed

    if any(a in ("-h", "--help", "--help-all") for a in argv):
        parse_train_config(argv)  # prints the help and exits
    cfg = parse_train_config(argv)
    # under torchrun (WORLD_SIZE > 1): join the process group, one rank per process
    dist = distributed.init_from_env(cfg.device, cfg.distributed.backend, cfg.distributed.timeout)
    finished = False
    try:
        code = train(cfg, dist)
        finished = True
        return code
    finally:
        if dist is not None:
            distributed.shutdown(wait_for_peers=finished)


def train(cfg: TrainConfig, dist: Distributed | None) -> int:
    """`syncfree train` on this process (one rank of several when `dist` is given)."""
    from syncfree.algo.scope import warn_inert_switches
    from syncfree.api import default_run_name
    from syncfree.core.compile import compile_cache_dir
    from syncfree.train import checkpoint
    from syncfree.train.runner import Runner

    if cfg.resume:
        run_dir = Path(cfg.resume).parent
    else:
        run_dir = Path(cfg.log.dir) / (cfg.log.run_name or default_run_name(cfg))
    main_rank = dist is None or dist.is_main
    info = log.info if main_rank else (lambda *args: None)  # only rank 0 reports
    if not cfg.resume and main_rank:
        checkpoint.check_run_dir_unused(run_dir)
    trainer = Runner(cfg, run_dir=run_dir, dist=dist)
    if cfg.resume:
        trainer.load_state_dict(checkpoint.load(cfg.resume), source=f"checkpoint {cfg.resume}")
        trainer.last_saved = Path(cfg.resume)
        info("resumed %s at iteration %d", cfg.resume, trainer.iteration)
    ranks = f"{dist.world_size} ranks x " if dist is not None else ""
    envs = f"{trainer.env.num_envs} envs"
    if cfg.policy.kind == "recurrent":
        envs = f"{trainer.env.num_envs} agents ({cfg.env.num_envs} simulations x {cfg.env.grid.agents_per_env})"
    info("training %s on %s (%d thread%s: %s): %s%s x %d steps per iteration, %d iterations -> %s", cfg.task,
         trainer.device, trainer.threads, "s" if trainer.threads != 1 else "", trainer.threads_reason, ranks, envs,
         cfg.ppo.steps_per_env, cfg.iterations, run_dir)
    if main_rank:
        warn_inert_switches(cfg, trainer.switch_scope())
    if trainer.compiles_first_iteration() and trainer.iteration < cfg.iterations:
        info("perf.compile=%s: the first iteration compiles the loop (seconds to minutes on a CPU; a later run of "
             "the same config reuses torch's compile caches in %s)", cfg.perf.compile, compile_cache_dir())

    def request_stop(signum, frame):
        if trainer.stop_requested:
            raise KeyboardInterrupt
        trainer.stop_requested = True
        if main_rank:
            print(f"\n{signal.Signals(signum).name}: stopping after this iteration (a second signal aborts without "
                  "saving)", file=sys.stderr)

    previous = {signum: signal.signal(signum, request_stop) for signum in (signal.SIGINT, signal.SIGTERM)
                if threading.current_thread() is threading.main_thread()}
    try:
        record = trainer.learn()
    except KeyboardInterrupt:
        info("aborted; %s", saved_line(trainer.last_saved))
        return INTERRUPTED
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        trainer.close()
    summary = ", ".join(f"{k}={record[k]:.{3 if k.startswith('reward') else 1}f}"
                        for k in ("mean_return", "mean_length", "reward_per_agent_step") if k in record)
    summary = summary or "no episode finished yet"
    info("%s at iteration %d (%d env steps): %s; %s", "stopped" if trainer.stopping() else "done", trainer.iteration,
         trainer.env_steps, summary, saved_line(trainer.last_saved))
    return 0


def saved_line(path: Path | None) -> str:
    """Where the run's newest checkpoint is, or that there is none."""
    return f"checkpoint {path}" if path is not None else "no checkpoint written (no iteration finished)"


def policy_from_checkpoint(path: str, device: str):
    """(the checkpoint's config, a runner holding its policy) for `eval` and `play`."""
    from syncfree.config import TrainConfig, from_dict
    from syncfree.train import checkpoint
    from syncfree.train.runner import Runner

    state = checkpoint.load(path)
    cfg = from_dict(TrainConfig, state["config"])
    cfg.device, cfg.log.progress = device, False
    trainer = Runner(cfg)
    trainer.load_state_dict(state, source=f"checkpoint {path}", resume=False)
    trainer.close()
    return cfg, trainer


def cmd_eval(argv: Sequence[str]) -> int:
    from syncfree.train.evaluate import evaluate_task

    parser = argparse.ArgumentParser(prog="syncfree eval",
                                     description="Run a checkpoint's deterministic policy (or, with --sample, its "
                                     "sampled actions) and print the mean return.")
    parser.add_argument("--checkpoint", required=True, help="checkpoint file (e.g. runs/<run>/latest.pt)")
    parser.add_argument("--episodes", type=int, default=20, help="episodes to run, in parallel (default 20; grid-arena: simulations, every agent's first episode)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default cpu)")
    parser.add_argument("--seed", type=int, default=12345, help="environment seed (default 12345)")
    parser.add_argument("--sample", action="store_true",
                        help="act with actions drawn from the policy's distribution, as in training, instead of the "
                        "most likely ones (draws seeded with --seed)")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        raise UserError(f"--episodes={args.episodes} is invalid; allowed: an integer >= 1")
    cfg, trainer = policy_from_checkpoint(args.checkpoint, args.device)
    returns = evaluate_task(cfg, trainer.policy, args.episodes, trainer.device, args.seed, greedy=not args.sample)
    if cfg.policy.kind == "recurrent":  # --episodes simulations, every agent's first episode
        episodes = f"{len(returns)} agents' episodes ({args.episodes} simulations)"
    else:
        episodes = f"{args.episodes} episodes"
    actions = "sampled" if args.sample else "deterministic"
    print(f"{cfg.task}: mean return {returns.mean():.2f} ± {returns.std():.2f} over {episodes}, {actions} actions "
          f"(min {returns.min():.2f}, max {returns.max():.2f}; checkpoint at iteration {trainer.iteration})")
    return 0


def cmd_play(argv: Sequence[str]) -> int:
    import os

    from tqdm import tqdm

    parser = argparse.ArgumentParser(prog="syncfree play", description="Record a checkpoint's deterministic policy "
                                     "acting in one env as a video: g1-track rendered by MuJoCo (the policy's robot "
                                     "beside its translucent reference; headless through EGL or OSMesa), Gymnasium "
                                     "envs by their own renderer, the classic tasks as 2-D drawings.")
    parser.add_argument("checkpoint", help="checkpoint file (e.g. runs/<run>/latest.pt)")
    parser.add_argument("--video", type=Path, default=None,
                        help="output file, .mp4 or .gif (default: play.mp4 beside the checkpoint)")
    parser.add_argument("--steps", type=int, default=300, help="env steps to record (default 300)")
    parser.add_argument("--fps", type=float, default=0.0,
                        help="frames per second (default: real time for the env's control step, else 30)")
    parser.add_argument("--width", type=int, default=640, help="frame width in pixels (default 640)")
    parser.add_argument("--height", type=int, default=480, help="frame height in pixels (default 480)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default cpu)")
    parser.add_argument("--seed", type=int, default=12345, help="environment seed (default 12345)")
    args = parser.parse_args(argv)
    for name, low in (("steps", 1), ("width", 16), ("height", 16)):
        if getattr(args, name) < low:
            raise UserError(f"--{name}={getattr(args, name)} is invalid; allowed: an integer >= {low}")
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")  # read by renderers when they make their OpenGL context
    from syncfree.play import check_video_path, drawer, play, real_time_fps, write_video

    video = args.video or Path(args.checkpoint).parent / "play.mp4"
    check_video_path(video)  # before anything is built

    cfg, trainer = policy_from_checkpoint(args.checkpoint, args.device)
    if cfg.policy.kind == "recurrent":
        raise UserError(f"play: {cfg.task} cannot be drawn (its MettaGrid simulations have no renderer here); "
                        "`syncfree eval` measures its return")
    env, draw = play_env(cfg, trainer.device, args.seed), None
    try:
        draw = drawer(env, args.width, args.height)
        fps = args.fps or real_time_fps(env)
        with tqdm(total=args.steps, desc="play", unit="step", disable=not sys.stderr.isatty()) as bar:
            frames = play(trainer.policy, env, args.steps, draw, bar.update)
    finally:
        for closing in (draw, env):
            close = getattr(closing, "close", None)
            if close is not None:
                close()
    write_video(frames, video, fps)
    height, width = frames[0].shape[:2]
    print(f"wrote {video} ({len(frames)} frames, {width}x{height}, {fps:g} fps; {cfg.task}, checkpoint at "
          f"iteration {trainer.iteration})")
    return 0


def play_env(cfg, device, seed: int):
    """One env of the checkpoint's task for `play`; Gymnasium envs made to render frames."""
    from syncfree.envs.tasks import GYMNASIUM_PREFIX
    from syncfree.train.runner import make_task_env

    if cfg.task.startswith(GYMNASIUM_PREFIX):
        from syncfree.envs.adapters.gymnasium import make_gymnasium

        return make_gymnasium(cfg.task[len(GYMNASIUM_PREFIX):], 1, device, seed, render_mode="rgb_array")
    return make_task_env(cfg, 1, device, seed)


def cmd_export(argv: Sequence[str]) -> int:
    from syncfree.export import FORMATS, export_checkpoint

    parser = argparse.ArgumentParser(prog="syncfree export",
                                     description="Write a checkpoint's deterministic actor, observation normalizer "
                                                 "included, as ONNX graphs with a JSON sidecar.")
    parser.add_argument("--checkpoint", required=True, help="checkpoint file (e.g. runs/<run>/latest.pt)")
    parser.add_argument("--format", default="onnx", help=f"output format: {', '.join(FORMATS)} (default onnx)")
    parser.add_argument("--out", default=None, help="output folder (default: the checkpoint's folder)")
    args = parser.parse_args(argv)
    for path in export_checkpoint(args.checkpoint, args.out, format=args.format):
        print(f"wrote {path}")
    return 0


def cmd_plot(argv: Sequence[str]) -> int:
    from syncfree.plot import DEFAULT_METRICS, plot

    parser = argparse.ArgumentParser(prog="syncfree plot", description="Draw learning curves of runs against env "
                                     "steps: runs of one config with different seeds as their mean and a band of "
                                     "one standard deviation, other runs overlaid.")
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (each with its metrics.jsonl)")
    parser.add_argument("--metrics", nargs="+", default=None,
                        help=f"metrics to plot (default: those of {', '.join(DEFAULT_METRICS)} the runs have)")
    parser.add_argument("--out", type=Path, default=None, help="PNG file (default: <first run>/curves.png)")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    out = plot(args.runs, args.out or args.runs[0] / "curves.png", args.metrics, args.title)
    print(f"wrote {out}")
    return 0


def cmd_bench(argv: Sequence[str]) -> int:
    from syncfree import bench
    from syncfree.bench import report

    cfg, out = parse_bench_config(argv)
    result = bench.run(cfg)
    device = result["machine"]["device"].replace(":", "")
    out_dir = Path(out or f"benchmarks/results/{cfg.task.replace(':', '_')}-{cfg.profile}-{device}")
    for path in report.write(result, out_dir):
        log.info("wrote %s", path)
    print(report.markdown(result))
    return 0


def parse_bench_config(argv: Sequence[str]):
    """`syncfree bench`'s arguments -> (the validated `BenchConfig`, the output folder or "")."""
    from jsonargparse import ArgumentParser, set_parsing_settings

    from syncfree import bench
    from syncfree.envs.tasks import check_task

    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    parser = ArgumentParser(prog="syncfree bench", exit_on_error=False, allow_abbrev=False,
                            description="Time baseline, optimized and ablated configurations side by side.")
    parser.add_class_arguments(bench.BenchConfig, as_group=False)
    parser.add_argument("--out", default="", help="Output folder (default: benchmarks/results/<task>-<profile>-<device>, "
                        "a `gym:` task's colon as `_`).")
    try:
        ns = parser.parse_args(list(argv))
    except Exception as e:
        message = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        raise UserError(f"bench: {message}") from None
    out = ns.pop("out")
    cfg = bench.BenchConfig(**ns.as_dict())
    check_task(cfg.task, "bench")
    for key in ("num_envs", "scaling"):
        if any(n < 1 for n in getattr(cfg, key)):
            raise UserError(f"bench: {key}={getattr(cfg, key)} is invalid; allowed: integers >= 1")
    if cfg.repeats < 0 or cfg.iterations < 0 or cfg.warmup < 0:
        raise UserError("bench: repeats, iterations and warmup must be >= 0")
    return cfg, out


def cmd_tasks(argv: Sequence[str]) -> int:
    from syncfree.envs.tasks import TASKS

    argparse.ArgumentParser(prog="syncfree tasks", description="List the built-in tasks.").parse_args(argv)
    width = max(map(len, TASKS))
    for task in TASKS.values():
        print(f"{task.name:<{width}}  {task.description}")
    return 0


def cmd_doctor(argv: Sequence[str]) -> int:
    from syncfree import doctor
    from syncfree.config import validate
    from syncfree.core.switches import PerfConfig
    from syncfree.envs.tasks import check_task
    from syncfree.presets import preset

    args = doctor_arguments(argv)
    budget = doctor.parse_budget(args.budget)
    perf = doctor.with_switches(PerfConfig.preset(args.perf), args.switch)
    if args.train:
        check_task(args.task)
        cfg = preset(args.task)
        cfg.perf, cfg.device = perf, args.device
        cfg.env.num_envs = args.num_envs or cfg.env.num_envs
        cfg.log.tensorboard = False
        report = doctor.examine_training(validate(cfg), max(args.warmup or 1, 1),
                                         target=f"train {args.task} ({args.perf} switches)")
    else:
        if args.task:
            check_task(args.task)
            env = doctor.task_env(args.task, args.num_envs, perf, args.device)
            name = f"{args.task} env ({args.perf} switches)"
        else:
            env, name = doctor.as_vec_env(doctor.load_factory(args.env)), args.env
        warmup = 8 if args.warmup is None else args.warmup
        report = doctor.examine_env(env, args.steps, warmup, target=name)
    print(doctor.write_json(report) if args.json else doctor.table(report, args.top))
    exceeded = doctor.over_budget(report, budget)
    for line in exceeded:
        print(f"syncfree doctor: over budget: {line}", file=sys.stderr)
    return 1 if exceeded else 0


def doctor_arguments(argv: Sequence[str]) -> argparse.Namespace:
    """`syncfree doctor`'s arguments, checked (one line naming the culprit)."""
    parser = argparse.ArgumentParser(
        prog="syncfree doctor", description="Run an env (or, with `train`, a training iteration) for a few warm-up "
        "steps and a measured window, and report its host syncs, new tensor storages and dispatched ops per phase "
        "and per source line (file:line), worst first.")
    parser.add_argument("train", nargs="?", choices=["train"], help="examine the trainer's whole loop on --task")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--task", help="a built-in task or gym:<id>")
    target.add_argument("--env", help="module:factory returning a syncfree VecEnv or an rsl_rl VecEnv")
    parser.add_argument("--perf", choices=("optimized", "baseline"), default="optimized",
                        help="the switches' preset (the env-side switches act on g1-track's env)")
    parser.add_argument("--switch", action="append", default=[], metavar="NAME=VALUE",
                        help="set one switch after the preset (repeatable), e.g. --switch fast_history=false")
    parser.add_argument("--num-envs", type=int, default=0, help="envs (default: the task preset's)")
    parser.add_argument("--steps", type=int, default=32, help="measured env steps (env targets)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="env steps (env targets, default 8) or iterations (train, default 1) run first")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--top", type=int, default=15, help="source lines to list")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--budget", default="", help="e.g. syncs=0,allocs=20: exit 1 when a per-step count "
                        "exceeds its bound")
    args = parser.parse_args(argv)
    if args.steps < 1 or (args.warmup or 0) < 0 or args.num_envs < 0:
        raise UserError("doctor: --steps must be >= 1, --warmup and --num-envs >= 0")
    if args.train and not args.task:
        raise UserError("doctor: train needs --task")
    return args


def cmd_switches(argv: Sequence[str]) -> int:
    import docstring_parser
    import torch

    from syncfree.algo.scope import switch_scope
    from syncfree.config import validate
    from syncfree.core.device import resolve_device
    from syncfree.core.switches import PerfConfig
    from syncfree.envs.tasks import check_task
    from syncfree.presets import preset

    parser = argparse.ArgumentParser(
        prog="syncfree switches", description="List the performance switches (set them with --perf.NAME); with "
        "--task, mark which act on that task's preset and which change nothing there, and why.")
    parser.add_argument("--task", help="a built-in task: mark each switch live or inert on its preset")
    parser.add_argument("--perf.compile", dest="compile", choices=("off", "hot", "step"),
                        help="with --task: the compile mode to judge under (default: the preset's)")
    parser.add_argument("--device", help="with --task: the device to judge for (cpu, cuda; default: the preset's)")
    args = parser.parse_args(argv)
    if (args.compile or args.device) and not args.task:
        raise UserError("switches: --perf.compile and --device need --task")
    docs = {p.arg_name: p.description for p in docstring_parser.parse_from_object(PerfConfig).params}
    inert: dict[str, str] | None = None
    if args.task:
        check_task(args.task)
        cfg = preset(args.task)
        cfg.perf.compile = args.compile or cfg.perf.compile
        cfg.device = args.device or cfg.device
        cfg = validate(cfg)
        # judged for the device asked for, present here or not; else where the preset would train
        device = torch.device(args.device) if args.device else resolve_device(cfg.device)
        inert = cfg.perf.inert_switches(switch_scope(cfg, device))
        print(f"{args.task} (perf.compile={cfg.perf.compile}, device={device}): "
              f"{len(PerfConfig.switches()) - len(inert)} switches act, {len(inert)} change nothing\n")
    for f in PerfConfig.switches():
        mark = ""
        if inert is not None:
            mark = f"  INERT: {inert[f.name]}" if f.name in inert else "  live"
        kind = " (a check, not an optimization)" if f.metadata["check"] else ""
        print(f"{f.name}: baseline={f.metadata['baseline']} optimized={f.metadata['optimized']}{kind}  "
              f"[{f.metadata['seed']}]{mark}\n"
              f"    {' '.join((docs.get(f.name) or '').split())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
