"""Image array conversions shared by the trainers and the evaluation: ``uint8 [N, H, W, 3]`` <-> ``[N, 3, H, W]``
in ``[-1, 1]`` (the range every arvis tokenizer reads and writes)."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["mean_psnr", "to_tensor", "to_uint8"]


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """``uint8 [N, H, W, 3]`` -> ``float32 [N, 3, H, W]`` in ``[-1, 1]``."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)


def mean_psnr(images: np.ndarray, reconstructions: np.ndarray) -> float:
    """The mean over images of the per-image PSNR in dB of ``uint8 [N, H, W, 3]`` reconstructions (each image's MSE
    floored at 1e-10, so that an exact copy counts as 100 dB)."""
    err = (reconstructions.astype(np.float64) - images.astype(np.float64)) / 255.0
    return float(np.mean(10 * np.log10(1.0 / np.maximum((err ** 2).mean(axis=(1, 2, 3)), 1e-10))))


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """``[N, 3, H, W]`` in ``[-1, 1]`` -> ``uint8 [N, H, W, 3]`` (rounded, clamped)."""
    x = ((images.detach().float().clamp(-1, 1) + 1.0) * 127.5).round()
    return x.to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()
