"""Command line: `syncfree train | tune | eval | play | export | plot | bench | doctor | tasks | switches`: parsing and
dispatch (each command's work is in the module it names)."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

import syncfree
from syncfree.core.imports import TRUST, from_command_line, user_names
from syncfree.errors import INTERRUPTED, DistributedError, UserError, out_of_memory, stop_signals


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("OpenGL").setLevel(logging.WARNING)  # PyOpenGL (rendering) reports its optional modules
    if argv[:1] == ["--version"]:
        print(f"syncfree {syncfree.__version__}")
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        width = max(map(len, COMMANDS))
        print(f"usage: syncfree {{{','.join(COMMANDS)}}} [--help]\n       syncfree --version\n\n"
              + "\n".join(f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()))
        return 0
    if argv[0] not in COMMANDS:
        print(f"syncfree: unknown command {argv[0]!r}; choose from {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    # until training installs its own handlers, a signal stops start-up quietly (signals reach the main thread only)
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, interrupt) for signum in stop_signals()
                if on_main_thread}
    command = COMMANDS[argv[0]][0]
    try:
        with user_names(from_command_line(argv[1:])):  # a file's code runs only when this command line names it
            return command(argv[1:])
    except UserError as e:
        for line in str(e).splitlines() or [""]:  # a file with several mistakes: one line each
            print(f"syncfree: error: {line}", file=sys.stderr)
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
    """The `syncfree` command: `main`, then exit with its code, output flushed and the exit handlers libraries
    registered (W&B, multiprocessing) run, without tearing down every module the process imported (torch's take
    0.75 s here). After an interrupt the process ends at once, without the exit handlers: a signal that lands while
    torch is being imported leaves modules half set up, whose handlers would print their diagnostics or die on the
    way out. Output piped into a reader that closes early (`syncfree switches | head`) ends the command quietly."""
    try:
        code = main()
    except BrokenPipeError:
        code = 1
    logging.shutdown()
    if code != INTERRUPTED:
        # what the interpreter's own exit does, in its order: the threading module's exit callbacks (which tell
        # thread pools, such as the compiler's, to stop), then a join of the non-daemon threads, then atexit
        threading._shutdown()  # type: ignore[attr-defined]  # private: the interpreter's own call at exit
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError):  # nobody reads it any more
            stream.flush()
    os._exit(code)


def interrupt(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C, SIGTERM (from `timeout`, SLURM, Kubernetes) or SIGHUP outside the training loop: there is nothing to
    save yet, so the process ends at once, quietly. (A KeyboardInterrupt raised here could land inside an import of
    torch or NumPy, which then fail later with unrelated errors.)"""
    with contextlib.suppress(OSError):  # a hung-up terminal takes no more lines
        os.write(2, b"syncfree: interrupted\n")
    os._exit(INTERRUPTED)


def cmd_train(argv: Sequence[str]) -> int:
    from syncfree.train import distributed
    from syncfree.train.arguments import parse_train_config
    from syncfree.train.session import train

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


def cmd_tune(argv: Sequence[str]) -> int:
    from syncfree import tuning

    return tuning.main(argv)


def checkpoint_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The parser of a command that reads a checkpoint: the checkpoint first, then `--device`, and what allows the
    code the checkpoint names (`main` reads them)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("checkpoint", help="checkpoint file (e.g. runs/<run>/latest.pt)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default cpu)")
    parser.add_argument("--task", help="the checkpoint's task, when it is your code (module:factory, "
                        "gym:<module>:<id>): naming it allows its import")
    parser.add_argument(TRUST, action="store_true", help="import the code the checkpoint names without naming it")
    return parser


def cmd_eval(argv: Sequence[str]) -> int:
    from syncfree.algo import algorithm_for
    from syncfree.train.evaluate import evaluate_task, load_policy

    parser = checkpoint_parser("syncfree eval", "Run a checkpoint's deterministic policy (or, with --sample, its "
                               "sampled actions) on fresh envs, each's first episode, and print the mean return.")
    parser.add_argument("--env.num_envs", "--num_envs", dest="num_envs", type=int, default=20, help="envs (each plays one episode; default 20; a "
                        "multi-agent task: simulations, every agent's first episode)")
    parser.add_argument("--seed", type=int, default=12345, help="environment seed (default 12345)")
    parser.add_argument("--sample", action="store_true", help="act with actions drawn from the policy's "
                        "distribution, as in training, instead of the most likely ones (draws seeded with --seed)")
    args = parser.parse_args(argv)
    if args.num_envs < 1:
        raise UserError(f"--env.num_envs={args.num_envs} is invalid; allowed: an integer >= 1")
    loaded = load_policy(args.checkpoint, args.device)
    returns = evaluate_task(loaded.cfg, loaded.policy, args.num_envs, loaded.device, args.seed, not args.sample,
                            loaded)
    how = "deterministic actions"
    if args.sample:
        how = "sampled actions" if algorithm_for(loaded.cfg).samples_actions else \
            f"deterministic actions ({loaded.cfg.algorithm}'s actor draws none: --sample changes nothing)"
    print(f"{loaded.cfg.task}: mean return {returns.mean():.2f} ± {returns.std():.2f} over the first episodes of "
          f"{loaded.cfg.env.describe(len(returns))}, {how} (min "
          f"{returns.min():.2f}, max {returns.max():.2f}; checkpoint at iteration {loaded.iteration})")
    return 0


