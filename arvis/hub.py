"""Where models come from: the shipped folders, or any diffusers-style folder a user points at.

Nothing is downloaded. A model is named by a shipped alias (``"c2i"``, ``"t2i"``…) or by a path to a
folder written by ``save_pretrained``.
"""

from __future__ import annotations

import json
from pathlib import Path

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"

# Shipped pipelines (folders under arvis/weights), by alias.
SHIPPED_PIPELINES = {
    "c2i": "llamagen-c2i-photos",
    "t2i": "llamagen-t2i-scenes",
    "var": "var-photos",
}
DEFAULT_MODEL = "c2i"


def shipped_path(alias: str) -> Path:
    return WEIGHTS_DIR / SHIPPED_PIPELINES[alias]


# Pipeline classes by the ``_class_name`` a diffusers folder's model_index.json records.
PIPELINE_CLASSES = {
    "LlamaGenPipeline": ("arvis.pipelines.pipeline_llamagen", "LlamaGenPipeline"),
    "Emu3Pipeline": ("arvis.pipelines.pipeline_emu3", "Emu3Pipeline"),
    "VARPipeline": ("arvis.pipelines.pipeline_var", "VARPipeline"),
}


def _official_model_type(path: Path) -> str | None:
    """``model_type`` of a transformers-layout folder (``config.json``), if it is one arvis can load."""
    config = path / "config.json"
    if not config.is_file():
        return None
    try:
        model_type = json.loads(config.read_text()).get("model_type")
    except (ValueError, AttributeError):
        return None
    return model_type if model_type == "emu3" else None


def resolve_model(name_or_path: str | None) -> Path:
    """A model alias or folder → the folder; ``ValueError`` lists the aliases when nothing matches.

    A folder is a diffusers pipeline folder (``model_index.json``, written by ``save_pretrained``) or an
    official Emu3 folder (``config.json`` with ``model_type: emu3``, as ``BAAI/Emu3-Gen-hf`` ships).
    """
    name = name_or_path or DEFAULT_MODEL
    if name in SHIPPED_PIPELINES:
        path = shipped_path(name)
        if not (path / "model_index.json").is_file():
            raise ValueError(f"model: the shipped model {name!r} is not present at {path} (not trained yet?)")
        return path
    path = Path(name).expanduser()
    if (path / "model_index.json").is_file() or _official_model_type(path):
        return path
    raise ValueError(
        f"model: {name!r} is neither a shipped model ({', '.join(SHIPPED_PIPELINES)}) nor a folder with a "
        f"model_index.json (written by save_pretrained) or an Emu3 config.json"
    )


def pipeline_class(path: str | Path) -> type:
    """The arvis pipeline class that loads the folder ``path`` (see :func:`resolve_model`)."""
    import importlib

    path = Path(path)
    index = path / "model_index.json"
    if index.is_file():
        class_name = json.loads(index.read_text()).get("_class_name")
    elif _official_model_type(path) == "emu3":
        class_name = "Emu3Pipeline"
    else:
        raise ValueError(f"model: {path} holds no model_index.json nor an Emu3 config.json")
    if class_name not in PIPELINE_CLASSES:
        raise ValueError(f"model: {path} is a {class_name!r} pipeline; arvis loads {', '.join(PIPELINE_CLASSES)}")
    module, attribute = PIPELINE_CLASSES[class_name]
    return getattr(importlib.import_module(module), attribute)


TINY_RANDOM = "tiny-random"


def tiny_random_pipeline(seed: int = 0):
    """A tiny, untrained class-conditional pipeline (random weights) for smoke tests; never for figures."""
    import torch

    from arvis.models.llamagen import LlamaGenTransformer
    from arvis.pipelines import LlamaGenPipeline
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel

    g = torch.Generator().manual_seed(seed)
    transformer = LlamaGenTransformer(dim=64, n_layer=2, n_head=4, vocab_size=256, block_size=256, multiple_of=32,
                                      num_classes=4, class_names=["a", "b", "c", "d"])
    transformer.init_weights(g)
    with torch.no_grad():
        transformer.output.weight.normal_(0.0, 0.05, generator=g)
    vqvae = LlamaGenVQModel(codebook_size=256, codebook_embed_dim=8, encoder_ch_mult=(1, 1, 2, 2),
                            decoder_ch_mult=(1, 1, 2, 2), z_channels=32, base_channels=16, norm_num_groups=8)
    vqvae.init_weights(g)
    return LlamaGenPipeline(transformer.eval(), vqvae.eval())
