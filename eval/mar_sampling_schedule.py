#!/usr/bin/env python
"""Why arvis's own MAR folders sample their heads on the linear schedule: measured, on a shipped pair.

    python eval/mar_sampling_schedule.py --model arvis/weights/mar-emoji \
        --json docs/figures/mar/sampling-schedule-mar-emoji.json

Three measurements (docs/mar.md, "The heads' sampling schedule"):

1. the largest gain by which a transition multiplies the head's ε error (``DDPMTables.eps_error_gain``)
   for the cosine (MAR's) and linear schedules at several step counts (from the tables alone);
2. the head's ε MSE on held-out latents at noise levels near the end of the cosine schedule (the transformer's
   ``z`` as in training: masked MAR's random masks, the causal variant's teacher forcing; fixed noise);
3. the std of sampled tokens with the folder's sampling defaults on either schedule (training tokens: the
   held-out latents' std, printed beside them).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from arvis.data.sources import class_names, model_data
from arvis.eval.files import write_json_atomic
from arvis.eval.provenance import provenance
from arvis.models.diffusion_head import SAMPLING_SCHEDULES, TRAIN_STEPS, DDPMTables
from arvis.pipelines import MARPipeline
from arvis.training.train_mar import MARTrainConfig, build_latents, loss_conditions, sample_tokens
from arvis.utils.random import image_generators

STEP_COUNTS = (16, 50, 100)
NOISE_STEPS = (999, 995, 989, 979, 900, 500)


def transition_gains() -> dict[str, dict[int, float]]:
    return {schedule: {steps: DDPMTables(TRAIN_STEPS, steps, schedule).eps_error_gain() for steps in STEP_COUNTS}
            for schedule in SAMPLING_SCHEDULES}


@torch.no_grad()
def eps_errors(pipe: MARPipeline, data: dict[str, np.ndarray], scale: float, num: int) -> dict[int, float]:
    """The head's ε MSE at each of :data:`NOISE_STEPS` (trained cosine schedule) on ``num`` held-out crops."""
    g = torch.Generator().manual_seed(0)
    index = np.arange(min(num, len(data["labels"])))
    tokens = sample_tokens(pipe.transformer, data, index, scale, g)
    z, target = loss_conditions(pipe.transformer, tokens, torch.from_numpy(data["labels"][index]), None, g)
    z, target = z.reshape(-1, z.shape[-1]).float(), target.reshape(-1, target.shape[-1]).float()
    alphas = DDPMTables(TRAIN_STEPS, TRAIN_STEPS).alphas_cumprod  # the trained schedule, every step
    found = {}
    for step in NOISE_STEPS:
        noise = torch.randn(target.shape, generator=g)
        ab = float(alphas[step])
        x_t = ab ** 0.5 * target + (1 - ab) ** 0.5 * noise
        eps = pipe.head(x_t, torch.full((len(target),), step), z)[:, :target.shape[1]].float()
        found[step] = float((eps - noise).pow(2).mean())
    return found


@torch.no_grad()
def sampled_std(pipe: MARPipeline, num: int) -> dict[str, float]:
    labels = [i % pipe.transformer.num_classes for i in range(num)]
    head, found = pipe.head, {}
    try:
        for schedule in SAMPLING_SCHEDULES:
            pipe.head = head.with_sampling_steps(head.num_sampling_steps(), schedule=schedule)
            out = pipe(class_labels=labels, generator=image_generators(0, range(num)), output_type="latent")
            found[schedule] = float(out.tokens.std())
    finally:
        pipe.head = head
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a MAR pipeline folder")
    p.add_argument("--num-images", type=int, default=8, help="sampled images per schedule")
    p.add_argument("--num-heldout", type=int, default=64, help="held-out crops for the eps errors")
    p.add_argument("--data-cache", default=None, help="latent cache folder (default: a temporary one)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    pipe = MARPipeline.from_pretrained(args.model, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    scale = float(pipe.vae.config.scaling_factor)
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(args.data_cache or tmp)
        cache.mkdir(parents=True, exist_ok=True)
        cfg = MARTrainConfig(num_val=256, data=model_data(args.model))  # the trainer's held-out split
        if len(class_names(cfg.data)) != pipe.transformer.num_classes:
            p.error(f"--model: {pipe.transformer.num_classes} classes, but its data set {cfg.data!r} has "
                    f"{len(class_names(cfg.data))}")
        data = build_latents(cfg, pipe.vae, str(Path(args.model) / "vae"), cache, "heldout", cfg.num_val)
    gains = transition_gains()
    errors = eps_errors(pipe, data, scale, args.num_heldout)
    stds = sampled_std(pipe, args.num_images)
    g = torch.Generator().manual_seed(0)
    heldout_std = float(sample_tokens(pipe.transformer, data, np.arange(len(data["labels"])), scale, g).std())
    for schedule, row in gains.items():
        print(f"largest transition gain of the eps error, {schedule}: "
              + ", ".join(f"{s} steps {v:.3g}" for s, v in row.items()))
    print("head eps MSE on held-out latents (cosine steps): " + ", ".join(f"t={t} {v:.2g}" for t, v in errors.items()))
    print(f"sampled token std ({args.num_images} images, {pipe.head.num_sampling_steps()} head steps): "
          + ", ".join(f"{k} {v:.3g}" for k, v in stds.items()) + f"; held-out latents {heldout_std:.3g}")
    if args.json is not None:
        write_json_atomic(args.json, {
            "model": Path(args.model).name, "command": "python eval/mar_sampling_schedule.py " + " ".join(
                a for a in (argv if argv is not None else sys.argv[1:]) if a),
            "transition_gain": gains, "eps_mse": errors, "sampled_token_std": stds, "heldout_token_std": heldout_std,
            "num_images": args.num_images, "num_heldout": args.num_heldout,
            "head_steps": pipe.head.num_sampling_steps(), **provenance("cpu", torch.float32)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
