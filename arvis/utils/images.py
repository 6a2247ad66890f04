"""Image array conversions shared by the trainers and the evaluation: ``uint8 [N, H, W, 3]`` <-> ``[N, 3, H, W]``
in ``[-1, 1]`` (the range every arvis tokenizer reads and writes)."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["to_tensor", "to_uint8"]


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """``uint8 [N, H, W, 3]`` -> ``float32 [N, 3, H, W]`` in ``[-1, 1]``."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """``[N, 3, H, W]`` in ``[-1, 1]`` -> ``uint8 [N, H, W, 3]`` (rounded, clamped)."""
    x = ((images.detach().float().clamp(-1, 1) + 1.0) * 127.5).round()
    return x.to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()
