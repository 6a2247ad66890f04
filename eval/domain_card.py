"""The evaluation and model card of an exported domain feature network (a card kind of ``eval/cards.py``).

    python eval/cards.py --model arvis/weights/domain-classifier --evaluate   # evaluate, then write the card
    python eval/cards.py --model arvis/weights/domain-emoji                   # the card from metrics.json

The folder is what ``python -m arvis.training.train_domain`` exported (fp16 safetensors and
``training_metrics.json``). The shipped fp16 weights are reloaded through
:func:`arvis.models.domain_net.load_domain_network` and evaluated on data never trained on: held-out
accuracy (and accuracy on training crops, for the gap), the real-vs-real FID floor, train-vs-held-out FID,
the FID of degraded held-out images (blur, noise, JPEG, down/up-sampling) and, with ``--vq``, the rFID of a
VQ tokenizer's reconstructions — all through :mod:`arvis.eval.fid`, in the network's own feature space.
The figures are deterministic (fixed seeds), so rerunning this on a shipped folder reproduces its card.
"""

from __future__ import annotations

import argparse
import io
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageFilter
from tqdm.auto import tqdm

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from arvis.data.sources import class_names, data_recipe, heldout_images_fn, labelled_images  # noqa: E402
from arvis.eval import fid as fidlib  # noqa: E402
from arvis.eval.files import write_json_atomic  # noqa: E402
from arvis.models.domain_net import DomainClassifier, DomainFeatures, load_domain_network  # noqa: E402
from arvis.training.common import config_from_record, export_note, portable_command  # noqa: E402
from arvis.training.train_domain import DomainTrainConfig, evaluate_accuracy  # noqa: E402
from arvis.utils.model_card import ModelCard, Section, Training, table  # noqa: E402


# ---------------------------------------------------------------------------------------------- degradations
def _per_image(images: np.ndarray, fn: Callable[[Image.Image], Image.Image]) -> np.ndarray:
    return np.stack([np.asarray(fn(Image.fromarray(im)).convert("RGB")) for im in images])


def _jpeg(quality: int) -> Callable[[Image.Image], Image.Image]:
    def fn(im: Image.Image) -> Image.Image:
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=quality)
        buf.seek(0)
        return Image.open(buf).convert("RGB")

    return fn


def degrade(images: np.ndarray, kind: str, amount: float, seed: int = 0) -> np.ndarray:
    """Degraded copies of ``uint8 [N, S, S, 3]`` images.

    Args:
        kind: ``"blur"`` (PIL Gaussian blur, ``amount`` = sigma in px), ``"noise"`` (additive Gaussian noise,
            ``amount`` = std in 0..255 units, rounded and clipped), ``"jpeg"`` (``amount`` = quality) or
            ``"downup"`` (bicubic down-sampling by ``amount``, then back up).
        seed: noise seed.
    """
    if kind == "blur":
        return _per_image(images, lambda im: im.filter(ImageFilter.GaussianBlur(radius=amount)))
    if kind == "noise":
        noise = np.random.default_rng(seed).normal(0.0, amount, size=images.shape)
        return np.clip(np.round(images.astype(np.float64) + noise), 0, 255).astype(np.uint8)
    if kind == "jpeg":
        return _per_image(images, _jpeg(int(amount)))
    if kind == "downup":
        s = images.shape[1]
        small = max(1, round(s / amount))
        return _per_image(images, lambda im: im.resize((small, small), Image.Resampling.BICUBIC).resize(
            (s, s), Image.Resampling.BICUBIC))
    raise ValueError(f"kind must be one of 'blur', 'noise', 'jpeg', 'downup', got {kind!r}")


DEGRADATIONS: tuple[tuple[str, float], ...] = (
    ("blur", 0.5), ("blur", 1.0), ("blur", 1.5), ("blur", 2.0),
    ("noise", 4.0), ("noise", 8.0), ("noise", 16.0),
    ("jpeg", 75), ("jpeg", 30), ("jpeg", 10),
    ("downup", 2.0), ("downup", 4.0),
)


