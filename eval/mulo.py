#!/usr/bin/env python
"""Multi-scale drafting: how good the up-sampler's drafts are for the shipped c2i target, measured.

    python eval/mulo.py alpha --json docs/figures/mulo/alpha.json     # α, NLL and top-1 on target samples
    python eval/mulo.py alpha --no-lowres --upsampler FOLDER --json J --markdown M  # the up-sampler alone

The page docs/figures/mulo.md (``python eval/figures.py --suite mulo``, eval/suite_mulo.py) runs ``alpha`` and
``maps`` beside its ``arvis bench`` and ``arvis fid`` jobs.

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

and, as yardsticks, the uniform draft of SJD's random init and the class's token frequencies (``--no-lowres``:
without a low-resolution model, only ``oracle`` and the yardsticks — what the up-sampler alone is worth). For each:
the per-token acceptance ``α = E_j[1 − TV(p_j, q_j)]`` (the probability that a draft ``d ~ q_j`` is
accepted by exact verification against ``p_j``), its map over the grid, and NLL / top-1 of ``q`` against
the target's sampled tokens.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from figure_runner import load_record

from arvis.engine.sampling import SamplingConfig
from arvis.eval.provenance import provenance
from arvis.eval.token_stats import sampling_distributions
from arvis.methods import decode
from arvis.models.llamagen import LlamaGenTransformer
from arvis.models.protocol import Condition
from arvis.models.upsampler import TokenUpsampler
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from arvis.utils.files import atomic_path


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


def training_summary(folder: str | Path) -> dict[str, Any] | None:
    """The trainer's own figures from an exported up-sampler's ``metrics.json`` (steps, held-out NLL / top-1 /
    top-10 against the real high-resolution codes of held-out crops, the trivial baselines), or ``None``."""
    path = Path(folder) / "metrics.json"
    if not path.is_file():
        return None
    m = json.loads(path.read_text())
    return {k: m.get(k) for k in ("params", "steps", "heldout", "heldout_crops", "baselines")}


def alpha_record(pipeline: str, lowres: str | None, upsampler: str, num: int, seed: int, cache: Path | None,
                 batch_size: int = 16, steered: int = 32) -> dict[str, Any]:
    """The record ``alpha`` writes (see the module docstring)."""
    from arvis.pipelines import LlamaGenPipeline

    torch.set_num_threads(torch.get_num_threads())
    pipe = LlamaGenPipeline.from_pretrained(pipeline)
    target = pipe.transformer.float().eval()
    vq = pipe.vqvae.float().eval()
    low_model = LlamaGenTransformer.from_pretrained(lowres).float().eval() if lowres else None
    if low_model is None:
        steered = 0
    up = TokenUpsampler.from_pretrained(upsampler).float().eval()
    defaults = json.loads((Path(pipeline) / "sampling_defaults.json").read_text())
    sampling = SamplingConfig(guidance_scale=defaults.get("guidance_scale", 1.0), top_k=defaults.get("top_k", 0))
    classes = target.config.num_classes
    labels = [i % classes for i in range(num)]
    grid, low_grid = target.layout.grid[0], up.config.low_grid
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
        indep_low = None if low_model is None else torch.cat(
            [decode(low_model, Condition(class_labels=torch.tensor(labels[s:s + batch_size])), sampling, "ar",
                    gens[s:s + batch_size])[0] for s in range(0, num, batch_size)])
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
                **({} if indep_low is None else {"independent": up.distributions(indep_low[sl], lab)}),
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
        "lowres_model": Path(lowres).name if lowres else None,
        "upsampler": Path(upsampler).name,
        "upsampler_training": training_summary(upsampler),
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


def _write_json(path: Path, record: Any) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(record, indent=2) + "\n")


MAP_SPECS = ("mc-sjd:window=32", "mulo:window=32")


def rejection_sites(commit_forward: list[int], window: int) -> list[int]:
    """Positions where a raster-window method rejected a draft: the last token of every forward that
    committed fewer than ``window + 1`` tokens (its recovered token), except the sequence's last token."""
    last: dict[int, int] = {}
    counts: dict[int, int] = {}
    for index, forward in enumerate(commit_forward):
        last[forward] = max(last.get(forward, -1), index)
        counts[forward] = counts.get(forward, 0) + 1
    end = len(commit_forward) - 1
    return sorted(i for f, i in last.items() if counts[f] < window + 1 and i != end and f > 0)


