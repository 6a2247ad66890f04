"""The shared training loop (``arvis.training.loop``): a run interrupted after a checkpoint and resumed ends with
exactly the weights of an uninterrupted run, data RNG, torch generators and dropout included."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
import torch

from arvis.training.common import EMA
from arvis.training.loop import LoopSettings, TrainingLoop


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    steps: int = 6
    lr: float = 1e-2
    warmup: int = 2
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    log_every: int = 2
    eval_every: int = 3
    ckpt_every: int = 2


class Stop(Exception):
    pass


def run(tmp_path, history: str, stop_after_save: bool = False) -> tuple[torch.nn.Module, TrainingLoop]:
    cfg = ToyConfig()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    ema = EMA(params, 0.9)
    rng, gen = np.random.default_rng(1), torch.Generator().manual_seed(2)

    def loss_fn(step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        x = torch.from_numpy(rng.standard_normal((5, 4)).astype(np.float32)) + torch.rand(5, 4, generator=gen)
        return model(x).pow(2).mean(), {}

    loop = TrainingLoop("toy", LoopSettings.of(cfg), cfg, ("steps",), tmp_path / "checkpoint.pt", model, opt, params,
                        ema, lambda: params, rng, loss_fn, logging.getLogger("toy"), history=history,
                        eval_fn=lambda step: {"norm": float(sum(p.norm() for p in params))}, generators=[gen])
    if stop_after_save:
        save = loop.save

        def save_then_stop() -> None:
            save()
            raise Stop

        loop.save = save_then_stop  # type: ignore[method-assign]
    loop.resume()
    torch.manual_seed(3)  # the trainer's seeding of a new run; a resumed run continues the saved streams instead
    loop.run()
    return model, loop


@pytest.mark.parametrize("history", ["means", "loss"])
def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path, history):
    whole, whole_loop = run(tmp_path / "whole", history)
    with pytest.raises(Stop):
        run(tmp_path / "cut", history, stop_after_save=True)  # killed right after the step-2 checkpoint
    resumed, resumed_loop = run(tmp_path / "cut", history)
    assert resumed_loop.step == whole_loop.step == 6
    for a, b in zip(whole.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert all(torch.equal(a, b) for a, b in zip(whole_loop.ema.shadow, resumed_loop.ema.shadow, strict=True))
    strip = [[{k: v for k, v in e.items() if k != "sec"} for e in loop.records] for loop in (whole_loop, resumed_loop)]
    assert strip[0] == strip[1]
    evals = [e for e in strip[0] if "eval" in e or "norm" in e]
    # "means": evaluations are entries of their own (steps 3 and 6); "loss": merged into the logging steps' (6 only)
    assert [e["step"] for e in evals] == ([3, 6] if history == "means" else [6])
