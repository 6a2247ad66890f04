"""The training loop every arvis trainer shares; a trainer supplies only what differs (model, batches, loss, eval).

One step: set the warm-up + cosine learning rate, ``loss_fn(step)``, backward, gradient clipping, optimizer step,
EMA update. Every ``log_every`` steps a history entry, every ``eval_every`` an evaluation, every
``checkpoint_every`` (and at the end) an atomic checkpoint. A rerun with the same checkpoint path resumes where it
stopped — with the data RNG, the trainer's torch generators and torch's global RNG restored, so an interrupted run
ends with the same weights as an uninterrupted one. Wall-clock time counts training steps only (not evaluations
or checkpoint writes).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from arvis.training.common import EMA, LogWindow, atomic_torch_save, cosine_lr, dumps, restore_training_state

__all__ = ["LoopSettings", "TrainingLoop"]

Stats = dict[str, "float | torch.Tensor"]


@dataclass(frozen=True)
class LoopSettings:
    """The numbers of a run's loop (a trainer maps its config's fields onto these)."""

    steps: int
    lr: float
    warmup: int
    min_lr_ratio: float
    grad_clip: float | None  # None: no clipping (and no ``grad_norm`` in the history)
    log_every: int
    eval_every: int
    checkpoint_every: int

    @classmethod
    def of(cls, cfg: Any, **given: Any) -> LoopSettings:
        """The settings of a trainer config that names them as the trainers do (``ckpt_every`` or
        ``checkpoint_every``); ``given`` supplies or replaces fields (e.g. a fixed ``grad_clip``)."""
        names = {f.name: f.name for f in dataclasses.fields(cls)}
        names["checkpoint_every"] = "checkpoint_every" if hasattr(cfg, "checkpoint_every") else "ckpt_every"
        return cls(**{name: given[name] if name in given else getattr(cfg, source) for name, source in names.items()})


@dataclass
class TrainingLoop:
    """A resumable training run. Call :meth:`resume` where the trainer needs to know whether it continues a run
    (it returns the checkpoint, with the trainer's own entries), then :meth:`run`.

    ``history`` decides the form of the history entries, as the shipped models' records have them:
    ``"means"``: the mean of every statistic ``loss_fn`` returns (``loss`` first, ``grad_norm`` last) since the last
    entry, then ``step``, ``lr``, ``log_extra()`` and ``sec``; an evaluation is an entry of its own,
    ``{"step", "eval": ...}``. ``"loss"``: ``step``, the mean ``loss``, ``lr``, the last ``grad_norm`` and ``sec``;
    an evaluation (on a logging step) is merged into that entry.
    """

    name: str
    settings: LoopSettings
    config: Any  # the run's dataclass config: stored with the checkpoint, compared on resume
    resumable: Sequence[str]  # config fields a resumed run may change
    checkpoint: Path
    model: torch.nn.Module  # what the checkpoint stores as "model"
    optimizer: torch.optim.Optimizer
    clipped: Sequence[torch.Tensor]  # the parameters whose gradient norm is clipped
    ema: EMA
    averaged: Callable[[], Sequence[torch.Tensor]]  # the tensors the EMA follows (called once per step)
    rng: np.random.Generator  # the data RNG (checkpointed)
    loss_fn: Callable[[int], tuple[torch.Tensor, Stats]]  # step -> (loss, statistics): draws the batch, forward
    log: logging.Logger
    history: Literal["means", "loss"] = "means"
    eval_fn: Callable[[int], dict[str, Any]] | None = None  # step -> figures (called every eval_every steps)
    after_update: Callable[[], None] | None = None  # after the optimizer step, before the EMA (e.g. clamping)
    after_step: Callable[[int], None] | None = None  # after a step is counted (e.g. codebook restarts)
    log_extra: Callable[[], dict[str, Any]] | None = None  # more fields of a "means" entry
    checkpoint_extra: Callable[[], dict[str, Any]] | None = None  # the trainer's own checkpoint entries
    generators: Sequence[torch.Generator] = ()  # the trainer's torch generators (checkpointed)
    step: int = 0
    elapsed: float = 0.0
    records: list[dict[str, Any]] = field(default_factory=list)
    _saved: dict[str, Any] | None = None

    def resume(self) -> dict[str, Any] | None:
        """Restore model, optimizer, EMA, data RNG, step, elapsed time and history from the checkpoint if there is
        one (its config must match but for ``resumable``); returns it, or None for a new run. The torch RNG
        states are restored by :meth:`run`, after the trainer's own seeding of a new run."""
        ck = restore_training_state(self.checkpoint, self.config, self.resumable, self.model, self.optimizer,
                                    self.ema, self.rng, self.log)
        if ck is not None:
            self.step, self.elapsed, self.records = int(ck["step"]), float(ck["elapsed"]), json.loads(ck["history"])
            self._saved = ck
        return ck

    def _restore_torch_rng(self) -> None:
        ck = self._saved
        if ck is None or "torch_rng_state" not in ck:  # a new run, or a checkpoint that predates these states
            return
        torch.set_rng_state(ck["torch_rng_state"])
        for generator, state in zip(self.generators, ck["generator_states"], strict=True):
            generator.set_state(state)

    def save(self) -> None:
        """Write the checkpoint atomically (never half-written: a killed run resumes from the previous one)."""
        atomic_torch_save({"config": json.dumps(dataclasses.asdict(self.config)), "model": self.model.state_dict(),
                           "optimizer": self.optimizer.state_dict(), "ema": self.ema.shadow, "step": self.step,
                           "elapsed": self.elapsed, "rng_state": json.dumps(self.rng.bit_generator.state),
                           "history": json.dumps(self.records), "torch_rng_state": torch.get_rng_state(),
                           "generator_states": [g.get_state() for g in self.generators],
                           **(self.checkpoint_extra() if self.checkpoint_extra else {})}, self.checkpoint)

    def run(self) -> list[dict[str, Any]]:
        """Train from the current step to ``settings.steps``; returns the history."""
        s = self.settings
        self._restore_torch_rng()
        window, losses, grad_norm = LogWindow(), [], None
        bar = tqdm(total=s.steps, initial=self.step, desc=self.name, unit="step", mininterval=30)
        t_last = time.time()
        while self.step < s.steps:
            lr = cosine_lr(self.step, s.steps, s.lr, s.warmup, s.min_lr_ratio)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            loss, stats = self.loss_fn(self.step)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if s.grad_clip is not None:
                grad_norm = torch.nn.utils.clip_grad_norm_(self.clipped, s.grad_clip)
            self.optimizer.step()
            if self.after_update is not None:
                self.after_update()
            self.ema.update(self.averaged())
            self.step += 1
            if self.history == "means":
                window.add({"loss": loss, **stats, **({"grad_norm": grad_norm} if grad_norm is not None else {})})
            else:
                losses.append(float(loss.detach()))
            now = time.time()
            self.elapsed += now - t_last
            t_last = now
            bar.update(1)
            if self.after_step is not None:
                self.after_step(self.step)
            last = self.step == s.steps
            evaluate = self.eval_fn is not None and (self.step % s.eval_every == 0 or last)
            if self.step % s.log_every == 0 or last:
                if self.history == "means":
                    entry = window.flush(step=self.step, lr=lr, **(self.log_extra() if self.log_extra else {}),
                                         sec=self.elapsed)
                else:
                    entry = {"step": self.step, "loss": float(np.mean(losses)), "lr": lr,
                             **({"grad_norm": float(grad_norm)} if grad_norm is not None else {}), "sec": self.elapsed}
                    losses = []
                    if evaluate:
                        entry.update(self.eval_fn(self.step))
                self.records.append(entry)
                self.log.info("train %s", dumps(entry))
            if evaluate and self.history == "means":
                figures = self.eval_fn(self.step)
                self.records.append({"step": self.step, "eval": figures})
                self.log.info("eval step %d: %s", self.step, dumps(figures))
            t_last = time.time()
            if self.step % s.checkpoint_every == 0 or last:
                self.save()
                t_last = time.time()
        bar.close()
        return self.records
