"""Per-iteration metrics: JSONL always, TensorBoard and Weights & Biases on request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from syncfree.errors import UserError


class RunLogger:
    def __init__(self, run_dir: Path, tensorboard: bool = False, wandb: bool = False,
                 config: dict[str, Any] | None = None) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "metrics.jsonl"
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 - closed in close()
        self._tb = None
        self._wandb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise UserError("log.tensorboard: the tensorboard package is not installed "
                                "(pip install 'syncfree[tensorboard]')") from None
            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError:
                raise UserError("log.wandb: the wandb package is not installed (pip install 'syncfree[wandb]')") from None
            self._wandb = wandb_module.init(project="syncfree", name=run_dir.name, config=config, dir=str(run_dir))

    def log(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        step = record["iteration"]
        scalars = {k: v for k, v in record.items() if isinstance(v, int | float) and k != "iteration"}
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
