#!/usr/bin/env python
"""Can the emoji CLIP name a tokenizer's round trips? The ceiling a model decoded by that tokenizer can reach.

A family's samples are decoded by its tokenizer, so the share of the named emoji the emoji CLIP still names after
an encode / decode round trip bounds the share of samples it can name (:mod:`arvis.eval.naming`). This measures a
tokenizer folder on its own, before any model is trained on it — the check to run when choosing or fine-tuning
one:

    python eval/tokenizer_naming.py --folder <scratch>/mar-vae --resolution 64 --json out.json [--grid rt.png]

``--folder``: a diffusers ``AutoencoderKL`` (MAR's VAE: through the posterior mean) or an arvis
``LlamaGenVQModel`` folder (through its codes). The record holds the round trips' naming rate, the real renders'
at the same resolution and the reconstruction PSNR of the renders.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from arvis.eval.files import write_json_atomic  # noqa: E402


def load_roundtrip(folder: Path) -> tuple[str, Any]:
    """The folder's kind and its ``float [-1, 1] [B, 3, R, R] -> [B, 3, R, R]`` round trip."""
    config = json.loads((folder / "config.json").read_text())
    if config.get("_class_name") == "AutoencoderKL":
        from diffusers import AutoencoderKL

        vae = AutoencoderKL.from_pretrained(folder, torch_dtype=torch.float32).eval()
        return "kl-vae", lambda x: vae.decode(vae.encode(x).latent_dist.mean).sample
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel

    vq = LlamaGenVQModel.from_pretrained(folder, torch_dtype=torch.float32).eval()
    return "vq", lambda x: vq.decode_codes(vq.encode(x))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", required=True, type=Path, help="an AutoencoderKL or LlamaGenVQModel folder")
    p.add_argument("--resolution", required=True, type=int, help="the side the tokenizer is used at")
    p.add_argument("--json", required=True, type=Path)
    p.add_argument("--grid", type=Path, default=None, help="renders above their round trips (PNG)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from arvis.eval.naming import named_renders, naming_rates
    from arvis.eval.provenance import provenance
    from arvis.utils.images import mean_psnr, to_tensor, to_uint8
    from arvis.utils.paths import display_path

    kind, roundtrip = load_roundtrip(args.folder)

    @torch.no_grad()
    def through(images: np.ndarray) -> np.ndarray:
        return np.concatenate([to_uint8(roundtrip(to_tensor(images[i:i + 32]))) for i in range(0, len(images), 32)])

    names, real = named_renders(args.resolution)
    recon = through(real)
    rates = naming_rates(recon, np.arange(len(names)), names)  # the round trips are the samples named
    psnr = mean_psnr(real, recon)
    record = {"folder": display_path(args.folder), "kind": kind, "resolution": args.resolution,
              "emoji": len(names), "roundtrip_named": rates["class_consistency"],
              "real_renders_named": rates["clip_real_renders_named"], "chance": rates["chance"],
              "named_by": rates["class_consistency_by"], "renders_psnr_db": round(psnr, 2),
              "provenance": provenance()}
    write_json_atomic(args.json, record)
    if args.grid is not None:
        from PIL import Image

        k = min(24, len(names))
        rows = [np.concatenate(list(real[:k]), axis=1), np.concatenate(list(recon[:k]), axis=1)]
        args.grid.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.concatenate(rows, axis=0)).save(args.grid)
    print(json.dumps({k: v for k, v in record.items() if k != "provenance"}, indent=2))
    return record


if __name__ == "__main__":
    main()
