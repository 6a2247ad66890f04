#!/usr/bin/env python
"""Temporal against spatial initial drafts on a video GPT: one JSON record (and its table), one command.

    python eval/video_temporal_drafting.py --checkpoint runs/video/run/checkpoint.pt \\
        --json docs/figures/video/temporal-drafting.json

The model is a :class:`~arvis.models.video.VideoTransformer` of the ``video`` preset of
:mod:`arvis.training.train_video` (8 frames of 8 x 8 tokens, vocabulary 1,024) loaded from a training
checkpoint of that command, or, with ``--checkpoint none``, the untrained model as the trainer creates it.
The record names which, with the checkpoint's step, its last logged training loss and its sha256 — a
checkpoint of a run stopped early is a *briefly trained* model, and the figures say what it does, not
what a trained video model would do.

Three measurements:

- ``data``: on held-out clips (the trainer's cached held-out codes), how often a token equals the token of
  the same cell one frame back (what ``repeat_temporal`` copies), of the row above (``repeat_vertical``)
  and of the left neighbour (``repeat_horizontal``), per clip kind — what the clips themselves offer;
- ``teacher_forced``: on the same clips, the probability that the *first* draft of each position is
  accepted, given the real prefix, under the model's CFG distribution ``p_j``: ``p_j(x)`` for a copied
  token ``x`` (one-hot ``q``), ``1 − TV(p_j, p_s)`` for a draw from the source's ``p_s``, ``1 − TV(p_j,
  uniform)`` for random drafts — the model's agreement with each initialisation — and, as a measure of
  how much the model has learned, the mean probability it gives the clip's own token (uniform: 1 / 1,024);
- ``decode``: SJD / MC-SJD (maximal and Gumbel coupling) at several windows with every initialisation,
  the same clips (classes and per-clip generators) for every configuration: mean target forwards per clip
  and step compression (``T·H·W / forwards``; plain AR needs one forward per token). MC-SJD with Gumbel
  coupling must reproduce plain AR's clips token for token (checked and recorded: a losslessness check
  on the real model, beside the statistical proof of tests/pipelines/video/test_video_lossless.py).

Forward counts do not depend on the machine's load, so no quiet machine is needed; wall time is recorded
for information only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from arvis.eval.files import write_bytes_atomic, write_json_atomic  # noqa: E402

SPATIAL = ("random", "repeat_horizontal", "repeat_vertical", "neighbour_distribution")
TEMPORAL = ("repeat_temporal", "previous_frame_distribution")
#: (method, coupling, window) of the decode table.
CONFIGS = (("sjd", "none", 16), ("sjd", "none", 64), ("mc-sjd", "maximal", 16), ("mc-sjd", "maximal", 64),
           ("mc-sjd", "maximal", 128), ("mc-sjd", "gumbel", 64), ("mc-sjd", "gumbel", 128))
#: Two classes of each clip kind: camera zoom in / pan left, emoji slide up / orbit, digit 3 / digit 7.
CLASSES = (4, 0, 8, 12, 17, 21)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_model(checkpoint: str, vq: str) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The ``video`` preset's model, with the checkpoint's raw weights (or untrained), and what it is."""
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
    from arvis.training.common import load_checkpoint
    from arvis.training.train_video import PRESETS, build_video_models

    cfg = PRESETS["video"]
    vq_config = LlamaGenVQModel.load_config(vq)
    vocab = vq_config["codebook_size"]
    grid = cfg.resolution // 2 ** (len(vq_config["encoder_ch_mult"]) - 1)
    model, _ = build_video_models(cfg, vocab, grid)
    about: dict[str, Any] = {"preset": "video", "config": {k: model.config[k] for k in (
        "dim", "n_layer", "n_head", "vocab_size", "num_frames", "frame_size", "num_classes")},
        "parameters": sum(p.numel() for p in model.parameters())}
    if checkpoint == "none":
        about.update(state="untrained", note="the trainer's initialisation (init_weights, seed = data seed): its "
                     "head is zero, so every p is uniform")
    else:
        path = Path(checkpoint)
        saved = load_checkpoint(path)
        model.load_state_dict(saved["model"])
        state = json.loads(saved["state"])
        logged = [h for h in state.get("history", []) if "loss" in h]
        about.update(state="briefly trained", checkpoint=path.name, checkpoint_sha256=sha256(path),
                     step=state["step"], planned_steps=cfg.steps, weights="raw (not EMA)",
                     training_loss_at=({"step": logged[-1]["step"], "loss": logged[-1]["loss"]} if logged else None),
                     uniform_loss=float(np.log(vocab)),
                     command=f"python -m arvis.training.train_video --preset video (stopped at step {state['step']} "
                             f"of {cfg.steps}: the run died with its session)")
    return model.eval(), about


