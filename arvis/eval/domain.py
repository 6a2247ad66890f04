"""The domain network for FID (:mod:`arvis.models.domain_net`, re-exported here) and its atomic folder writer.

Folder format (``save_domain_network`` / ``load_domain_network``; diffusers ``ModelMixin`` layout)::

    domain-classifier/
        config.json                              # num_classes, class_names, image_size, channels, ...
        diffusion_pytorch_model.safetensors      # weights

The network (:class:`~arvis.models.domain_net.DomainClassifier`), its FID feature extractor
(:class:`~arvis.models.domain_net.DomainFeatures`), the shipped aliases and the loader live in
:mod:`arvis.models.domain_net` (training imports them from there) and are re-exported here.
"""

from __future__ import annotations

import os
from pathlib import Path

from arvis.models.domain_net import (  # noqa: F401  (re-exported: the public evaluation API)
    DOMAIN_NETWORK_ALIAS,
    DOMAIN_NETWORK_DIR,
    DOMAIN_NETWORKS,
    DomainClassifier,
    DomainFeatures,
    load_domain_network,
    resolve_domain_path,
)
from arvis.utils.files import atomic_directory


def save_domain_network(network: DomainClassifier, path: str | os.PathLike) -> Path:
    """Write ``network`` as a folder (config.json + safetensors), atomically replacing ``path``."""
    if not isinstance(network, DomainClassifier):
        raise ValueError(f"network must be a DomainClassifier, got {type(network).__name__}")
    path = Path(path)
    with atomic_directory(path) as tmp:
        network.save_pretrained(str(tmp), safe_serialization=True)
    return path