# ---------------------------------------------------------------------------------------------- FID figures
def fid_figures(net: DomainClassifier, cfg: DomainTrainConfig, vq: str | None = None, progress: bool = True
                ) -> dict[str, Any]:
    """FID figures of ``net`` through :mod:`arvis.eval.fid` (``fid_size`` images per set)."""
    extractor = DomainFeatures(net)
    n, s = cfg.fid_size, cfg.image_size
    kw = dict(batch_size=100, progress=False)

    def stats(images: np.ndarray, source: str) -> fidlib.FIDStatistics:
        return fidlib.array_statistics(images, extractor, source=source, **kw)

    images_fn = heldout_images_fn(cfg.data)
    held_a = images_fn(n, s, fidlib.REFERENCE_SEED)
    held_b = images_fn(n, s, fidlib.FLOOR_SEED)
    train_c, _, _ = labelled_images(cfg.data, n, "train", s, cfg.data_seed + 5, cfg.crop_scale)
    a, b, c = stats(held_a, "heldout-a"), stats(held_b, "heldout-b"), stats(train_c, "train")
    reference = fidlib.heldout_statistics(extractor, num=cfg.fid_reference_size, resolution=s, cache=False,
                                          images_fn=images_fn, **kw)
    out: dict[str, Any] = {
        "fid_size": n,
        "reference_size": cfg.fid_reference_size,
        "heldout_vs_heldout": fidlib.frechet_distance(a, b),
        "train_vs_heldout": fidlib.frechet_distance(c, a),
        "heldout_vs_reference": fidlib.frechet_distance(b, reference),
        "train_vs_reference": fidlib.frechet_distance(c, reference),
    }
    degraded: dict[str, dict[str, float]] = {}
    for kind, amount in tqdm(DEGRADATIONS, desc="degraded FID", disable=not progress):
        d = stats(degrade(held_b, kind, amount, seed=cfg.data_seed), f"{kind}-{amount}")
        degraded[f"{kind} {amount:g}"] = {"vs_heldout": fidlib.frechet_distance(d, a),
                                          "vs_reference": fidlib.frechet_distance(d, reference)}
    out["degraded"] = degraded
    if vq is not None:
        out["vq_reconstruction"] = _vq_figures(vq, held_b, a, reference, stats)
    # How spread the feature space is (a saturated space has a few dominant directions).
    eig = np.clip(np.linalg.eigvalsh(a.sigma), 0, None)
    out["feature_dim"] = int(a.mu.shape[0])
    out["participation_ratio"] = float(eig.sum() ** 2 / max((eig ** 2).sum(), 1e-30))
    return out