def heldout_clips(scratch: Path, vq: str, n: int) -> dict[str, np.ndarray]:
    """The trainer's held-out codes ``[n, T*H*W]`` and labels (built and cached like the trainer does)."""
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
    from arvis.training.train_video import PRESETS, build_video_dataset

    cfg = PRESETS["video"]
    path = scratch / f"data-video-heldout-{cfg.num_val}-{cfg.data_seed}-{cfg.resolution}-8.npz"
    if path.exists():
        data = dict(np.load(path, allow_pickle=False))
    else:
        scratch.mkdir(parents=True, exist_ok=True)
        vq_model = LlamaGenVQModel.from_pretrained(vq, dtype=torch.float32).eval()
        data = build_video_dataset(cfg, vq_model, scratch, "heldout", cfg.num_val)
    return {k: v[:n] for k, v in data.items()}


def repeat_rates(codes: np.ndarray, labels: np.ndarray, T: int, S: int) -> dict[str, Any]:
    """Fraction of tokens (frames 1.. only, so every source exists) equal to each source, per clip kind."""
    from arvis.data.video import video_class_kind

    clips = codes.reshape(-1, T, S, S)
    later = clips[:, 1:]
    same = {"previous_frame": later == clips[:, :-1],
            "row_above": (later[:, :, 1:] == later[:, :, :-1]),
            "left": (later[:, :, :, 1:] == later[:, :, :, :-1])}
    kinds = np.array([video_class_kind(int(c)) for c in labels])
    out: dict[str, Any] = {}
    for kind in ["all", *sorted(set(kinds))]:
        rows = np.ones(len(kinds), bool) if kind == "all" else kinds == kind
        out[kind] = {"clips": int(rows.sum()), **{k: float(v[rows].mean()) for k, v in same.items()}}
    return out