def maps_record(pipeline: str, specs: list[str], num: int, seed: int, batch_size: int = 8) -> dict[str, Any]:
    """Decode-order maps and rejection locations of ``specs`` on ``num`` samples (class ``i mod classes``)."""
    from arvis.eval.bench import parse_method_specs
    from arvis.pipelines import LlamaGenPipeline

    pipe = LlamaGenPipeline.from_pretrained(pipeline)
    pipe.set_progress_bar_config(disable=True)
    defaults = json.loads((Path(pipeline) / "sampling_defaults.json").read_text())
    classes = pipe.transformer.config.num_classes
    grid = list(pipe.transformer.layout.grid)
    N = pipe.transformer.layout.num_tokens
    out: dict[str, Any] = {}
    for spec in parse_method_specs(specs):
        order, rejections, forwards = [], [0] * N, []
        for start in range(0, num, batch_size):
            labels = [(start + i) % classes for i in range(min(batch_size, num - start))]
            gens = [torch.Generator().manual_seed(seed + start + i) for i in range(len(labels))]
            result = pipe(class_labels=labels, generator=gens, output_type="latent", method=spec.name,
                          guidance_scale=defaults.get("guidance_scale", 1.0), top_k=defaults.get("top_k", 0),
                          **spec.options_dict)
            for st in result.stats.samples:
                order.append(st.commit_forward)
                forwards.append(st.target_forwards)
                sites = st.extra.get("rejections")
                if sites is None:  # raster-window methods: rejections sit at the end of short commits
                    sites = [1 if i in set(rejection_sites(st.commit_forward, int(spec.options_dict["window"])))
                             else 0 for i in range(N)]
                rejections = [a + b for a, b in zip(rejections, sites, strict=True)]
        out[spec.label] = {"commit_forward": order, "rejections_per_sample": [r / len(order) for r in rejections],
                           "target_forwards": forwards}
    return {"kind": "mulo-maps", "pipeline": Path(pipeline).name, "samples": num, "seed": seed, "grid": grid,
            "guidance_scale": defaults.get("guidance_scale"), "top_k": defaults.get("top_k"), "specs": out,
            "provenance": provenance()}


def write_map_plots(record: dict[str, Any], folder: Path) -> list[Path]:
    """``decode_order.png`` (sample 0 of each spec) and ``rejections.png`` (rejections per position, mean)."""
    from arvis.eval.plots import plot_decode_order, plot_grid_maps

    grid = record["grid"]
    specs = record["specs"]
    order = [{"spec": label, "grid": grid, "commit_forward": d["commit_forward"][0], "model": record.get("pipeline")}
             for label, d in specs.items()]
    H, W = grid
    maps = {label: [d["rejections_per_sample"][r * W:(r + 1) * W] for r in range(H)] for label, d in specs.items()}
    return [plot_decode_order(order, folder / "decode_order.png"),
            plot_grid_maps(maps, folder / "rejections.png", title=f"rejections per position (mean over "
                           f"{record['samples']} samples)", colorbar="rejections per sample")]


