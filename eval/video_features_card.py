"""The evaluation and model card of an exported video feature network (a card kind of ``eval/cards.py``).

    python eval/cards.py --model arvis/weights/video-features --evaluate [--vq arvis/weights/vq-photos]

The folder is what ``python -m arvis.training.train_video_features`` exported (fp16 safetensors and
``training_metrics.json``). The shipped fp16 weights are reloaded and evaluated on held-out clips: held-out
accuracy over the 24 video classes, and the domain FVD (:mod:`arvis.eval.video_metrics`) of controls
against other held-out clips — an independent held-out draw (the floor), the same clips with their frames
shuffled in time, frozen on their first frame, and reconstructed by the per-frame VQ (``--vq``; '' skips it).
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
from arvis.training.common import config_from_record  # noqa: E402
from arvis.training.train_video_features import VideoFeatureConfig, _clips, accuracy  # noqa: E402
from arvis.utils.model_card import ModelCard, Section, Training, table  # noqa: E402


def evaluate(net: Any, cfg: VideoFeatureConfig, vq: str | None, num: int) -> dict[str, Any]:
    """Held-out accuracy and the domain FVD of controls (module docstring) for ``num`` held-out clips."""
    from arvis.eval import video_metrics as vm

    extractor = vm.VideoFeatures(net)
    held, labels = _clips(cfg, "heldout", num, cfg.data_seed + 11)
    out: dict[str, Any] = {"heldout_accuracy": accuracy(net, held, labels), "eval_clips": num}
    reference = vm.clip_statistics(vm.heldout_clips(num, cfg.num_frames, cfg.resolution, vm.REFERENCE_SEED),
                                   extractor, source="reference")
    rng = np.random.default_rng(0)
    controls = {
        "independent held-out clips (floor)": held,
        "frames shuffled in time": np.stack([c[rng.permutation(len(c))] for c in held]),
        "frozen on the first frame": np.repeat(held[:, :1], cfg.num_frames, axis=1),
    }
    if vq is not None:
        from arvis.tokenizers.llamagen_vq import LlamaGenVQModel

        model = LlamaGenVQModel.from_pretrained(vq, torch_dtype=torch.float32).eval()
        frames = torch.from_numpy(held.reshape(-1, *held.shape[2:])).permute(0, 3, 1, 2).float() / 127.5 - 1
        with torch.no_grad():
            rec = torch.cat([model.decode_codes(model.encode(frames[i:i + 64])) for i in range(0, len(frames), 64)])
        rec = ((rec + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
        controls[f"reconstructed by {Path(vq).name}"] = rec.reshape(held.shape)
    out["fvd_controls"] = {name: vm.frechet_distance(vm.clip_statistics(c, extractor), reference)
                           for name, c in controls.items()}
    return out


def model_card(m: dict[str, Any]) -> ModelCard:
    """The card of the video feature network from its ``metrics.json`` (training and evaluation)."""
    c = m["config"]
    return ModelCard(
        title="video-features: the feature network of arvis's domain FVD",
        summary=f"""A `VideoFeatureNet` (`arvis.models.video_features`): a 3-D CNN (stage widths {c['channels']}, GroupNorm,
SiLU; {m['params']:,} parameters, fp16 safetensors) trained to tell the 24 video classes of `arvis.data.video`
apart from {c['num_frames']}-frame {c['resolution']}-px clips. Its pooled last-stage features are the feature space
of `arvis.eval.video_metrics.frechet_video_distance`: a **domain FVD**, comparable between models measured
with these weights, **not** with published FVDs (those use a Kinetics-400 I3D; `I3DFeatures` computes that one
when you have its TorchScript file).""",
        data=Section("Data", f"""The video GPT's {c['num_train']:,} training clips (`build_video_clips(n, "train", seed={c['data_seed']})`: camera
motion over the scikit-image / scikit-learn photos, OpenMoji emoji — CC BY-SA 4.0, all emojis designed by
OpenMoji — moving, growing, orbiting and morphing, bouncing scikit-learn digits); validation and evaluation
on held-out clips (held-out photo strips, held-out emoji, held-out digit samples)."""),
        training=Training([m["command"]], f"""Cross-entropy, AdamW (lr {c['lr']}, weight decay {c['weight_decay']}), {c['warmup']} warm-up steps, cosine to
{c['min_lr_ratio']}x, batch {c['batch_size']}, EMA {c['ema_decay']} (shipped). {m['steps']} steps,
{m['train_hours']:.2f} h on one CPU thread of a shared 2-core machine. Final training loss
{m['final_train_loss']:.3f}."""),
        evaluation=Section(f"Evaluation (the shipped fp16 weights, {m['eval_clips']} held-out clips)", f"""Held-out accuracy: **{100 * m['heldout_accuracy']:.1f}%** (24 classes; chance 4.2%).

Domain FVD against {m['eval_clips']} other held-out clips (lower is closer):

{table(("clips", "domain FVD"), [(name, f"{value:.2f}") for name, value in m["fvd_controls"].items()])}

The floor is what a perfect generator would score at this size; shuffling frames in time or freezing the
clip must (and does) move the distance far above it — the network sees motion, not only content."""))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the video feature network's card (``python eval/cards.py --model FOLDER``)."""
    parser.add_argument("--evaluate", action="store_true",
                        help="reload the shipped weights and evaluate them into metrics.json first")
    parser.add_argument("--vq", default="arvis/weights/vq-photos",
                        help="with --evaluate: the tokenizer of the reconstruction control ('' = skip)")
    parser.add_argument("--eval-clips", type=int, default=400, help="held-out clips of --evaluate")


def card(folder: Path, args: argparse.Namespace) -> ModelCard:
    """The card of an exported video feature network folder; with ``--evaluate`` its ``metrics.json`` is (re)made
    first from ``training_metrics.json`` and an evaluation of the shipped fp16 weights."""
    if not args.evaluate:
        return model_card(json.loads((folder / "metrics.json").read_text()))
    from arvis.models.video_features import VideoFeatureNet

    training = json.loads((folder / "training_metrics.json").read_text())
    cfg = config_from_record(VideoFeatureConfig, training["config"])
    net = VideoFeatureNet.from_pretrained(str(folder), torch_dtype=torch.float32).eval()  # the shipped fp16 file
    metrics = {**training, **evaluate(net, cfg, args.vq or None, args.eval_clips)}
    write_json_atomic(folder / "metrics.json", metrics)
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}, indent=2))
    return model_card(metrics)
