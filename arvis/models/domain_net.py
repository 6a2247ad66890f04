"""The domain feature network: a small CNN classifier over a data set's classes (the photos, the emoji), whose
penultimate layer is arvis's FID feature space (Inception weights are not reachable offline).

The shipped networks, by alias (:data:`DOMAIN_NETWORKS`): ``"domain"`` (``arvis/weights/domain-classifier``,
22 photo classes) and ``"domain-emoji"`` (``arvis/weights/domain-emoji``, 52 emoji classes). The atomic folder
writer (:func:`arvis.eval.domain.save_domain_network`) lives in :mod:`arvis.eval.domain`.

Folder format (``save_domain_network`` / ``load_domain_network``; diffusers ``ModelMixin`` layout)::

    domain-classifier/
        config.json                              # num_classes, class_names, image_size, channels, ...
        diffusion_pytorch_model.safetensors      # weights

Input convention (the same as clean-fid's ``custom_feat_extractor``): ``[B, 3, S, S]`` pixel values in
``[0, 255]`` (float or uint8), ``S = config.image_size``; normalisation happens inside. ``features(x)``
is the global-average-pooled output of the last stage, ``[B, channels[-1]]``.

Group normalisation (not batch norm) keeps every sample's features independent of the batch it is in.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
import torch.nn as nn
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config

from arvis.utils.config_check import Bound, CheckedFolderMixin, check_config
from arvis.utils.paths import WEIGHTS_DIR

#: Shipped domain networks: alias -> folder under arvis/weights.
DOMAIN_NETWORKS = {"domain": "domain-classifier", "domain-emoji": "domain-emoji"}
DOMAIN_NETWORK_ALIAS = "domain"
DOMAIN_NETWORK_DIR = WEIGHTS_DIR / DOMAIN_NETWORKS[DOMAIN_NETWORK_ALIAS]


def _conv_block(c_in: int, c_out: int, stride: int, groups: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                         nn.GroupNorm(min(groups, c_out), c_out), nn.SiLU())


# What each configuration field may hold (arvis.utils.config_check), checked before anything is allocated.
DOMAIN_CONFIG_BOUNDS: dict[str, Bound] = {
    "num_classes": Bound.integer(2, 1_000_000),
    "class_names": Bound.strings(1_000_000, optional=True),
    "image_size": Bound.integer(16, 4096),
    "channels": Bound.integers(1, 8192, max_items=16),
    "convs_per_stage": Bound.integer(1, 64),
    "norm_groups": Bound.integer(1, 8192),
    "dropout": Bound.number(0.0, 1.0, open_high=True),
}


class DomainClassifier(CheckedFolderMixin, ModelMixin, ConfigMixin):
    """Photo-class classifier; its pooled penultimate features serve FID.

    Args:
        num_classes: number of photo classes (>= 2).
        class_names: optional names, one per class.
        image_size: the side the network is trained and evaluated at (FID resizes to it).
        channels: widths of the stages; every stage after the first halves the resolution (the stem
            halves it once more).
        convs_per_stage: 3x3 conv + GroupNorm + SiLU layers per stage (>= 1).
        norm_groups: GroupNorm groups (capped at the channel count).
        dropout: dropout before the classification head (training only).

    The default (4 stages 32-64-128-256, two convs each) has about 1.2M parameters.
    """

    config_name = "config.json"
    config_bounds = DOMAIN_CONFIG_BOUNDS

    @register_to_config
    def __init__(self, num_classes: int = 22, class_names: list[str] | None = None, image_size: int = 128,
                 channels: tuple[int, ...] = (32, 64, 128, 256), convs_per_stage: int = 2, norm_groups: int = 8,
                 dropout: float = 0.1):
        super().__init__()
        check_config(self.config, DOMAIN_CONFIG_BOUNDS, source=type(self).__name__)
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"class_names has {len(class_names)} names for num_classes={num_classes}")
        channels = tuple(int(c) for c in channels)
        self.stem = _conv_block(3, channels[0], 2, norm_groups)
        stages = []
        c_in = channels[0]
        for k, c in enumerate(channels):
            layers = [_conv_block(c_in, c, 1 if k == 0 else 2, norm_groups)]
            layers += [_conv_block(c, c, 1, norm_groups) for _ in range(convs_per_stage - 1)]
            stages.append(nn.Sequential(*layers))
            c_in = c
        self.stages = nn.ModuleList(stages)
        self.head_dropout = nn.Dropout(dropout)
        self.head = nn.Linear(channels[-1], num_classes)

    @property
    def feature_dim(self) -> int:
        return int(self.config.channels[-1])

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """Penultimate features ``[B, feature_dim]`` of ``images: [B, 3, S, S]`` in ``[0, 255]``."""
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be [batch, 3, height, width], got shape {tuple(images.shape)}")
        x = images.to(self.dtype) / 127.5 - 1.0
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return x.mean(dim=(2, 3))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Class logits ``[B, num_classes]`` of ``images: [B, 3, S, S]`` in ``[0, 255]``."""
        return self.head(self.head_dropout(self.features(images)))


class DomainFeatures(nn.Module):
    """A :class:`DomainClassifier` as an FID feature extractor (see :mod:`arvis.eval.fid`)."""

    def __init__(self, network: DomainClassifier, name: str = "domain"):
        super().__init__()
        self.network = network.eval()
        self.input_size = int(network.config.image_size)
        self.name = name
        self._fingerprint: str | None = None

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.network.features(images).float()

    def fingerprint(self) -> str:
        """sha256 over the config and weights: names the feature space in cached statistics."""
        if self._fingerprint is None:
            config = {k: v for k, v in dict(self.network.config).items() if not k.startswith("_")}
            h = hashlib.sha256(json.dumps(config, sort_keys=True, default=list).encode())
            for key, value in sorted(self.network.state_dict().items()):
                h.update(key.encode())
                h.update(value.detach().cpu().contiguous().float().numpy().tobytes())
            self._fingerprint = h.hexdigest()
        return self._fingerprint


def resolve_domain_path(path: str | os.PathLike | None) -> Path:
    """``None`` / an alias of :data:`DOMAIN_NETWORKS` → the shipped folder; otherwise the folder given (checked)."""
    alias = DOMAIN_NETWORK_ALIAS if path is None else str(path)
    if alias in DOMAIN_NETWORKS:
        folder = WEIGHTS_DIR / DOMAIN_NETWORKS[alias]
        if not (folder / "config.json").is_file():
            raise ValueError(f"extractor: the shipped domain network {alias!r} is not present at {folder} (not "
                             f"trained yet?); pass a folder written by save_domain_network, or Inception weights")
        return folder
    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise ValueError(f"extractor: {str(folder)!r} is not a domain-network folder (no config.json); expected "
                         f"the output of arvis.eval.domain.save_domain_network")
    return folder


def load_domain_network(path: str | os.PathLike | None = None, device: str | torch.device = "cpu"
                        ) -> DomainClassifier:
    """Load a :class:`DomainClassifier` folder (default: the shipped ``arvis/weights/domain-classifier``)."""
    folder = resolve_domain_path(path)
    net = DomainClassifier.from_pretrained(str(folder), use_safetensors=True)
    return net.to(device).eval()
