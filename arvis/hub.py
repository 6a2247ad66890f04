"""Where models come from: the shipped folders, or any diffusers-style folder a user points at.

Nothing is downloaded. A model is named by a shipped alias (``"c2i"``, ``"t2i"``…), by the name of a
shipped folder (``"llamagen-c2i-photos"``), or by a path to a folder written by ``save_pretrained``
(a path to a folder holding a ``model_index.json`` wins over an alias of the same name).

- :func:`resolve_model` — name → folder;
- :func:`load_pipeline` — name → the pipeline (its class read from the folder's ``model_index.json``),
  with the folder's ``sampling_defaults.json`` on ``pipe.sampling_defaults``;
- :class:`ModelRef` — how records name a model: an alias, a folder name or a relative path, plus a
  content hash of the folder (never an absolute path of the machine that wrote the record).

New model families add one line to :data:`SHIPPED_PIPELINES`; their pipeline class is found by the
``_class_name`` of their ``model_index.json`` among arvis's public names, so loading needs no edit here.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from arvis.utils.paths import WEIGHTS_DIR

# Shipped pipelines (folders under arvis/weights), by alias. One line per model; the first is the demo's first.
SHIPPED_PIPELINES: dict[str, str] = {
    "emoji-names": "llamagen-c2i-emoji-names",
    "c2i": "llamagen-c2i-photos",
    "t2i": "llamagen-t2i-scenes",
    "var": "var-emoji",
    "emoji": "llamagen-c2i-emoji",
    "video": "video-emoji",
    "emu3": "emu3-emoji",
    "janus": "janus-emoji",
    "mar": "mar-emoji",
    "mar-causal": "mar-causal-emoji",
}
# The model whose pictures a reader recognises (one class per emoji); "c2i" (photos) is the natural-image benchmark.
DEFAULT_MODEL = "emoji-names"
TINY_RANDOM = "tiny-random"
TINY_RANDOM_CLASSES = ("a", "b", "c", "d")
SAMPLING_DEFAULTS_FILE = "sampling_defaults.json"


def shipped_path(alias: str) -> Path:
    """The folder of a shipped alias (it may be absent when the model is not trained yet)."""
    return WEIGHTS_DIR / SHIPPED_PIPELINES[alias]


def is_pipeline_folder(path: str | os.PathLike) -> bool:
    return (Path(path) / "model_index.json").is_file()


def _official_layout(path: Path) -> bool:
    """Whether ``path`` is a transformers-layout folder (``config.json``) a family's pipeline loads
    (:func:`arvis.families.official_family`)."""
    from arvis.families import official_family

    return official_family(path) is not None


def shipped_names() -> list[str]:
    """Aliases of the shipped pipelines present in this installation."""
    return [alias for alias in SHIPPED_PIPELINES if is_pipeline_folder(shipped_path(alias))]


def resolve_model(name_or_path: str | os.PathLike | None) -> Path:
    """A model alias, shipped folder name or pipeline folder → the folder.

    Args:
        name_or_path: ``"c2i"``, ``"llamagen-c2i-photos"``, a folder path, or ``None`` (the default model).

    Returns:
        The folder holding ``model_index.json``.

    Raises:
        ValueError: nothing matches; the message lists the aliases.
    """
    name = os.fspath(name_or_path) if name_or_path is not None else DEFAULT_MODEL
    path = Path(name).expanduser()
    if is_pipeline_folder(path) or _official_layout(path):  # e.g. an official Emu3 or Janus folder (-hf layouts)
        return path
    folder = SHIPPED_PIPELINES.get(name, name if name in SHIPPED_PIPELINES.values() else None)
    if folder is not None:
        path = WEIGHTS_DIR / folder
        if not is_pipeline_folder(path):
            raise ValueError(f"model: the shipped model {name!r} is not present in this installation "
                             f"(arvis/weights/{folder} has no model_index.json)")
        return path
    if os.sep in name or name.startswith("."):  # a path, not an alias: say that it is missing
        from arvis.errors import CheckpointError

        problem = "does not exist" if not path.exists() else "holds no model_index.json (written by save_pretrained)"
        raise CheckpointError(f"model: {name} {problem}: it is neither a shipped model "
                              f"({', '.join(SHIPPED_PIPELINES)}) nor a pipeline folder")
    import difflib

    close = difflib.get_close_matches(name, [*SHIPPED_PIPELINES, *SHIPPED_PIPELINES.values()], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(
        f"model: {name!r} is neither a shipped model ({', '.join(SHIPPED_PIPELINES)}) nor a folder with a "
        f"model_index.json (written by save_pretrained){hint}"
    )


# ----------------------------------------------------------------------------- naming models in records
@dataclass(frozen=True)
class ModelRef:
    """How a record names a model.

    Attributes:
        name: the alias for a shipped model, ``tiny-random``, else the folder as given relative to the
            working directory, or only its last component when it lies outside it.
        sha256: content hash of the folder's configs and weights (``None`` for in-memory models).
        path: the folder (for loading; never written into records).
    """

    name: str
    sha256: str | None = None
    path: Path | None = None

    def __str__(self) -> str:
        return self.name

    def record(self) -> dict[str, Any]:
        """The fields every record carries: ``{"model": name, "model_sha256": hash}``."""
        return {"model": self.name, "model_sha256": self.sha256}


def folder_sha256(folder: str | os.PathLike) -> str:
    """sha256 (first 16 hex digits) over the relative names and bytes of a model folder's configs and
    weights (``*.json``, ``*.safetensors``, ``*.bin``, ``*.pt``; model cards and other files excluded).

    Linked components (``vqvae -> ../vq-emoji``) are followed: their weights decode every image, so a retrained
    tokenizer is other weights for every pipeline that links it. Only the components ``model_index.json`` lists
    (every link, in a folder without one) are followed, and only to a folder inside this one, next to it or
    shipped (:func:`arvis.utils.config_check.component_folder`); no other link is followed or hashed, and a
    component is the files directly in its folder.

    Raises:
        CheckpointError: a listed component links elsewhere (``/``, ``/usr``…).
    """
    from arvis.utils.config_check import component_folder

    folder = Path(folder)
    try:
        index = json.loads((folder / "model_index.json").read_text())
    except (OSError, ValueError, RecursionError):
        index = None  # loading the pipeline reports the damage
    listed = set(index) if isinstance(index, dict) else None  # None: no index, every (contained) link is followed
    files: list[tuple[str, Path]] = []
    for entry in sorted(folder.iterdir()):
        if entry.is_symlink() and listed is not None and entry.name not in listed:
            continue
        base = component_folder(folder, entry.name) if entry.is_symlink() else entry
        if not base.is_dir():
            files.append((entry.name, base))
            continue
        # A component is the files directly in its folder (configs, weights); nothing deeper, no link inside.
        files.extend((f"{entry.name}/{path.name}", path) for path in base.iterdir())
    digest = hashlib.sha256()
    suffixes = {".json", ".safetensors", ".bin", ".pt", ".model", ".txt"}
    for relative, file in sorted(files, key=lambda item: Path(item[0]).parts):
        if file.is_symlink() or not file.is_file() or file.suffix not in suffixes or file.name == "metrics.json":
            continue
        digest.update(relative.encode() + b"\0")
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def model_ref(name_or_path: str | os.PathLike | None) -> ModelRef:
    """The :class:`ModelRef` of a model name as given on a command line (resolved like :func:`resolve_model`)."""
    name = os.fspath(name_or_path) if name_or_path is not None else DEFAULT_MODEL
    if name == TINY_RANDOM:
        return ModelRef(TINY_RANDOM)
    path = resolve_model(name)
    if path.resolve().parent == WEIGHTS_DIR:
        alias = next((a for a, f in SHIPPED_PIPELINES.items() if f == path.name), path.name)
        return ModelRef(alias, folder_sha256(path), path)
    from arvis.utils.paths import display_path

    return ModelRef(display_path(path), folder_sha256(path), path)


# ----------------------------------------------------------------------------- loading
def read_sampling_defaults(folder: str | os.PathLike) -> dict[str, Any]:
    """The folder's ``sampling_defaults.json`` (``{}`` when absent).

    Raises:
        ConfigError: not a JSON object (its settings are checked by the pipeline that reads them).
        CheckpointError: it cannot be read.
    """
    from arvis.utils.files import read_json_object

    file = Path(folder) / SAMPLING_DEFAULTS_FILE
    return read_json_object(file) if file.is_file() else {}


def pipeline_class(folder: str | os.PathLike) -> type:
    """The pipeline class a folder names (:func:`arvis.families.pipeline_class_name`)."""
    import arvis  # the public names, through the root package's lazy facade
    from arvis.families import pipeline_class_name

    return getattr(arvis, pipeline_class_name(folder))


def model_capabilities(model: str | os.PathLike | None) -> Any:
    """What a model (as :func:`load_pipeline` names it) offers to methods, from its metadata alone
    (:func:`arvis.families.folder_capabilities`; milliseconds, nothing loaded)."""
    from arvis.families import Capabilities, folder_capabilities
    from arvis.methods.catalog import DecoderKind

    if model == TINY_RANDOM or (model is None and DEFAULT_MODEL not in shipped_names()):
        return Capabilities("llamagen", DecoderKind.TOKEN, "class", frozenset({"neighbours"}), TINY_RANDOM_CLASSES,
                            len(TINY_RANDOM_CLASSES), num_tokens=256)
    return folder_capabilities(resolve_model(model))


class LoadedPipeline(NamedTuple):
    """What :func:`load_pipeline` returns: the pipeline, its sampling defaults and how records name it."""

    pipeline: Any
    defaults: dict[str, Any]
    model: ModelRef


def load_pipeline(model: str | os.PathLike | None = None, dtype: Any = None, device: str = "cpu") -> LoadedPipeline:
    """Load a pipeline by alias, shipped folder name or folder; ``tiny-random`` is an untrained test model.

    Args:
        model: the model (default :data:`DEFAULT_MODEL`; the untrained tiny model when it is absent).
        dtype: torch dtype of the weights (default float32).
        device: torch device.

    Returns:
        :class:`LoadedPipeline` ``(pipeline, defaults, model)``; ``defaults`` is also ``pipeline.sampling_defaults``.
    """
    import torch

    dtype = dtype or torch.float32
    if model == TINY_RANDOM or (model is None and DEFAULT_MODEL not in shipped_names()):
        print("*** UNTRAINED TINY MODEL (random weights): its images are noise; only the decode statistics "
              "mean anything. ***", file=sys.stderr)
        pipe = tiny_random_pipeline().to(device)
        if dtype != torch.float32:
            pipe = pipe.to(dtype=dtype)
        return LoadedPipeline(pipe, dict(pipe.sampling_defaults), ModelRef(TINY_RANDOM))
    ref = model_ref(model)
    assert ref.path is not None
    pipe = pipeline_class(ref.path).from_pretrained(str(ref.path), dtype=dtype).to(device)
    return LoadedPipeline(pipe, dict(pipe.sampling_defaults), ref)


def tiny_random_pipeline(seed: int = 0):
    """A tiny, untrained class-conditional pipeline (random weights) for smoke tests; never for figures."""
    import torch

    import arvis  # the pipeline class through the root package, as pipeline_class finds it (docs/architecture.md)
    from arvis.models.llamagen import LlamaGenTransformer
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel

    g = torch.Generator().manual_seed(seed)
    transformer = LlamaGenTransformer(dim=64, n_layer=2, n_head=4, vocab_size=256, block_size=256, multiple_of=32,
                                      num_classes=len(TINY_RANDOM_CLASSES), class_names=list(TINY_RANDOM_CLASSES))
    transformer.init_weights(g)
    with torch.no_grad():
        transformer.output.weight.normal_(0.0, 0.05, generator=g)
    vqvae = LlamaGenVQModel(codebook_size=256, codebook_embed_dim=8, encoder_ch_mult=(1, 1, 2, 2),
                            decoder_ch_mult=(1, 1, 2, 2), z_channels=32, base_channels=16, norm_num_groups=8)
    vqvae.init_weights(g)
    pipe = arvis.LlamaGenPipeline(transformer.eval(), vqvae.eval())
    pipe.sampling_defaults = {"guidance_scale": 4.0, "top_k": 0}
    return pipe


def tiny_random_video_pipeline(seed: int = 0, num_frames: int = 3, frame_size: int = 2):
    """A tiny, untrained class-conditional :class:`~arvis.pipelines.VideoPipeline` (random weights; the 24
    video classes of :mod:`arvis.data.video`, ``num_frames`` frames of ``frame_size``² tokens) for smoke tests
    and the docs' commands; never for figures."""
    import torch

    import arvis
    from arvis.data.video import VIDEO_CLASSES
    from arvis.models.video import VideoTransformer
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel

    g = torch.Generator().manual_seed(seed)
    transformer = VideoTransformer(dim=32, n_layer=2, n_head=2, multiple_of=16, vocab_size=16, num_frames=num_frames,
                                   frame_size=frame_size, num_classes=len(VIDEO_CLASSES),
                                   class_names=list(VIDEO_CLASSES))
    transformer.init_weights(g)
    with torch.no_grad():  # the init zeroes the head: give the tiny model real (random) logits
        transformer.output.weight.normal_(0.0, 0.5, generator=g)
    vqvae = LlamaGenVQModel(codebook_size=16, codebook_embed_dim=4, encoder_ch_mult=(1, 2), decoder_ch_mult=(1, 2),
                            z_channels=8, base_channels=8, norm_num_groups=4)
    vqvae.init_weights(g)
    return arvis.VideoPipeline(transformer.eval(), vqvae.eval())