def cmd_play(argv: Sequence[str]) -> int:
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")  # read by renderers when they make their OpenGL context
    from syncfree import play

    args = play.parse_arguments(checkpoint_parser("syncfree play", play.DESCRIPTION), argv)
    print(play.record(args.checkpoint, args.video or Path(args.checkpoint).parent / "play.mp4", args.steps, args.fps,
                      args.width, args.height, args.device, args.seed))
    return 0


def cmd_export(argv: Sequence[str]) -> int:
    from syncfree.export import FORMATS, export_checkpoint

    parser = checkpoint_parser("syncfree export", "Write a checkpoint's deterministic actor, observation "
                               "normalizer included, as ONNX graphs with a JSON sidecar.")
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
    print(f"wrote {plot(args.runs, args.out or args.runs[0] / 'curves.png', args.metrics, args.title)}")
    return 0


def cmd_bench(argv: Sequence[str]) -> int:
    from syncfree import bench
    from syncfree.bench import report
    from syncfree.outputs import check_output_dir, task_file_name

    cfg, out = bench.parse_arguments(argv)
    if out:
        check_output_dir(out, "bench: --out")  # before minutes of timing
    result = bench.run(cfg)
    device = result["machine"]["device"].replace(":", "")
    out_dir = Path(out or f"benchmarks/results/{task_file_name(cfg.task.replace(':', '_'))}-{cfg.profile}-{device}")
    for path in report.write(result, out_dir):
        logging.getLogger("syncfree").info("wrote %s", path)
    print(report.markdown(result))
    return 0


def cmd_tasks(argv: Sequence[str]) -> int:
    from syncfree.tasks import listing

    argparse.ArgumentParser(prog="syncfree tasks", description="List the tasks.").parse_args(argv)
    rows = listing()
    width = max(len(name) for name, _ in rows)
    for name, description in rows:
        print(f"{name:<{width}}  {description}")
    return 0


def cmd_doctor(argv: Sequence[str]) -> int:
    from syncfree import doctor

    return doctor.run(doctor.parse_arguments(argv))


def cmd_switches(argv: Sequence[str]) -> int:
    from syncfree.switches import listing

    parser = argparse.ArgumentParser(
        prog="syncfree switches", description="List the performance switches (set them with --perf.NAME); with "
        "--task, mark which act on that task's preset and which change nothing there, and why.")
    parser.add_argument("--task", help="a task: mark each switch live or inert on its preset")
    parser.add_argument("--perf.compile", dest="compile", choices=("off", "auto", "hot", "step"),
                        help="with --task: the compile mode to judge under (default: the preset's)")
    parser.add_argument("--device", help="with --task: the device to judge for (cpu, cuda; default: the preset's)")
    parser.add_argument("--algorithm", help="with --task: judge for this algorithm (default: the task's)")
    args = parser.parse_args(argv)
    if (args.compile or args.device or args.algorithm) and not args.task:
        raise UserError("switches: --perf.compile, --device and --algorithm need --task")
    print(listing(args.task, args.compile, args.device, args.algorithm))
    return 0


COMMANDS: dict[str, tuple[Callable[[Sequence[str]], int], str]] = {
    "train": (cmd_train, "train a task with its algorithm or --algorithm's (default: cartpole by PPO, on CPU unless CUDA "
                         "is available)"),
    "tune": (cmd_tune, "search a task's settings with Optuna: trials of training runs, best.yaml and plots (docs/tune.md)"),
    "eval": (cmd_eval, "run a checkpoint's deterministic policy on N fresh envs and print the mean return"),
    "play": (cmd_play, "record a checkpoint's policy acting in one env as a video (MP4 or GIF)"),
    "export": (cmd_export, "write a checkpoint's deterministic actor as ONNX graphs (normalizer included)"),
    "plot": (cmd_plot, "draw runs' learning curves (seeds of one config as mean and band) to a PNG"),
    "bench": (cmd_bench, "time, count and compare configurations of the perf switches"),
    "doctor": (cmd_doctor, "find the host syncs, allocations and ops of an env or a training loop, by source line"),
    "tasks": (cmd_tasks, "list the tasks"),
    "switches": (cmd_switches, "list the performance switches with their baseline and optimized values"),
}
"""Each command: the function that runs it, and its line in `syncfree --help`."""


if __name__ == "__main__":
    sys.exit(main())
