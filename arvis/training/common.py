"""Small helpers shared by arvis training scripts: atomic checkpoints, schedules, logging, EMA."""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import torch

from arvis.utils.files import atomic_directory, atomic_path

T = TypeVar("T")

__all__ = [
    "EMA",
    "config_from_record",
    "atomic_torch_save",
    "atomic_write_text",
    "cosine_lr",
    "load_checkpoint",
    "export_note",
    "recorded_command",
    "export_only_steps",
    "reseed_rows",
    "LogWindow",
    "restore_training_state",
    "setup_logging",
    "shipped_record",
    "warm_start_commands",
]


def _atomic(path: str | os.PathLike, write) -> Path:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        write(f)
    return Path(path)


def training_command(module: str, argv: list[str] | None) -> str:
    """The command line that ran ``python -m arvis.training.<module>`` with ``argv`` (default ``sys.argv[1:]``), as
    model cards and metrics record it: absolute paths are rewritten relative to the working directory, so that
    records never carry a machine's absolute paths."""
    args = sys.argv[1:] if argv is None else argv
    return portable_command(f"python -m arvis.training.{module} " + " ".join(shlex.quote(a) for a in args))


def command_option(command: str, name: str, default: str) -> str:
    """The value of option ``name`` in a recorded command line (``default`` when it was not given)."""
    argv = shlex.split(command)
    return argv[argv.index(name) + 1] if name in argv else default


def portable_command(command: str, root: Path | None = None) -> str:
    """``command`` with absolute paths rewritten relative to ``root`` (default: the working directory)."""
    base = Path(root or Path.cwd())
    return " ".join(shlex.quote(os.path.relpath(a, base)) if os.path.isabs(a) else shlex.quote(a)
                    for a in shlex.split(command))


def warm_start_commands(start: str | os.PathLike, record: str = "training_metrics.json") -> list[str]:
    """The commands that made the folder a run warm-starts from (``--init-from``), read from its ``record``: the
    commands of the folder it started from in turn, then its own (empty without such a record)."""
    path = Path(start) / record if start else None
    if path is None or not path.is_file():
        return []
    earlier = json.loads(path.read_text())
    return [*earlier.get("init_commands", []), portable_command(earlier["command"])] if "command" in earlier else []


def shipped_record(metrics: dict[str, Any]) -> dict[str, Any]:
    """A stage's ``training_metrics.json`` as an assembled folder keeps it: its command without this machine's
    absolute paths and, for a warm start (``config.init_from``), the commands that trained its start
    (``init_commands``) and the start's folder named as the command names it."""
    metrics["command"] = portable_command(metrics["command"])  # runs that predate portable records
    start = metrics.get("config", {}).get("init_from") or ""
    if earlier := warm_start_commands(start):
        metrics["init_commands"] = earlier
    if os.path.isabs(start):
        metrics["config"]["init_from"] = portable_command(start)
    return metrics


def export_modules(out: Path, modules: dict[str, Any], metrics: dict[str, Any]) -> None:
    """Write each module (``None`` skipped) as an fp16 ``save_pretrained`` folder ``out/<name>`` — each replaced
    whole, never half-written — and ``out/training_metrics.json``."""
    for name, module in modules.items():
        if module is not None:
            with atomic_directory(out / name) as staged:
                module.half().save_pretrained(staged, safe_serialization=True)
    atomic_write_text(out / "training_metrics.json", json.dumps(metrics, indent=2) + "\n")


def config_from_record(cls: type[T], config: dict[str, Any]) -> T:
    """The training config dataclass ``cls`` a record stored with ``dataclasses.asdict`` (JSON lists back to the
    tuples the configs hold), so a model card can be rebuilt from a shipped folder's record without retraining."""
    return cls(**{key: tuple(value) if isinstance(value, list) else value for key, value in config.items()})


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save(obj)`` to a temp file in the same directory, then ``os.replace`` onto ``path``."""
    return _atomic(path, lambda f: torch.save(obj, f))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return _atomic(path, lambda f: f.write(text.encode("utf-8")))


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load a training checkpoint written by :func:`atomic_torch_save` (tensors, numbers, strings, dicts only)."""
    return torch.load(path, map_location="cpu", weights_only=True)


def restore_training_state(ckpt_path: Path, cfg: Any, resumable: Iterable[str], model: torch.nn.Module,
                           opt: torch.optim.Optimizer, ema: EMA, rng: Any, log: logging.Logger
                           ) -> dict[str, Any] | None:
    """Resume a run from ``ckpt_path`` if it exists: the config must match except the ``resumable`` fields
    (else ``ValueError``); model, optimizer, EMA and the numpy ``rng`` are restored in place. Returns the
    checkpoint (for ``step``, ``elapsed``, ``history`` and script-specific entries) or ``None`` for a new run."""
    if not ckpt_path.exists():
        return None
    import dataclasses

    ck = load_checkpoint(ckpt_path)
    if "config" not in ck:  # the format of the trainers' own loops before arvis.training.loop
        raise ValueError(f"checkpoint {ckpt_path} predates the shared training loop and cannot be resumed; "
                         f"use another --scratch directory")
    saved = json.loads(ck["config"])
    now = json.loads(json.dumps(dataclasses.asdict(cfg)))
    mismatched = sorted(k for k in now if k not in set(resumable) and saved.get(k) != now[k])
    if mismatched:
        raise ValueError(f"checkpoint {ckpt_path} was made with a different config ({mismatched}); "
                         f"use another --scratch directory")
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    ema.shadow = [t.clone() for t in ck["ema"]]
    rng.bit_generator.state = json.loads(ck["rng_state"])
    settings = ", ".join(f"{k}={now[k]}" + (f" (was {saved.get(k)})" if saved.get(k) != now[k] else "")
                         for k in sorted(resumable) if k in now)
    log.info("resumed from %s at step %d (%.0f s elapsed); %s", ckpt_path, int(ck["step"]), float(ck["elapsed"]),
             settings)
    return ck


