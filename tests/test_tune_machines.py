"""`syncfree tune` on several machines: two commands of one study on a real PostgreSQL server (started here, on a
free port, in a temporary folder) share its trials and agree on its best; a worker killed with kill -9 leaves its
trial failed and retried by the next command of the study, in a run folder of its own, with nothing finished lost."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

optuna = pytest.importorskip("optuna")

from optuna.trial import TrialState  # noqa: E402  (after the skip: Optuna is the `tune` extra)

from syncfree import cli  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--task", "cartpole", "--env.num_envs", "16", "--ppo.steps_per_env", "8", "--ppo.num_minibatches", "2",
        "--ppo.num_epochs", "1", "--env.max_episode_length", "40", "--callbacks.eval_envs", "4",
        "--perf.compile", "off", "--threads", "1", "--pruner", "none"]
"""Trials on 16 cartpoles, evaluated on 4 episodes of at most 40 steps."""
SPACE = {"ppo.learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
         "env.num_envs": {"type": "categorical", "choices": [16, 32]}}


def postgres_program(name: str) -> str | None:
    """A PostgreSQL server program: on PATH, or where Debian's packages put it (the newest version)."""
    found = shutil.which(name)
    if found:
        return found
    versions = glob.glob(f"/usr/lib/postgresql/*/bin/{name}")
    versions.sort(key=lambda path: int(re.sub(r"\D", "", Path(path).parts[-3]) or 0))
    return versions[-1] if versions else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server on 127.0.0.1 (trust authentication, no fsync), its URL; stopped and removed
    afterwards. As root, the server runs as the `postgres` user (initdb refuses root), which owns its folder."""
    initdb, pg_ctl = postgres_program("initdb"), postgres_program("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("needs a PostgreSQL server: initdb and pg_ctl not found on PATH or in /usr/lib/postgresql/*/bin "
                    "(apt-get install postgresql; CI installs it)")
    pytest.importorskip("psycopg", reason="needs the PostgreSQL driver: pip install 'psycopg[binary]'")
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="syncfree-pg-"))
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(folder)
            pytest.skip("running as root without a postgres user to run the server as")
        os.chown(folder, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", free_port()
    try:
        subprocess.run([*as_user, initdb, "-D", str(data), "-A", "trust", "-U", "tuner", "--no-sync"], check=True,
                       capture_output=True, timeout=60)
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-l", str(folder / "log"), "-w", "-t", "30", "-o",
                        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                       check=True, capture_output=True, timeout=60)
        yield f"postgresql://tuner@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True,
                           timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def tune(*options: str) -> subprocess.Popen[str]:
    """`syncfree tune` in a process of its own (a machine of the study), this test's environment inherited."""
    return subprocess.Popen([sys.executable, "-m", "syncfree", "tune", *TINY, *options], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def finished(process: subprocess.Popen[str], timeout: float = 120) -> tuple[str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    assert process.returncode == 0, err[-3000:]
    return out, err


def best_reported(out: str, study: str) -> int:
    """The trial at the top of the table the command prints at its end."""
    table = out.split(f"best trials of study {study}:\n")[-1].splitlines()
    assert table[0].split()[0] == "trial"
    return int(table[2].split()[0])


def ran(log: str) -> set[int]:
    """The trials a command's log says it finished."""
    return {int(number) for number in re.findall(r"^tune: trial (\d+): return ", log, flags=re.M)}


def load(name: str, storage: str) -> optuna.Study | None:
    with contextlib.suppress(Exception):  # not made yet
        return optuna.load_study(study_name=name, storage=storage)
    return None


def running(name: str, storage: str, after: int = 0) -> list[int]:
    """The trials numbered `after` or more that a worker runs now, its heartbeat started."""
    study = load(name, storage)
    trials = [] if study is None else study.get_trials(states=(TrialState.RUNNING,))
    return [t.number for t in trials if t.number >= after and "heartbeat" in t.user_attrs]


def wait_for(process: subprocess.Popen[str], condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.05)


@pytest.mark.slow  # a PostgreSQL server and a second process start: about 15 s on 2 cores
def test_two_machines_share_one_study_on_postgresql(postgres_url: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    study = "shared"
    command = ["--space", str(space), "--budget-seconds", "0.5", "--trials", "4", "--study", study, "--storage",
               postgres_url, "--heartbeat", "1", "--grace", "5"]
    other = tune(*command, "--dir", str(tmp_path / "b"))  # machine b, a process of its own
    try:
        wait_for(other, lambda: bool(running(study, postgres_url)))  # b's first trial is under way: a joins
        caplog.set_level("INFO", logger="syncfree")
        assert cli.main(["tune", *TINY, *command, "--dir", str(tmp_path / "a")]) == 0  # machine a, this process
        out_a, log_a = capsys.readouterr().out, "\n".join(caplog.messages)
    finally:
        out_b, log_b = finished(other)
    loaded = optuna.load_study(study_name=study, storage=postgres_url)
    # each machine asks while the study is short: at most one more than asked, and that one is a surplus, failed at
    # once without training; every other trial is there, finished
    everything = loaded.trials
    assert [t.number for t in everything] == list(range(len(everything)))
    trials = [t for t in everything if not t.user_attrs.get("surplus")]
    extra = [t for t in everything if t.user_attrs.get("surplus")]
    assert len(trials) == 4 and {t.state for t in trials} == {TrialState.COMPLETE}
    assert len(extra) <= 1 and all(t.state == TrialState.FAIL and "run_dir" not in t.user_attrs for t in extra)
    numbers = [t.number for t in trials]
    # trial numbers never collide: each trial ran on one machine, in a run folder there
    on_a, on_b = ran(log_a), ran(log_b)
    assert on_a and on_b and not on_a & on_b and on_a | on_b == set(numbers)
    for trial in trials:
        machine = "a" if trial.number in on_a else "b"
        run = Path(trial.user_attrs["run_dir"])
        assert run == tmp_path / machine / study / f"trial-{trial.number:04d}" and (run / "latest.pt").is_file()
    # each command ends when the study's trials have ended: both report its best, and write the same best.yaml
    best = loaded.best_trial.number
    assert best_reported(out_a, study) == best_reported(out_b, study) == best
    best_a, best_b = (yaml.safe_load((tmp_path / name / study / "best.yaml").read_text()) for name in ("a", "b"))
    assert best_a["ppo"] == best_b["ppo"]
    assert best_a["ppo"]["learning_rate"] == pytest.approx(loaded.best_params["ppo.learning_rate"])


@pytest.mark.slow  # a process starts, is killed, and its trial waits out the grace period: about 15 s
def test_a_killed_workers_trial_is_failed_and_retried_by_the_rerun_command(tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    storage = f"sqlite:///{tmp_path / 'killed' / 'study.db'}"
    # trials of 2 s: the stop below finds one running after the first, however fast the machine
    command = ["--space", str(space), "--budget-seconds", "2", "--trials", "3", "--study", "killed", "--dir",
               str(tmp_path), "--heartbeat", "1", "--grace", "3"]
    first = tune(*command)
    killed: list[int] = []

    def stopped_in_a_trial() -> bool:
        """Stopped (SIGSTOP) in a trial after its first, still running then: killed; else it goes on."""
        if running("killed", storage, after=1):
            first.send_signal(signal.SIGSTOP)
            killed[:] = running("killed", storage, after=1)
            if killed:
                return True
            first.send_signal(signal.SIGCONT)  # the trial ended meanwhile: the next one
        return False

    try:
        wait_for(first, stopped_in_a_trial)
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate()
    (number,) = killed
    before = load("killed", storage)
    assert before is not None
    done = [t.number for t in before.get_trials(states=(TrialState.COMPLETE,))]
    assert done and before.trials[number].state == TrialState.RUNNING  # left running by kill -9
    killed_run = tmp_path / "killed" / f"trial-{number:04d}"
    caplog.set_level("INFO", logger="syncfree")
    # the same command again: it finds the trial silent for 3 s, fails it and retries it with its settings
    assert cli.main(["tune", *TINY, *command]) == 0
    study = load("killed", storage)
    assert study is not None
    states = {t.number: t.state for t in study.trials}
    assert states[number] == TrialState.FAIL and all(states[n] == TrialState.COMPLETE for n in done)
    (retry,) = [t for t in study.trials if t.system_attrs.get("failed_trial") == number]
    # the killed trial's settings, as far as it had drawn them (a kill between two draws leaves the rest to the retry)
    drawn = study.trials[number].params
    assert retry.state == TrialState.COMPLETE and {name: retry.params[name] for name in drawn} == drawn
    assert set(retry.params) == set(study.trials[done[0]].params)
    assert f"tune: trial {retry.number} retries trial {number}, whose worker stopped (no heartbeat for 3 s)" \
        in caplog.text
    # the study holds the 3 trials asked: the killed one counts through its retry
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 3 and len(study.trials) == 4
    # the retry trains in a run folder of its own; the killed trial's stays as it was left (no checkpoint)
    retry_run = Path(retry.user_attrs["run_dir"])
    assert retry_run == tmp_path / "killed" / f"trial-{retry.number:04d}" and (retry_run / "latest.pt").is_file()
    assert study.trials[number].user_attrs.get("run_dir", str(killed_run)) == str(killed_run)
    assert not (killed_run / "latest.pt").exists()
    # nothing finished is lost: the first command's trials keep their runs and count
    assert all((tmp_path / "killed" / f"trial-{n:04d}" / "latest.pt").is_file() for n in done)