def _vq_figures(vq: str, images: np.ndarray, a: Any, reference: Any, stats: Callable) -> dict[str, Any]:
    """rFID of a VQ tokenizer folder's reconstructions of the held-out set ``images``."""
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel

    model = LlamaGenVQModel.from_pretrained(vq, torch_dtype=torch.float32).eval()
    recon = []
    with torch.no_grad():
        for i in range(0, len(images), 50):
            x = torch.from_numpy(images[i:i + 50]).permute(0, 3, 1, 2).float() / 127.5 - 1.0
            y = model.decode_codes(model.encode(x))
            recon.append(((y.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy())
    d = stats(np.concatenate(recon), "vq")
    return {"folder": str(vq), "vs_heldout": fidlib.frechet_distance(d, a),
            "vs_reference": fidlib.frechet_distance(d, reference)}



def evaluate(net: DomainClassifier, cfg: DomainTrainConfig, vq: str | None = None, progress: bool = True
             ) -> dict[str, Any]:
    """Accuracy on held-out and training images, and the FID figures (module docstring), of ``net``."""
    images, labels, _ = labelled_images(cfg.data, cfg.final_eval_size, "heldout", cfg.image_size,
                                        cfg.data_seed + 4, cfg.crop_scale)
    acc = evaluate_accuracy(net, images, labels)
    train_images, train_labels, _ = labelled_images(cfg.data, cfg.final_eval_size, "train", cfg.image_size,
                                                    cfg.data_seed + 6, cfg.crop_scale)
    return {
        "heldout_accuracy": acc["accuracy"],
        "heldout_nll": acc["nll"],
        "heldout_per_class_accuracy": acc["per_class"],
        "train_crop_accuracy": evaluate_accuracy(net, train_images, train_labels)["accuracy"],
        "accuracy_crops": cfg.final_eval_size,
        "fid": fid_figures(net, cfg, vq=vq, progress=progress),
    }


# ---------------------------------------------------------------------------------------------- model card

def _data_section(cfg: DomainTrainConfig, m: dict[str, Any]) -> str:
    if cfg.data == "emoji":
        return (data_recipe("emoji", cfg.image_size) + f" {m['train_crops_seen']:,} training views seen in all "
                f"(batch {cfg.batch_size}). No colour jitter and no blur or noise augmentation (the features must "
                f"stay sensitive to them). All evaluation below uses held-out emoji only (augmented views of "
                f"emoji the network never saw), except the train-vs-held-out row: held-out accuracy measures how "
                f"well the network names the *class* of an emoji it has never seen.")
    return f"""`arvis.data.crops`: every photo is split into a train region and a disjoint held-out vertical strip on
its right (25% of the width, at least 128 px). Training sees only train-region crops, drawn fresh every
step: square side {cfg.crop_scale[0]}-{cfg.crop_scale[1]} x the region's short side, random position,
random left-right flip, PIL bicubic (antialiased) resize to {cfg.image_size} px; {m['train_crops_seen']:,}
crops in all (batch {cfg.batch_size}). No colour jitter (the class is the photo, colour included), no blur
or noise augmentation (the features must stay sensitive to them). All evaluation below uses held-out
crops only, except the train-vs-held-out row."""


def model_card(cfg: DomainTrainConfig, m: dict[str, Any], name: str = "domain-classifier") -> ModelCard:
    """Model card of the exported network (``name``: the folder's name)."""
    f = m["fid"]
    tl = m["final_train"]
    degraded = [(k, f"{v['vs_heldout']:.2f}", f"{v['vs_reference']:.2f}") for k, v in f["degraded"].items()]
    vq_row = ""
    if "vq_reconstruction" in f:
        v = f["vq_reconstruction"]
        vq_row = f"| VQ reconstruction (`{v['folder']}`) | {v['vs_heldout']:.2f} | {v['vs_reference']:.2f} |\n"
    worst = sorted(m["heldout_per_class_accuracy"].items(), key=lambda kv: kv[1])[:4]
    names = class_names(cfg.data)
    what = (f"to classify {len(names)}-way which offline photo (`arvis.data.photos.PHOTO_CLASSES`) a\n"
            f"{cfg.image_size}-px crop comes from" if cfg.data == "photos" else
            f"to classify {len(names)}-way which emoji class (`arvis.data.emoji.EMOJI_CLASSES`) a\n"
            f"{cfg.image_size}-px OpenMoji render belongs to")
    alias = "domain" if cfg.data == "photos" else "domain-emoji"
    unit = "crops" if cfg.data == "photos" else "emoji views"
    return ModelCard(
        title=f"{name}: arvis's FID feature network for {cfg.data}",
        summary=f"""A `DomainClassifier` (`arvis.models.domain_net`; a small GroupNorm CNN) trained by `arvis.training.train_domain`
{what}. Its global-average-pooled last stage ({f['feature_dim']}-d) is the
feature space of arvis's FID (`arvis fid`, `arvis.eval.fid`), standing in for Inception, which cannot be
downloaded here. FIDs in this space are *not* comparable with Inception FIDs from papers; compare them with
the floor below.""",
        usage=f"""from arvis.eval.fid import compute_fid, load_extractor
extractor = load_extractor("{alias}")          # this folder; fp16 file, fp32 network
result = compute_fid(images_uint8, extractor=extractor, floor=True{'' if cfg.data == 'photos' else ', data="emoji"'})   # vs 5000 held-out {unit}""",
        architecture=Section("Architecture", f"""Stem conv (stride 2) + {len(cfg.channels)} stages of widths {list(cfg.channels)} ({cfg.convs_per_stage} x
[3x3 conv, GroupNorm({cfg.norm_groups}), SiLU], every stage after the first halving the resolution), global
average pooling, dropout {cfg.dropout}, linear head. {m['params']:,} parameters, {m['safetensors_mb']:.2f} MB
as fp16 safetensors. Input: `[B, 3, {cfg.image_size}, {cfg.image_size}]` pixel values in 0..255."""),
        data=Section("Data (no leakage)", _data_section(cfg, m)),
        training=Training([m["command"]], f"""{export_note(m, "Exported")}Cross-entropy (no label smoothing), AdamW (betas 0.9/0.99, lr {cfg.lr}, weight decay {cfg.weight_decay},
{cfg.warmup} warm-up steps, cosine to {cfg.min_lr_ratio}x), grad-norm clip {cfg.grad_clip}, EMA {cfg.ema_decay}
(the EMA weights are shipped). {m['steps']} steps, {m['train_minutes']:.1f} min of training wall time on one
CPU thread (2-core machine shared with other trainings). Final training loss (mean of the last
{cfg.log_every} steps): cross-entropy {tl.get('loss', float('nan')):.4f}, batch accuracy
{tl.get('acc', float('nan')):.3f}."""),
        evaluation=Section("Evaluation (the shipped fp16 file, reloaded through `load_domain_network`)", f"""Computed by `eval/cards.py --evaluate` (fixed seeds: rerunning it on this folder reproduces these figures):
```
{m.get('eval_command', f'python eval/cards.py --model arvis/weights/{name} --evaluate')}
```
Held-out accuracy: **{100 * m['heldout_accuracy']:.2f}%** on {m['accuracy_crops']} held-out {unit} (seed
{cfg.data_seed + 4}; NLL {m['heldout_nll']:.3f}); on {m['accuracy_crops']} training {unit}
{100 * m['train_crop_accuracy']:.2f}%. Hardest classes: {', '.join(f'{k} {100 * v:.0f}%' for k, v in worst)}.

FID (clean-fid's Fréchet distance through `arvis.eval.fid`, {f['fid_size']} images per set, {cfg.image_size}-px {unit};
"A" = held-out {unit} seed 0, "B" = held-out {unit} seed 1, "reference" = the {f['reference_size']}
held-out {unit} (seed 0) that `compute_fid` uses by default):

{table(("sets", "FID"), [
    ("held-out A vs held-out B (**real-vs-real floor**, 1k vs 1k)", f"{f['heldout_vs_heldout']:.2f}"),
    ("held-out B vs reference (the floor `compute_fid(..., floor=True)` reports for 1k images)",
     f"{f['heldout_vs_reference']:.2f}"),
    (f"training {unit} (seed {cfg.data_seed + 5}) vs held-out A", f"{f['train_vs_heldout']:.2f}"),
    (f"training {unit} vs reference", f"{f['train_vs_reference']:.2f}")])}

Degraded held-out B (the same crops, degraded) against held-out A and against the reference:

{table(("degradation", "FID vs A", "FID vs reference"), degraded)}
{vq_row}
blur = PIL Gaussian blur (sigma in px), noise = additive Gaussian noise (std in 0..255 units), jpeg =
JPEG quality (blocky, VQ-like artefacts), downup = bicubic down-sampling by the factor and back.
Feature spread: participation ratio of the held-out covariance {f['participation_ratio']:.1f} of
{f['feature_dim']} dimensions.

Fingerprint (sha256 over config and weights; names the feature space in cached statistics):
`{m['fingerprint']}`."""))


# ---------------------------------------------------------------------------------------------- eval/cards.py
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a domain network's card (``python eval/cards.py --model FOLDER``)."""
    parser.add_argument("--evaluate", action="store_true",
                        help="reload the shipped weights and evaluate them (minutes) into metrics.json first")
    parser.add_argument("--vq", default=None, help="with --evaluate: also report the rFID of this VQ tokenizer "
                                                   "folder's reconstructions")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of --evaluate")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def card(folder: Path, args: argparse.Namespace) -> ModelCard:
    """The card of an exported domain network folder; with ``--evaluate`` its ``metrics.json`` is (re)made first
    from ``training_metrics.json`` and an evaluation of the shipped weights."""
    if not (folder / "training_metrics.json").is_file():
        raise ValueError(f"--model {folder}: no training_metrics.json (export it with python -m "
                         f"arvis.training.train_domain)")
    if args.evaluate:
        metrics = evaluate_folder(folder, args.vq, args.threads, not args.no_progress)
    else:
        metrics = json.loads((folder / "metrics.json").read_text())
    return model_card(config_from_record(DomainTrainConfig, metrics["config"]), metrics, folder.name)


def evaluate_folder(folder: Path, vq: str | None = None, threads: int = 1, progress: bool = True) -> dict[str, Any]:
    """Evaluate the shipped network of ``folder`` and write its ``metrics.json`` (training and evaluation)."""
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    torch.set_num_threads(threads)
    training = json.loads((folder / "training_metrics.json").read_text())
    cfg = config_from_record(DomainTrainConfig, training["config"])
    shipped = load_domain_network(folder)  # what users get: fp16 file, fp32 network
    t0 = time.time()
    evaluation = evaluate(shipped, cfg, vq=vq, progress=progress)
    # The command that reproduces these figures, without this machine's paths (records carry none).
    command = portable_command(f"python eval/cards.py --model {shlex.quote(str(folder))} --evaluate"
                               + (f" --vq {shlex.quote(vq)}" if vq else ""))
    metrics = {**training, **evaluation, "eval_minutes": (time.time() - t0) / 60, "eval_command": command}
    write_json_atomic(folder / "metrics.json", metrics)
    print(json.dumps({k: v for k, v in metrics.items() if k != "config"}, indent=2))
    return metrics