def _copied(pj: torch.Tensor, x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``[B, M]``: acceptance probability ``p_j(x_s)`` of copying the token at ``source [M]`` (one-hot q)."""
    return pj.gather(2, x[:, source][..., None])[..., 0]


def _agreement(p: torch.Tensor, j: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``[B, M]``: acceptance probability ``1 − TV(p_j, p_s)`` of a draft drawn from the source's ``p``."""
    return 1 - 0.5 * (p[:, j] - p[:, source]).abs().sum(-1)


@torch.no_grad()
def teacher_forced(model: torch.nn.Module, codes: np.ndarray, labels: np.ndarray, guidance: float,
                   batch: int = 16) -> dict[str, float]:
    """Mean first-draft acceptance probability of each initialisation over positions of frames 1.. (see the
    module docstring), under the CFG distribution the decoders sample from."""
    from arvis.engine.sampling import SamplingConfig, logits_to_probs
    from arvis.models.protocol import Condition

    T, S = model.config.num_frames, model.config.frame_size
    F, N = S * S, T * S * S
    sampling = SamplingConfig(guidance_scale=guidance)
    sums: dict[str, float] = {}
    count = 0
    for i in range(0, len(codes), batch):
        x = torch.from_numpy(codes[i:i + batch].astype(np.int64))
        y = torch.from_numpy(labels[i:i + batch].astype(np.int64))
        cond = model(x, Condition(class_labels=y))
        null = model(x, Condition(class_labels=y), drop_condition=torch.ones(len(y), dtype=torch.bool))
        p = logits_to_probs(cond, null, sampling, torch.arange(N).expand(len(y), N))  # [B, N, V]
        j = torch.arange(F, N)
        pj = p[:, j]
        uniform = torch.full_like(pj, 1.0 / pj.shape[-1])

        # Spatial sources as the drafter reads them: rows run on across frames (the row above a frame's
        # first row is the previous frame's last row).
        left = j - 1
        values = {"random": 1 - 0.5 * (pj - uniform).abs().sum(-1), "repeat_horizontal": _copied(pj, x, left),
                  "repeat_vertical": _copied(pj, x, j - S), "neighbour_distribution": _agreement(p, j, j - S),
                  "repeat_temporal": _copied(pj, x, j - F), "previous_frame_distribution": _agreement(p, j, j - F),
                  "p_of_the_clips_own_token": _copied(pj, x, j)}  # how well the model predicts the data itself
        for k, v in values.items():
            sums[k] = sums.get(k, 0.0) + float(v.sum())
        count += pj.shape[0] * pj.shape[1]
    return {k: v / count for k, v in sums.items()}


def run_decodes(model: torch.nn.Module, guidance: float, seed: int, configs, inits, progress: bool
                ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every (config x init) on the same clips; plain AR once (forwards and the Gumbel reference tokens)."""
    from arvis.engine.sampling import SamplingConfig
    from arvis.methods import decode
    from arvis.models.protocol import Condition

    sampling = SamplingConfig(guidance_scale=guidance)
    condition = Condition(class_labels=torch.tensor(CLASSES))

    def generators() -> list[torch.Generator]:
        return [torch.Generator().manual_seed(seed + i) for i in range(len(CLASSES))]

    t0 = time.perf_counter()
    ar_tokens, ar_stats = decode(model, condition, sampling, "ar", generators())
    ar = {"method": "ar", "target_forwards": ar_stats.summary()["target_forwards"], "step_compression": 1.0,
          "wall_s": round(time.perf_counter() - t0, 2)}
    rows = []
    for method, coupling, window in configs:
        for init in inits:
            t0 = time.perf_counter()
            tokens, stats = decode(model, condition, sampling, method, generators(), window=window, init=init,
                                   coupling=coupling)
            s = stats.summary()
            row = {"method": method, "coupling": coupling, "window": window, "init": init,
                   "kind": "temporal" if init in TEMPORAL else "spatial",
                   "target_forwards": s["target_forwards"], "step_compression": s["step_compression"],
                   "accepted_per_forward": s["accepted_per_forward"],
                   "per_clip_forwards": [x.target_forwards for x in stats.samples],
                   "wall_s": round(time.perf_counter() - t0, 2)}
            if coupling == "gumbel":
                row["same_tokens_as_ar"] = bool(torch.equal(tokens, ar_tokens))
            rows.append(row)
            if progress:
                print(f"{method:6s} {coupling:7s} L={window:3d} {init:27s} forwards {row['target_forwards']:6.1f} "
                      f"compression {row['step_compression']:5.2f}x" +
                      (f" same-as-AR {row['same_tokens_as_ar']}" if "same_tokens_as_ar" in row else ""), flush=True)
    return rows, ar


def markdown(record: dict[str, Any]) -> str:
    m = record["model"]
    head = (f"untrained ({m['note']})" if m["state"] == "untrained" else
            f"briefly trained: {m['checkpoint']} at step {m['step']} of {m['planned_steps']}, training loss "
            f"{m['training_loss_at']['loss']:.2f} at step {m['training_loss_at']['step']} (uniform: "
            f"{m['uniform_loss']:.2f}), sha256 {m['checkpoint_sha256'][:12]}")
    lines = [f"# Temporal against spatial initial drafts ({record['model']['state']} video GPT)", "",
             f"Model: `video` preset ({m['parameters']:,} parameters), {head}.",
             f"Built by `{record['command']}`.", "",
             f"How much the model has learned: it gives the held-out clips' own tokens a mean probability of "
             f"{record['teacher_forced']['p_of_the_clips_own_token']:.4f} (uniform: {1 / m['config']['vocab_size']:.4f}). "
             "Where the model's distributions barely depend on the prefix, drafts drawn from any neighbour's "
             "distribution are accepted and the step compressions below are those of a near-constant model, not "
             "of a trained video model.", "",
             f"## Held-out clips ({record['data']['all']['clips']}): tokens equal to their source (frames 1..)", "",
             "| kind | clips | previous frame | row above | left |", "|---|---|---|---|---|"]
    for kind, r in record["data"].items():
        lines.append(f"| {kind} | {r['clips']} | {r['previous_frame']:.3f} | {r['row_above']:.3f} | {r['left']:.3f} |")
    tf = record["teacher_forced"]
    lines += ["", f"## First-draft acceptance probability, teacher-forced on those clips (CFG "
              f"{record['sampling']['guidance_scale']})", "", "| init | mean acceptance |", "|---|---|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in tf.items()]
    lines += ["", f"## Decoding {len(record['classes'])} clips (classes {record['classes']}, seeds "
              f"{record['seed']}..): mean target forwards per clip (AR: {record['ar']['target_forwards']:.0f})", "",
              "| method | coupling | window | " + " | ".join(record["inits"]) + " |",
              "|---|---|---|" + "---|" * len(record["inits"])]
    for method, coupling, window in record["configs"]:
        cells = []
        for init in record["inits"]:
            r = next(r for r in record["rows"] if (r["method"], r["coupling"], r["window"], r["init"]) ==
                     (method, coupling, window, init))
            mark = "" if r.get("same_tokens_as_ar", True) else " (differs from AR!)"
            cells.append(f"{r['target_forwards']:.1f} ({r['step_compression']:.2f}x){mark}")
        lines.append(f"| {method} | {coupling} | {window} | " + " | ".join(cells) + " |")
    gumbel = [r for r in record["rows"] if "same_tokens_as_ar" in r]
    if gumbel:
        same = sum(r["same_tokens_as_ar"] for r in gumbel)
        lines += ["", f"MC-SJD with Gumbel coupling reproduced plain AR's clips token for token in {same} of "
                  f"{len(gumbel)} configurations."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="a train_video checkpoint.pt, or 'none' (untrained)")
    p.add_argument("--vq", default="arvis/weights/vq-photos", help="the per-frame VQ (its config sets the vocabulary)")
    p.add_argument("--scratch", default="runs/video/run", help="where the trainer caches its held-out codes")
    p.add_argument("--json", required=True, help="the record to write (a .md table is written beside it)")
    p.add_argument("--heldout", type=int, default=64, help="held-out clips for the data / teacher-forced figures")
    p.add_argument("--guidance-scale", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--windows", default="", help="restrict the decode table to these windows (comma-separated)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    configs = [c for c in CONFIGS if not args.windows or str(c[2]) in args.windows.split(",")]
    model, about = load_model(args.checkpoint, args.vq)
    data = heldout_clips(Path(args.scratch), args.vq, args.heldout)
    T, S = model.config.num_frames, model.config.frame_size
    record: dict[str, Any] = {
        "what": "temporal vs spatial Jacobi initial drafts on a video GPT (forwards; not latency)",
        "command": "python eval/video_temporal_drafting.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": about, "sampling": {"guidance_scale": args.guidance_scale, "top_k": 0, "temperature": 1.0},
        "tokens_per_clip": T * S * S, "classes": list(CLASSES), "seed": args.seed,
        "inits": [*SPATIAL, *TEMPORAL], "configs": [list(c) for c in configs],
        "data": repeat_rates(data["codes"], data["labels"], T, S),
        "teacher_forced": teacher_forced(model, data["codes"], data["labels"], args.guidance_scale),
    }
    print(json.dumps({k: record[k] for k in ("data", "teacher_forced")}, indent=1), flush=True)
    record["rows"], record["ar"] = run_decodes(model, args.guidance_scale, args.seed, configs, record["inits"], True)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, record)
    write_bytes_atomic(out.with_suffix(".md"), markdown(record).encode())
    print(markdown(record))
    print(f"wrote {out}")
    return record


if __name__ == "__main__":
    main()
