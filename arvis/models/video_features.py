"""A small 3-D CNN over clips: the feature space of arvis's domain-specific Fréchet video distance.

Trained here (:mod:`arvis.training.train_video_features`) to classify the 24 video classes of
:mod:`arvis.data.video` — camera pans / zooms, emoji slides / growth / orbits / morphs, moving digits —
so its pooled features have to encode *motion* (direction, scaling, a path) as well as content. The
Fréchet distance of those features (:func:`arvis.eval.video_metrics.frechet_video_distance`) is a
domain FVD: comparable between models evaluated with the same weights, **not** with published I3D FVDs.

Input convention (as the image domain network's): ``[B, T, 3, S, S]`` pixel values in ``[0, 255]``
(float or uint8), ``S = config.image_size``; normalisation happens inside. ``features(x)`` is the
global average over time and space of the last stage, ``[B, channels[-1]]``. Group normalisation keeps
every clip's features independent of its batch.
"""

from __future__ import annotations

import torch
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn

from arvis.utils.config_check import Bound, CheckedFolderMixin, check_config

__all__ = ["VIDEO_FEATURE_BOUNDS", "VideoFeatureNet"]

VIDEO_FEATURE_BOUNDS: dict[str, Bound] = {
    "num_classes": Bound.integer(2, 1_000_000),
    "class_names": Bound.strings(1_000_000, optional=True),
    "image_size": Bound.integer(8, 4096),
    "num_frames": Bound.integer(2, 4096),
    "channels": Bound.integers(1, 8192, max_items=16),
    "norm_groups": Bound.integer(1, 8192),
    "dropout": Bound.number(0.0, 1.0, open_high=True),
}


def _block(c_in: int, c_out: int, stride: tuple[int, int, int], groups: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv3d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                         nn.GroupNorm(min(groups, c_out), c_out), nn.SiLU(),
                         nn.Conv3d(c_out, c_out, 3, padding=1, bias=False),
                         nn.GroupNorm(min(groups, c_out), c_out), nn.SiLU())


class VideoFeatureNet(CheckedFolderMixin, ModelMixin, ConfigMixin):
    """Video-class classifier; its pooled features serve the domain FVD.

    Args:
        num_classes: number of video classes.
        class_names: optional names, one per class.
        image_size: the frame side it is trained and evaluated at.
        num_frames: frames per clip it is trained at (features are defined for any ``T``).
        channels: stage widths; the stem and every later stage halve space, stages from the second on
            also halve time.
        norm_groups: GroupNorm groups (capped at the width).
        dropout: before the classification head.
    """

    config_name = "config.json"
    config_bounds = VIDEO_FEATURE_BOUNDS

    @register_to_config
    def __init__(self, num_classes: int = 24, class_names: list[str] | None = None, image_size: int = 64,
                 num_frames: int = 8, channels: tuple[int, ...] = (16, 32, 64, 96), norm_groups: int = 8,
                 dropout: float = 0.1):
        super().__init__()
        check_config(self.config, VIDEO_FEATURE_BOUNDS, source=type(self).__name__)
        channels = tuple(int(c) for c in channels)
        if len(channels) < 2:
            raise ValueError(f"channels must list at least 2 stage widths, got {channels}")
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"class_names has {len(class_names)} names for num_classes={num_classes}")
        self.stem = nn.Sequential(nn.Conv3d(3, channels[0], (3, 3, 3), stride=(1, 2, 2), padding=1, bias=False),
                                  nn.GroupNorm(min(norm_groups, channels[0]), channels[0]), nn.SiLU())
        self.stages = nn.ModuleList(
            _block(c_in, c_out, (2 if i >= 1 else 1, 2, 2), norm_groups)
            for i, (c_in, c_out) in enumerate(zip(channels[:-1], channels[1:], strict=True)))
        self.head_dropout = nn.Dropout(dropout)
        self.head = nn.Linear(channels[-1], num_classes)

    def features(self, clips: torch.Tensor) -> torch.Tensor:
        """``[B, channels[-1]]`` pooled features of ``clips: [B, T, 3, S, S]`` in ``[0, 255]``."""
        if clips.ndim != 5 or clips.shape[2] != 3:
            raise ValueError(f"clips must be [batch, frames, 3, height, width], got shape {tuple(clips.shape)}")
        x = clips.to(self.dtype).permute(0, 2, 1, 3, 4) / 127.5 - 1.0  # [B, 3, T, S, S]
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return x.mean(dim=(2, 3, 4))

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        """Class logits ``[B, num_classes]``."""
        return self.head(self.head_dropout(self.features(clips)))
