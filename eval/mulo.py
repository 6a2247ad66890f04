#!/usr/bin/env python
"""Multi-scale drafting: how good the up-sampler's drafts are for the shipped c2i target, measured.

    python eval/mulo.py alpha --json docs/figures/mulo/alpha.json     # α, NLL and top-1 on target samples

``alpha`` draws ``--num`` samples of the target by plain AR (CFG and top-k of the model's sampling
defaults), recomputes the target's ``p_j`` at every position given the sample's own prefix
(teacher-forced, exactly what decoding sees), and compares it with the up-sampler's ``q_j`` built from
a low-resolution token map of

- ``oracle``: the target's own sample, decoded, down-sampled to 64 px and re-tokenised (the best a
  low-resolution drafter could do: it drew the very image the target drew);
- ``independent``: a sample of the low-resolution GPT for the same class, drawn independently of the
  target's sample (what the drafts would be worth if accepting them did not steer the target);
- ``steered``: the lossless method's own decodes (``mulo:window=32``), each against the ``q`` of the
  low-resolution sample that drafted it — the α of real decodes, where accepted drafts pull the target's
  prefix towards the low-resolution image (the decodes are still exact samples of the target);

and, as yardsticks, the uniform draft of SJD's random init and the class's token frequencies. For each:
the per-token acceptance ``α = E_j[1 − TV(p_j, q_j)]`` (the probability that a draft ``d ~ q_j`` is
accepted by exact verification against ``p_j``), its map over the grid, and NLL / top-1 of ``q`` against
the target's sampled tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arvis.engine.sampling import SamplingConfig
from arvis.eval.provenance import provenance
from arvis.eval.token_stats import sampling_distributions
from arvis.methods import decode
from arvis.models.llamagen import LlamaGenTransformer
from arvis.models.protocol import Condition
from arvis.models.upsampler import TokenUpsampler
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from arvis.utils.serialization import atomic_path


def target_samples(model: LlamaGenTransformer, labels: list[int], sampling: SamplingConfig, seed: int,
                   batch_size: int = 16) -> torch.Tensor:
    """One plain-AR sample per label (generator seeded ``seed + i``) → ``[M, N]`` tokens."""
    out = []
    for start in range(0, len(labels), batch_size):
        chunk = labels[start:start + batch_size]
        gens = [torch.Generator().manual_seed(seed + start + i) for i in range(len(chunk))]
        tokens, _ = decode(model, Condition(class_labels=torch.tensor(chunk)), sampling, "ar", gens)
        out.append(tokens)
        print(f"target samples {start + len(chunk)}/{len(labels)}", file=sys.stderr, flush=True)
    return torch.cat(out)


@torch.no_grad()
def downsampled_codes(vq: LlamaGenVQModel, tokens: torch.Tensor, grid: int, low_resolution: int,
                      batch_size: int = 32) -> torch.Tensor:
    """The low-resolution codes of token grids: decode, resize to ``low_resolution`` px (PIL bicubic with
    antialiasing, as :mod:`arvis.data.crops` renders), re-tokenise → ``[M, h*w]``."""
    from PIL import Image

    codes = []
    for i in range(0, len(tokens), batch_size):
        images = vq.decode_codes(tokens[i:i + batch_size].view(-1, grid, grid))
        pixels = ((images.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
        small = np.stack([np.asarray(Image.fromarray(p).resize((low_resolution, low_resolution),
                                                               Image.Resampling.BICUBIC)) for p in pixels])
        x = torch.from_numpy(small).permute(0, 3, 1, 2).float() / 127.5 - 1.0
        codes.append(vq.encode(x).reshape(len(x), -1))
    return torch.cat(codes)


def draft_figures(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, grid: int, window: int = 32
                  ) -> dict[str, Any]:
    """α = E[1 − TV(p, q)] (mean, by row, grid map), NLL and top-1 of ``q`` against ``tokens``.

    Args:
        p, q: ``[M, N, V]``; tokens: ``[M, N]``.
    """
    accept = 1 - 0.5 * (p - q).abs().sum(-1)  # [M, N]
    q_tok = q.gather(-1, tokens[..., None]).squeeze(-1)
    a = float(accept.mean())
    # Tokens per forward if every draft in a window of L were accepted independently with probability α.
    iid = (1 - a ** (window + 1)) / (1 - a) if a < 1 else float(window + 1)
    return {
        "alpha": a,
        "alpha_by_row": accept.view(-1, grid, grid).mean(dim=(0, 2)).tolist(),
        "alpha_map": accept.mean(0).view(grid, grid).tolist(),
        "nll": float(-q_tok.clamp_min(1e-12).log().mean()),
        "top1": float((q.argmax(-1) == tokens).double().mean()),
        f"iid_tokens_per_forward_window_{window}": iid,
    }


def alpha_record(pipeline: str, lowres: str, upsampler: str, num: int, seed: int, cache: Path | None,
                 batch_size: int = 16, steered: int = 32) -> dict[str, Any]:
    """The record ``alpha`` writes (see the module docstring)."""
    from arvis.pipelines import LlamaGenPipeline

    torch.set_num_threads(torch.get_num_threads())
    pipe = LlamaGenPipeline.from_pretrained(pipeline)
    target = pipe.transformer.float().eval()
    vq = pipe.vqvae.float().eval()
    low_model = LlamaGenTransformer.from_pretrained(lowres).float().eval()
    up = TokenUpsampler.from_pretrained(upsampler).float().eval()
    defaults = json.loads((Path(pipeline) / "sampling_defaults.json").read_text())
    sampling = SamplingConfig(guidance_scale=defaults.get("guidance_scale", 1.0), top_k=defaults.get("top_k", 0))
    classes = target.config.num_classes
    labels = [i % classes for i in range(num)]
    grid, low_grid = target.layout.grid[0], low_model.layout.grid[0]
    t0 = time.time()
    path = cache / f"target-ar-{num}-{seed}.pt" if cache else None
    if path is not None and path.exists():
        tokens = torch.load(path, weights_only=True)
    else:
        tokens = target_samples(target, labels, sampling, seed, batch_size)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp:
                torch.save(tokens, tmp)
    t_samples = time.time() - t0
    cond = Condition(class_labels=torch.tensor(labels))
    V = target.layout.vocab_size
    sums: dict[str, dict[str, Any]] = {}
    low_res = up.config.low_grid * vq.downsample_factor
    with torch.no_grad():
        oracle_low = downsampled_codes(vq, tokens, grid, low_res)
        gens = [torch.Generator().manual_seed(10_000 + seed + i) for i in range(num)]
        indep_low = torch.cat([decode(low_model, Condition(class_labels=torch.tensor(labels[s:s + batch_size])),
                                      sampling, "ar", gens[s:s + batch_size])[0]
                               for s in range(0, num, batch_size)])
        # Class token frequencies of the target's own samples (a position-blind draft; in-sample, so optimistic).
        freq = torch.ones(classes, V)
        freq.index_put_((torch.tensor(labels)[:, None].expand_as(tokens), tokens), torch.ones_like(tokens, dtype=torch.float),
                        accumulate=True)
        freq = freq / freq.sum(-1, keepdim=True)
        parts: dict[str, list[dict[str, Any]]] = {}
        for s in range(0, num, batch_size):
            sl = slice(s, s + batch_size)
            lab = torch.tensor(labels[sl])
            p = sampling_distributions(target, tokens[sl], Condition(class_labels=lab), sampling)
            drafts = {
                "oracle": up.distributions(oracle_low[sl], lab),
                "independent": up.distributions(indep_low[sl], lab),
                "uniform": torch.full_like(p, 1.0 / V),
                "class_frequencies": freq[lab][:, None].expand_as(p),
            }
            for name, q in drafts.items():
                parts.setdefault(name, []).append({**draft_figures(p, q, tokens[sl], grid), "n": len(lab)})
        # Steered: the lossless method's own decodes, each against the q of its own low-resolution sample.
        if steered:
            steer_labels = labels[:steered]
            for s in range(0, steered, batch_size):
                lab = torch.tensor(steer_labels[s:s + batch_size])
                gens = [torch.Generator().manual_seed(20_000 + seed + s + i) for i in range(len(lab))]
                toks, stats = decode(target, Condition(class_labels=lab), sampling, "mulo", gens, window=32,
                                     lowres_model=low_model, upsampler=up)
                low_tokens = torch.tensor([st.extra["low_tokens"] for st in stats.samples])
                p = sampling_distributions(target, toks, Condition(class_labels=lab), sampling)
                parts.setdefault("steered (mulo:window=32 decodes)", []).append(
                    {**draft_figures(p, up.distributions(low_tokens, lab), toks, grid), "n": len(lab)})
        for name, rows in parts.items():
            n = sum(r["n"] for r in rows)
            merged: dict[str, Any] = {}
            for key in rows[0]:
                if key == "n":
                    continue
                values = [np.asarray(r[key]) * r["n"] for r in rows]
                merged[key] = (sum(values) / n).tolist()
            sums[name] = merged
    del cond
    return {
        "kind": "mulo-alpha",
        "pipeline": Path(pipeline).name,
        "lowres_model": Path(lowres).name,
        "upsampler": Path(upsampler).name,
        "samples": num,
        "steered_samples": steered,
        "seed": seed,
        "guidance_scale": sampling.guidance_scale,
        "top_k": sampling.top_k,
        "grid": grid,
        "low_grid": low_grid,
        "drafts": sums,
        "target_sampling_seconds": t_samples,
        "provenance": provenance(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python eval/mulo.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("alpha", help="α, NLL and top-1 of the up-sampler's drafts on target samples")
    a.add_argument("--pipeline", default="arvis/weights/llamagen-c2i-photos")
    a.add_argument("--lowres", default="arvis/weights/llamagen-c2i-photos/lowres_transformer")
    a.add_argument("--upsampler", default="arvis/weights/llamagen-c2i-photos/upsampler")
    a.add_argument("--num", type=int, default=256)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--cache", default=None, help="folder caching the target's AR samples between runs")
    a.add_argument("--steered", type=int, default=32, help="decodes of the lossless method for the steered α")
    a.add_argument("--json", required=True)
    args = p.parse_args(argv)
    if args.num < 1:
        raise ValueError(f"--num must be >= 1, got {args.num}")
    if not 0 <= args.steered <= args.num:
        raise ValueError(f"--steered must be in [0, --num], got {args.steered}")
    record = alpha_record(args.pipeline, args.lowres, args.upsampler, args.num, args.seed,
                          Path(args.cache) if args.cache else None, steered=args.steered)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        Path(tmp).write_text(json.dumps(record, indent=2) + "\n")
    for name, d in record["drafts"].items():
        print(f"{name:18s} alpha {d['alpha']:.4f}  nll {d['nll']:.3f}  top1 {100 * d['top1']:.1f}%  "
              f"iid tokens/forward (L=32) {d['iid_tokens_per_forward_window_32']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
