#!/usr/bin/env python
"""Seconds per training step of the MAR presets (the VAE's and the four transformers'), without training them.

Each preset's real model and batch, one thread, one warm-up step then the mean of ``--steps`` timed steps
(optimizer step included); the VAE trains on real crops, the MAR presets on random latents of the VAE
preset's shape (the data does not change the cost). Prints one line per preset and the load average::

    python eval/mar_train_cost.py --steps 3
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import numpy as np
import torch

from arvis.training import train_mar, train_mar_vae
from arvis.training.train_vq import train_batch


def _timed(step, n: int) -> float:
    times = []
    for _ in range(n + 1):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return float(np.mean(times[1:]))  # the first step warms up


def _mar_step(c: train_mar.MARTrainConfig, t: torch.nn.Module, h: torch.nn.Module, opt: torch.optim.Optimizer,
              g: torch.Generator) -> None:
    tokens = torch.randn(c.batch_size, t.seq_len, t.token_embed_dim, generator=g)
    labels = torch.randint(0, t.num_classes, (c.batch_size,), generator=g)
    drop = torch.rand(c.batch_size, generator=g) < c.label_drop_prob
    loss = train_mar.mar_loss(t, h, tokens, labels, drop, g, c.diffusion_batch_mul)
    opt.zero_grad()
    loss.backward()
    opt.step()


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = train_mar_vae.PRESETS["vae"]
    vae = cfg.build().train()
    opt = torch.optim.AdamW(vae.parameters(), lr=1e-4)
    rng, g = np.random.default_rng(0), torch.Generator().manual_seed(0)

    def vae_step(full_res: bool) -> None:
        loss, _ = train_mar_vae.vae_loss(vae, train_batch(rng, cfg, full_res), cfg, g)  # type: ignore[arg-type]
        opt.zero_grad()
        loss.backward()
        opt.step()

    patch, full = _timed(lambda: vae_step(False), args.steps), _timed(lambda: vae_step(True), args.steps)
    result = {"vae_patch": patch, "vae_full": full,
              "vae": (1 - cfg.full_res_fraction) * patch + cfg.full_res_fraction * full}
    print(f"vae: {patch:.2f} s/step on {cfg.patch_size} px patches (batch {cfg.batch_size}), {full:.2f} s/step on "
          f"whole {cfg.resolution} px crops (batch {cfg.full_res_batch_size}); mean over the schedule "
          f"{result['vae']:.2f} s/step, {cfg.steps} steps by default", flush=True)
    for name in ("target", "draft", "causal-target", "causal-draft"):
        c = train_mar.PRESETS[name]
        models = train_mar.build_models(c, vae).train()
        t, h = models["transformer"], models["head"]
        mopt = torch.optim.AdamW(models.parameters(), lr=1e-4)

        result[name] = _timed(functools.partial(_mar_step, c, t, h, mopt, g), args.steps)
        mb = [sum(p.numel() for p in m.parameters()) * 2 / 1e6 for m in (t, h)]
        print(f"{name}: {result[name]:.2f} s/step (batch {c.batch_size}, {c.steps} steps by default; fp16 "
              f"transformer {mb[0]:.1f} MB, head {mb[1]:.1f} MB)", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")
    return result


if __name__ == "__main__":
    main()
