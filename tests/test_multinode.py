"""Two nodes on one machine, as a cluster runs them: one `torchrun --nnodes 2` launcher per node, meeting at a c10d
rendezvous on 127.0.0.1, train one run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node(port: int, run_dir: Path, iterations: int, log: Path, *extra: str) -> subprocess.Popen:
    """One node's launcher, in a process group of its own; `extra`: more `syncfree train` options."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
           "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", f"syncfree-{port}",
           "-m", "syncfree", "train", "--task", "pendulum", "--iterations", str(iterations), "--env.num_envs", "16",
           "--ppo.steps_per_env", "8", "--save_every", "1", "--distributed.timeout", "30",
           "--log.dir", str(run_dir.parent), "--log.run_name", run_dir.name, "--log.progress", "false", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("w"), env=env, start_new_session=True)


def records(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


@pytest.mark.parametrize("kind", ["mlp", "recurrent"])
def test_two_nodes_train_one_run(tmp_path: Path, kind: str) -> None:
    """Both algorithms: PPO on flat rollouts, and on BPTT segments (`policy.kind=recurrent`)."""
    port, run = free_port(), tmp_path / "run"
    nodes = [node(port, run, 2, tmp_path / f"node{i}.log", "--policy.kind", kind) for i in range(2)]
    try:
        codes = [n.wait(timeout=240) for n in nodes]
    finally:
        for n in nodes:
            if n.poll() is None:
                os.killpg(n.pid, signal.SIGKILL)
    assert codes == [0, 0], "\n".join(p.read_text()[-1500:] for p in tmp_path.glob("node*.log"))
    logs = [(tmp_path / f"node{i}.log").read_text() for i in range(2)]
    assert sum("training pendulum with " in text for text in logs) == 1  # rank 0 reports, on whichever node
    assert any("2 ranks x 16 envs x 8 steps" in text for text in logs)
    assert [r["env_steps"] for r in records(run)] == [256, 512]  # both nodes' envs count
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node0.log", "node1.log", "run"]


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (torchrun starts its workers in sessions of their own)."""
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [pid, *(p for child in children for p in process_tree(int(child)))]


def test_a_lost_node_stops_the_other_at_once_with_one_line(tmp_path: Path) -> None:
    """A node lost mid-run (its launcher and its worker killed, as when the machine dies): the other node's rank
    stops within seconds with syncfree's one line naming the failed collective, and the last checkpoint loads."""
    import time

    from syncfree.train import checkpoint

    port, run = free_port(), tmp_path / "run"
    nodes = [node(port, run, 400, tmp_path / f"node{i}.log") for i in range(2)]
    try:
        deadline = time.monotonic() + 180
        while len(records(run)) < 3 and time.monotonic() < deadline and all(n.poll() is None for n in nodes):
            time.sleep(0.2)
        assert len(records(run)) >= 3, "\n".join(p.read_text()[-1500:] for p in tmp_path.glob("node*.log"))
        for pid in process_tree(nodes[1].pid):
            os.kill(pid, signal.SIGKILL)
        lost = time.monotonic()
        code = nodes[0].wait(timeout=60)
        seconds = time.monotonic() - lost
    finally:
        for n in nodes:
            if n.poll() is None:
                os.killpg(n.pid, signal.SIGKILL)
    text = (tmp_path / "node0.log").read_text()
    lines = [line for line in text.splitlines() if line.startswith("syncfree: error:")]
    assert code != 0 and seconds < 10, (code, seconds, text[-1500:])
    assert len(lines) == 1 and "a peer process exited" in lines[0], text[-1500:]
    assert checkpoint.load(run / "latest.pt")["iteration"] >= 1