def lowres_card(folder: Path, alpha_json: Path | None = None) -> str:
    """Model card of the low-resolution drafter from its trainer's ``training_metrics.json`` (and, when it
    exists, the α record of ``alpha``): nothing typed in by hand."""
    m = json.loads((folder / "training_metrics.json").read_text())
    cfg = m["preset_config"]
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    grid = cfg["resolution"] // 8
    weights = sum(p.stat().st_size for p in folder.rglob("*.safetensors"))
    alpha = load_record(alpha_json) if alpha_json is not None else None
    lines = [
        "# lowres-c2i-photos: the low-resolution drafter of multi-scale drafting", "",
        f"A LlamaGen-architecture class-conditional GPT (`arvis.models.llamagen`) on an {grid}x{grid} grid of the "
        f"shipped VQ's codes (`vq-photos`), i.e. {cfg['resolution']} px images of the same 22 photo classes as the "
        "c2i target. In multi-scale drafting (`arvis.drafting.multiscale`, docs/mulo.md) it samples a low-resolution "
        "token map that the up-sampler (`upsampler-photos`) turns into per-position drafts for the 16x16 target; "
        "it is linked into `llamagen-c2i-photos` as `lowres_transformer`.", "",
        "## Architecture",
        f"{cfg['n_layer']} layers, width {cfg['dim']}, {cfg['n_head']} heads, {m['params']:,} parameters, "
        f"{weights / 2**20:.2f} MB as fp16 safetensors.", "",
        "## Data",
        f"`arvis.data.crops`: {cfg['num_train']} train-region crops of the 22 offline photos (label = photo, "
        f"seed {cfg['data_seed']}) rendered at {cfg['resolution']} px and tokenised by `vq-photos`; validation on "
        "crops of the disjoint held-out strips.", "",
        "## Training", "```", m["command"],
        f"cp runs/mulo/lowres-export/transformer/* runs/mulo/lowres-export/training_metrics.json {folder.as_posix()}/",
        "```",
        f"Teacher-forced cross-entropy with class dropout for CFG, AdamW, cosine schedule, EMA; {m['steps']} steps "
        f"(batch {cfg['batch_size']}), {60 * m['train_hours']:.0f} min on one CPU thread (2-core machine shared with "
        f"other jobs). Final training loss {m['final_train_loss']:.4f} "
        f"(exported: the {m['exported_weights']} weights).", "",
        "## Evaluation",
        f"Held-out validation loss {m['validation_loss']:.4f} nats per token (perplexity "
        f"{m['validation_perplexity']:.1f}; raw {m['validation_loss_raw']:.4f}, EMA {m['validation_loss_ema']:.4f}; "
        f"a uniform model scores {math.log(vocab):.2f}).", ""]
    if isinstance(alpha, dict) and "independent" in alpha.get("drafts", {}):
        d = alpha["drafts"]["independent"]
        lines += [f"Per-token acceptance of its up-sampled drafts against the c2i target on the target's own samples "
                  f"(`python eval/mulo.py alpha`, {alpha['samples']} samples): α = {d['alpha']:.3f} with an "
                  f"independent low-resolution sample; every row in docs/figures/mulo.md.", ""]
    else:
        lines += ["α not measured yet (`python eval/mulo.py alpha`).", ""]
    return "\n".join(lines)


def _alpha_lines(record: dict[str, Any]) -> list[str]:
    low = record["low_grid"]
    source = (f"`{record['lowres_model']}` (the steered row: {record['steered_samples']} decodes of "
              "`mulo:window=32`, each against its own low-resolution sample)" if record["lowres_model"] else
              "the target's own sample, decoded, down-sampled and re-tokenised only (oracle: no low-resolution "
              "model was given)")
    lines = [f"{record['samples']} samples of `{record['pipeline']}` by plain AR (CFG {record['guidance_scale']}, "
             f"top-k {record['top_k']}; seed {record['seed']}), `p_j` recomputed given each sample's own prefix; "
             f"drafts from `{record['upsampler']}` on a {low}x{low} map of {source}. α = E[1 − TV(p_j, q_j)], the "
             "probability that a draft d ~ q_j passes exact verification; the last column is what a window of "
             "32 such drafts would commit per forward if acceptances were independent.", "",
             "| draft q | α | NLL of the target's tokens (nats) | top-1 | (1 − α^33)/(1 − α) |", "|---|---|---|---|---|"]
    for name, d in record["drafts"].items():
        lines.append(f"| {name} | {d['alpha']:.4f} | {d['nll']:.3f} | {100 * d['top1']:.1f}% | "
                     f"{d['iid_tokens_per_forward_window_32']:.2f} |")
    rows = " | ".join(str(i) for i in range(record["grid"]))
    lines += ["", "α by grid row (first → last):", "", f"| draft q | {rows} |", "|---|" + "---|" * record["grid"]]
    for name, d in record["drafts"].items():
        lines.append(f"| {name} | " + " | ".join(f"{a:.2f}" for a in d["alpha_by_row"]) + " |")
    t = record.get("upsampler_training")
    if t:
        b, h = t["baselines"], t["heldout"]
        lines += ["", f"The up-sampler's own held-out figures (its trainer, {t['heldout_crops']} held-out crops, against "
                  f"the real {record['grid']}x{record['grid']} codes; after {t['steps']} training steps):", "",
                  "| q | NLL (nats) | top-1 | top-10 |", "|---|---|---|---|",
                  f"| `{record['upsampler']}` | {h['nll']:.3f} | {100 * h['top1']:.1f}% | {100 * h['top10']:.1f}% |",
                  f"| class token frequencies | {b['class_frequencies']['nll']:.3f} | "
                  f"{100 * b['class_frequencies']['top1']:.1f}% | – |",
                  f"| nearest re-quantised latents | – | {100 * b['nearest_requantised_top1']:.1f}% | – |",
                  f"| bicubic re-quantised latents | – | {100 * b['bicubic_requantised_top1']:.1f}% | – |"]
    return lines + [""]


