"""The domain feature network: a small CNN classifier over the photo classes, whose penultimate layer is
arvis's FID feature space (docs/measurement.md: Inception weights are not reachable offline).

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

from arvis.eval.files import atomic_directory

DOMAIN_NETWORK_ALIAS = "domain"
DOMAIN_NETWORK_DIR = Path(__file__).resolve().parents[1] / "weights" / "domain-classifier"


def _conv_block(c_in: int, c_out: int, stride: int, groups: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                         nn.GroupNorm(min(groups, c_out), c_out), nn.SiLU())


class DomainClassifier(ModelMixin, ConfigMixin):
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

    @register_to_config
    def __init__(self, num_classes: int = 22, class_names: list[str] | None = None, image_size: int = 128,
                 channels: tuple[int, ...] = (32, 64, 128, 256), convs_per_stage: int = 2, norm_groups: int = 8,
                 dropout: float = 0.1):
        super().__init__()
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"class_names has {len(class_names)} names for num_classes={num_classes}")
        if not isinstance(image_size, int) or image_size < 16:
            raise ValueError(f"image_size must be an integer >= 16, got {image_size!r}")
        if not channels or any(int(c) < 1 for c in channels):
            raise ValueError(f"channels must be a non-empty list of positive widths, got {channels!r}")
        if convs_per_stage < 1:
            raise ValueError(f"convs_per_stage must be >= 1, got {convs_per_stage}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
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
    """``None`` / ``"domain"`` → the shipped folder; otherwise the folder given (checked)."""
    if path is None or str(path) == DOMAIN_NETWORK_ALIAS:
        folder = DOMAIN_NETWORK_DIR
        if not (folder / "config.json").is_file():
            raise ValueError(f"extractor: the shipped domain network is not present at {folder} (not trained "
                             f"yet?); pass a folder written by save_domain_network, or Inception weights")
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


def save_domain_network(network: DomainClassifier, path: str | os.PathLike) -> Path:
    """Write ``network`` as a folder (config.json + safetensors), atomically replacing ``path``."""
    if not isinstance(network, DomainClassifier):
        raise ValueError(f"network must be a DomainClassifier, got {type(network).__name__}")
    path = Path(path)
    with atomic_directory(path) as tmp:
        network.save_pretrained(str(tmp), safe_serialization=True)
    return path