def export_only_steps(scratch: Path) -> int:
    """The step of the checkpoint in ``scratch`` that ``--export-only`` exports (ValueError when there is none)."""
    ckpt = scratch / "checkpoint.pt"
    if not ckpt.exists():
        raise ValueError(f"--export-only needs a checkpoint at {ckpt}")
    return int(load_checkpoint(ckpt)["step"])


def recorded_command(summary_command: str, out: Path) -> str:
    """The command that trained a run: the one stored with its checkpoint, else (a checkpoint that predates
    stored commands) the one in the previous export's ``training_metrics.json`` or ``metrics.json``."""
    for previous in (out / "training_metrics.json", out / "metrics.json"):
        if not summary_command and previous.is_file():
            return str(json.loads(previous.read_text()).get("command", ""))
    return summary_command


def ship_training_metrics(component: str | os.PathLike, dest: Path) -> bool:
    """Copy the ``training_metrics.json`` a trainer wrote beside an exported ``component`` folder to ``dest`` (its
    command with portable paths), so that a shipped folder keeps the record its model card is built from; False
    when the export has none."""
    source = Path(component).parent / "training_metrics.json"
    if not source.is_file():
        return False
    record = json.loads(source.read_text())
    record["command"] = portable_command(record.get("command", ""))  # runs that predate portable records
    atomic_write_text(dest, json.dumps(record, indent=2) + "\n")
    return True


def export_note(metrics: dict[str, Any], done: str = "Exported and evaluated") -> str:
    """A model-card line naming the export command when it differs from the training command."""
    if metrics.get("export_command") and metrics["export_command"] != metrics["command"]:
        return f"{done} by `{metrics['export_command']}`.\n"
    return ""


def cosine_lr(step: int, total: int, peak: float, warmup: int, min_ratio: float) -> float:
    """Linear warm-up to ``peak`` over ``warmup`` steps, then cosine decay to ``peak * min_ratio`` at ``total``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * t)))


class EMA:
    """Exponential moving average of a set of floating-point tensors (parameters and buffers)."""

    def __init__(self, tensors: Iterable[torch.Tensor], decay: float) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        self.decay = decay
        self.shadow = [t.detach().clone() for t in tensors]

    @torch.no_grad()
    def update(self, tensors: Iterable[torch.Tensor]) -> None:
        """``shadow <- decay * shadow + (1 - decay) * tensor``."""
        torch._foreach_lerp_(self.shadow, [t.detach() for t in tensors], 1.0 - self.decay)

    @torch.no_grad()
    def copy_to(self, tensors: Iterable[torch.Tensor]) -> None:
        """Write the averages into ``tensors`` (same order as construction)."""
        for dst, src in zip(tensors, self.shadow, strict=True):
            dst.copy_(src)


@torch.no_grad()
def reseed_rows(weight: torch.Tensor, rows: torch.Tensor, values: torch.Tensor, opt: torch.optim.Optimizer,
                ema: EMA | None = None, ema_params: Iterable[torch.Tensor] | None = None) -> int:
    """``weight[rows] <- values`` (dead codebook entries restarted), with no stale state left behind: the
    rows' Adam moments are zeroed and, with ``ema`` (built over ``ema_params``), their EMA copies replaced.
    Returns how many rows were reseeded."""
    weight[rows] = values.to(weight.dtype)
    state = opt.state.get(weight, {})
    for key in ("exp_avg", "exp_avg_sq"):
        if key in state:
            state[key][rows] = 0
    if ema is not None:
        for shadow, param in zip(ema.shadow, ema_params if ema_params is not None else (), strict=True):
            if param is weight:
                shadow[rows] = weight[rows]
    return int(rows.numel())


class LogWindow:
    """Per-step training statistics summed since the last log line, averaged into one history entry."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.steps = 0

    def add(self, values: dict[str, float | torch.Tensor]) -> None:
        """Add one step's statistics (tensors are read once, here: a host sync per step)."""
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + float(value.detach() if isinstance(value, torch.Tensor)
                                                             else value)
        self.steps += 1

    def flush(self, **extra: Any) -> dict[str, Any]:
        """The means since the last flush followed by ``extra`` (step, lr, ...); starts a new window."""
        entry: dict[str, Any] = {key: total / self.steps for key, total in self.sums.items()}
        entry.update(extra)
        self.sums, self.steps = {}, 0
        return entry


def setup_logging(log_file: str | os.PathLike | None, name: str) -> logging.Logger:
    """A logger writing ``time level message`` lines to stderr and, if given, appending to ``log_file``."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    logger.handlers.clear()
    logger.propagate = False
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file))
    for h in handlers:
        h.setFormatter(fmt)
        logger.addHandler(h)
    return logger


def dumps(obj: Any) -> str:
    """Compact JSON for log lines (floats to 5 significant digits)."""
    def fix(v: Any) -> Any:
        if isinstance(v, float):
            return float(f"{v:.5g}")
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [fix(x) for x in v]
        return v

    return json.dumps(fix(obj))