def write_alpha_markdown(record: dict[str, Any], json_path: Path, path: Path) -> Path:
    """The tables of an ``alpha`` record (read from ``json_path``) as Markdown at ``path``."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text("\n".join(["# α of the up-sampler's drafts", "",
                                         f"Built from `{json_path.name}` by `python eval/mulo.py alpha-table` "
                                         "(the record by `python eval/mulo.py alpha`).", "", *_alpha_lines(record)]))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python eval/mulo.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("alpha", help="α, NLL and top-1 of the up-sampler's drafts on target samples")
    a.add_argument("--pipeline", default="arvis/weights/llamagen-c2i-photos")
    a.add_argument("--lowres", default="arvis/weights/llamagen-c2i-photos/lowres_transformer")
    a.add_argument("--no-lowres", action="store_true", help="no low-resolution model: the oracle draft and the "
                   "yardsticks only (what the up-sampler alone is worth)")
    a.add_argument("--upsampler", default="arvis/weights/llamagen-c2i-photos/upsampler")
    a.add_argument("--num", type=int, default=256)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--cache", default=None, help="folder caching the target's AR samples between runs (default: "
                   "the arvis data cache, $ARVIS_CACHE or ~/.cache/arvis/data)")
    a.add_argument("--steered", type=int, default=32, help="decodes of the lossless method for the steered α")
    a.add_argument("--json", required=True)
    a.add_argument("--markdown", default=None, help="also write the record's tables as Markdown here")
    t = sub.add_parser("alpha-table", help="the Markdown tables of an alpha record")
    t.add_argument("--json", required=True)
    t.add_argument("--markdown", required=True)
    m = sub.add_parser("maps", help="decode-order maps and rejection locations (record + plots)")
    m.add_argument("--pipeline", default="arvis/weights/llamagen-c2i-photos")
    m.add_argument("--specs", nargs="+", default=list(MAP_SPECS))
    m.add_argument("--num", type=int, default=16)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--json", required=True)
    m.add_argument("--plots", default=None, help="folder for decode_order.png and rejections.png")
    c = sub.add_parser("lowres-card", help="write the low-resolution drafter's README.md from its training record")
    c.add_argument("--folder", type=Path, default=Path("arvis/weights/lowres-c2i-photos"))
    c.add_argument("--alpha", type=Path, default=Path("docs/figures/mulo/alpha.json"))
    args = p.parse_args(argv)
    if args.command == "lowres-card":
        from arvis.training.common import atomic_write_text

        atomic_write_text(args.folder / "README.md", lowres_card(args.folder, args.alpha) + "\n")
        print(f"wrote {args.folder / 'README.md'}")
        return 0
    if args.command == "alpha-table":
        print(f"wrote {write_alpha_markdown(json.loads(Path(args.json).read_text()), Path(args.json), Path(args.markdown))}")
        return 0
    if args.command == "maps":
        if args.num < 1:
            raise ValueError(f"--num must be >= 1, got {args.num}")
        record = maps_record(args.pipeline, args.specs, args.num, args.seed)
        _write_json(Path(args.json), record)
        if args.plots:
            for path in write_map_plots(record, Path(args.plots)):
                print(f"wrote {path}")
        return 0
    if args.num < 1:
        raise ValueError(f"--num must be >= 1, got {args.num}")
    if not 0 <= args.steered <= args.num:
        raise ValueError(f"--steered must be in [0, --num], got {args.steered}")
    from arvis.data.cache import cache_dir

    record = alpha_record(args.pipeline, None if args.no_lowres else args.lowres, args.upsampler, args.num,
                          args.seed, Path(args.cache) if args.cache else cache_dir() / "mulo", steered=args.steered)
    _write_json(Path(args.json), record)
    if args.markdown:
        write_alpha_markdown(record, Path(args.json), Path(args.markdown))
    for name, d in record["drafts"].items():
        print(f"{name:18s} alpha {d['alpha']:.4f}  nll {d['nll']:.3f}  top1 {100 * d['top1']:.1f}%  "
              f"iid tokens/forward (L=32) {d['iid_tokens_per_forward_window_32']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
