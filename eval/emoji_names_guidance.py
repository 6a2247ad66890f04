#!/usr/bin/env python
"""How the one-class-per-emoji models' sampling defaults were chosen: CLIP naming at several CFG scales and
temperatures.

    python eval/emoji_names_guidance.py --model emoji-names --scales 1.5,2,3,5,7,10 --temperatures 1 \
        --json docs/figures/emoji/guidance_emoji_names.json
    python eval/emoji_names_guidance.py --model emu3 --scales 1,1.5,1.75,2,2.5,3,5,8 --seed 1000 \
        --json docs/figures/emu3/guidance.json      # a text model: the emoji names are its prompts

For each (scale, temperature): one plain-AR sample per class (generator seeds ``--seed + class``, disjoint from the model card's
seed-0 samples, so the chosen scale is then measured on other draws) and how often the emoji CLIP picks the
sample's own class name among all of them (``eval/model_card.py``'s class consistency for this model).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch


def emoji_names(pipe) -> list[str]:
    """The named emoji a model draws: a class-conditional model's classes, or (a text model) the named set."""
    from arvis.data.sources import class_names

    return list(pipe.class_names if pipe.capabilities.conditioning == "class" else class_names("emoji-names"))


def naming_at(pipe, clip, scale: float, temperature: float, seed: int, batch: int = 41) -> float:
    from arvis.models.clip import naming_top1

    names = emoji_names(pipe)
    conditional = pipe.capabilities.conditioning == "class"
    text = clip.text_embeddings(names)
    images = []
    for start in range(0, len(names), batch):
        labels = list(range(start, min(start + batch, len(names))))
        condition = ({"class_labels": labels} if conditional else {"prompt": [names[k] for k in labels]})
        out = pipe(**condition, guidance_scale=scale, temperature=temperature, top_k=0, output_type="np",
                   generator=[torch.Generator().manual_seed(seed + k) for k in labels])
        images.append((np.asarray(out.images) * 255).round().astype(np.uint8))
    return naming_top1(clip.image_embeddings(np.concatenate(images)), text, torch.arange(len(names)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="emoji-names")
    p.add_argument("--scales", default="1.5,2,3,5,7,10")
    p.add_argument("--temperatures", default="1")
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from arvis.eval.clip_score import load_clip
    from arvis.eval.provenance import provenance
    from arvis.hub import load_pipeline

    pipe, _, model = load_pipeline(args.model, torch.float32, "cpu")
    pipe.set_progress_bar_config(disable=True)
    clip = load_clip("clip-emoji")
    rows = []
    for temperature in (float(t) for t in args.temperatures.split(",")):
        for scale in (float(s) for s in args.scales.split(",")):
            rows.append({"guidance_scale": scale, "temperature": temperature,
                         "named_right": naming_at(pipe, clip, scale, temperature, args.seed)})
            print(json.dumps(rows[-1]), flush=True)
    record = {"model": args.model, "classes": len(emoji_names(pipe)), "seed": args.seed,
              "clip": "clip-emoji", "method": "ar", "top_k": 0, "rows": rows, **provenance()}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
