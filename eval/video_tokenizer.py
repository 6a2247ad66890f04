#!/usr/bin/env python
"""Which tokenizer for the video model: reconstruction quality of held-out clips at a 512-token budget.

Candidates, each at 512 tokens per 8-frame clip:

- ``per-frame``: a shipped image VQ (``LlamaGenVQModel``, 8x down-sampling) on every frame at 64 px:
  8 frames x 8 x 8 codes;
- ``temporal``: an ``Emu3VQVAE`` folder (transformers) with 4x temporal and 8x spatial compression at
  128 px: 2 x 16 x 16 codes (``--emu3-vq``; evaluated only when such weights are given).

Figures per candidate, on held-out clips of every kind (:func:`arvis.data.video.build_video_clips`):
PSNR per kind (uint8, per clip, on the candidate's own resolution and, for the temporal one, also after
down-sampling to 64 px, the per-frame candidate's resolution), per-frame FID of the reconstructions against
held-out frames (image domain network), and the domain FVD when the video feature network exists.
Writes one JSON record::

    python eval/video_tokenizer.py --json docs/figures/video/tokenizer.json
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

from arvis.data.video import build_video_clips, video_class_kind  # noqa: E402
from arvis.eval import video_metrics as vm  # noqa: E402
from arvis.eval.files import write_json_atomic  # noqa: E402


def _to_uint8(x: torch.Tensor) -> np.ndarray:
    return ((x.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).numpy()


@torch.no_grad()
def per_frame_reconstruct(vq_path: str, clips: np.ndarray, batch: int = 64) -> np.ndarray:
    """Encode and decode every frame of ``clips uint8 [N, T, R, R, 3]`` with an image VQ folder."""
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel

    vq = LlamaGenVQModel.from_pretrained(vq_path, torch_dtype=torch.float32).eval()
    frames = torch.from_numpy(clips.reshape(-1, *clips.shape[2:])).permute(0, 3, 1, 2).float() / 127.5 - 1
    out = torch.cat([vq.decode_codes(vq.encode(frames[i:i + batch])) for i in range(0, len(frames), batch)])
    return _to_uint8(out.permute(0, 2, 3, 1)).reshape(clips.shape)


@torch.no_grad()
def temporal_reconstruct(emu3_path: str, clips: np.ndarray, batch: int = 4) -> tuple[np.ndarray, tuple[int, ...]]:
    """Encode and decode whole clips with an ``Emu3VQVAE`` folder (its own temporal compression).

    Returns the reconstructions ``uint8 [N, T, R, R, 3]`` and the code grid ``(T', h, w)`` of one clip.
    """
    from transformers import Emu3VQVAE

    vq = Emu3VQVAE.from_pretrained(emu3_path, torch_dtype=torch.float32).eval()
    out, grid = [], ()
    for i in range(0, len(clips), batch):
        x = torch.from_numpy(clips[i:i + batch]).permute(0, 1, 4, 2, 3).float() / 127.5 - 1  # [B, T, 3, R, R]
        sizes = torch.tensor([[clips.shape[2], clips.shape[3]]] * len(x))
        codes = torch.stack(vq.encode(x, sizes).image_tokens)  # [B, T', h, w]
        grid = tuple(codes.shape[1:])
        out.append(_to_uint8(vq.decode(codes).permute(0, 1, 3, 4, 2)))
    return np.concatenate(out), grid


def psnr_by_kind(clips: np.ndarray, recon: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    mse = ((clips.astype(np.float64) - recon.astype(np.float64)) ** 2).mean(axis=(1, 2, 3, 4))
    psnr = 10 * np.log10(255.0 ** 2 / np.maximum(mse, 1e-10))
    kinds = np.array([video_class_kind(k) for k in labels])
    out = {str(kind): float(psnr[kinds == kind].mean()) for kind in sorted(set(kinds))}
    out["all"] = float(psnr.mean())
    return out


def downsample(clips: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image

    out = np.empty((*clips.shape[:2], size, size, 3), dtype=np.uint8)
    for i, clip in enumerate(clips):
        for t, frame in enumerate(clip):
            out[i, t] = np.asarray(Image.fromarray(frame).resize((size, size), Image.Resampling.BICUBIC))
    return out


def quality(recon: np.ndarray, clips: np.ndarray, labels: np.ndarray, reference_frames: int, fvd: bool
            ) -> dict[str, Any]:
    row: dict[str, Any] = {"psnr": psnr_by_kind(clips, recon, labels)}
    row["per_frame_fid"] = vm.per_frame_fid(recon, reference_frames=reference_frames).to_dict()
    if fvd:
        row["domain_fvd"] = vm.frechet_video_distance(recon).to_dict()
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vq", default="arvis/weights/vq-photos", help="image VQ folder (per-frame candidate)")
    p.add_argument("--emu3-vq", default=None, help="Emu3VQVAE folder with temporal compression (temporal candidate)")
    p.add_argument("--clips", type=int, default=200, help="held-out clips")
    p.add_argument("--reference-frames", type=int, default=4000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", required=True)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    fvd = (vm.VIDEO_FEATURES_DIR / "config.json").is_file()
    clips64 = build_video_clips(args.clips, "heldout", 8, 64, seed=42, cache=True)
    record: dict[str, Any] = {"clips": args.clips, "num_frames": 8, "seed": 42, "candidates": {}}
    recon = per_frame_reconstruct(args.vq, clips64.clips)
    record["candidates"]["per-frame"] = {"tokenizer": Path(args.vq).name, "resolution": 64,
                                         "tokens_per_clip": 8 * 8 * 8, "grid": [8, 8, 8],
                                         **quality(recon, clips64.clips, clips64.labels, args.reference_frames, fvd)}
    real = {"per_frame_fid": vm.per_frame_fid(clips64.clips, reference_frames=args.reference_frames).to_dict()}
    if fvd:
        real["domain_fvd"] = vm.frechet_video_distance(clips64.clips).to_dict()
    record["real_clips"] = real
    if args.emu3_vq:
        clips128 = build_video_clips(args.clips, "heldout", 8, 128, seed=42, cache=True)
        recon128, grid = temporal_reconstruct(args.emu3_vq, clips128.clips)
        small = downsample(recon128, 64)
        record["candidates"]["temporal"] = {
            "tokenizer": Path(args.emu3_vq).name, "resolution": 128, "grid": list(grid),
            "tokens_per_clip": int(np.prod(grid)), "psnr_at_128": psnr_by_kind(clips128.clips, recon128, clips128.labels),
            # Compared at 64 px with the 128-px clips down-sampled the same way (the per-frame candidate's resolution).
            **quality(small, downsample(clips128.clips, 64), clips64.labels, args.reference_frames, fvd)}
    write_json_atomic(args.json, record)
    print(json.dumps(record, indent=2))
    return record


if __name__ == "__main__":
    main()
