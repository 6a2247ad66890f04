"""Model families and what a model folder offers — read from its metadata alone, without torch.

This is the pipeline half of the family seam (the method half is :mod:`arvis.methods.catalog`). Every arvis
pipeline class is one family (:data:`FAMILIES`): it decodes with one decoder kind and reads, from a folder's
``model_index.json`` and component ``config.json`` files, its :class:`Capabilities` — the conditioning (classes
with their names, or text), the resources it can supply to methods (a draft model, codebook neighbourhoods, a
low-resolution drafter) and the traits of its model (causal or masked MAR, video frames). With them
:meth:`Capabilities.check` refuses an inapplicable method or a bad option in milliseconds, before any weights
load (``arvis generate``, the demo and the sampling jobs call it first); a loaded pipeline reports the same
object (:attr:`arvis.pipelines.interface.ArvisPipeline.capabilities`).

A new family adds one :class:`Family` here (its reader, and the ``model_type`` of its official transformers
layout when its pipeline loads one) and one pipeline class implementing
:class:`~arvis.pipelines.interface.ArvisPipeline`.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from arvis.errors import CheckpointError, ConfigError
from arvis.methods.catalog import CAPABILITIES, DecoderKind, method_info, method_names
from arvis.utils.files import read_json_object

Conditioning = Literal["class", "text"]
_MAX_CONFIG_BYTES = 4 << 20  # a config.json larger than this is not a config (refused before parsing)


@dataclass(frozen=True)
class Capabilities:
    """What one model offers to decoding methods.

    Attributes:
        family: the family's name (``llamagen``, ``emu3``, ``var``, ``mar``, ``video``).
        kind: the decoder kind its methods run on.
        conditioning: ``class`` (class ids or names) or ``text`` (prompts).
        offers: resources and traits (:data:`arvis.methods.catalog.CAPABILITIES`).
        class_names: class-conditional models: the name of every class id (may be empty: ids only).
        num_frames: video models: frames per clip.
        num_tokens: token models with a fixed sequence: its length (``None``: set per call, or not token by token).
        vocabulary: text models with a closed vocabulary: the words they know (empty: any text).
    """

    family: str
    kind: DecoderKind
    conditioning: Conditioning
    offers: frozenset[str] = frozenset()
    class_names: tuple[str, ...] = ()
    num_classes: int = 0
    num_frames: int | None = None
    num_tokens: int | None = None
    vocabulary: tuple[str, ...] = field(default=(), repr=False)

    def methods(self) -> list[str]:
        """The methods that run on this model (its kind, and every capability they need whatever their options)."""
        return [n for n in method_names(self.kind) if set(method_info(n, self.kind).needs) <= self.offers]

    def check(self, name: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Method ``name`` with ``options`` validated for this model; ``ValueError`` (one line) when it does
        not apply (another kind's method, a capability the model lacks) or an option is bad. Returns the
        validated options with defaults."""
        info = method_info(name, self.kind)
        values = info.check_options(dict(options or {}))
        missing = [n for n in info.requirements(values) if n not in self.offers]
        if missing:
            usable = ", ".join(self.methods())
            raise ValueError(f"method {name!r} needs {'; '.join(CAPABILITIES[n] for n in missing)}, which this "
                             f"{self.family} model does not have; its methods: {usable}")
        for option in info.options:  # sequence indices must lie inside the model's sequence
            value = values[option.name]
            if option.kind == "interval" and value is not None and self.num_tokens is not None \
                    and value[1] > self.num_tokens:
                raise ValueError(f"{name}: {option.name}={list(value)} reaches past the model's {self.num_tokens}-token "
                                 f"sequence (indices 0..{self.num_tokens})")
        return values

    def name_error(self, label: str) -> ValueError:
        """The error for a name that is not a class: the closest names (never the whole list)."""
        close = difflib.get_close_matches(label, self.class_names, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        examples = ", ".join(repr(c) for c in self.class_names[:3]) or "none have names"
        return ValueError(f"unknown class name {label!r} ({self.num_classes} classes, e.g. {examples}){hint}")

    def class_id(self, label: int | str) -> int:
        """The class id of a class id or name; ``ValueError`` with the closest names (never the whole list)."""
        if self.conditioning != "class":
            raise ValueError(f"class labels: this {self.family} model is text-conditional; give prompts")
        if isinstance(label, str):
            if label in self.class_names:
                return self.class_names.index(label)
            if label.isdigit() and int(label) < self.num_classes:
                return int(label)
            raise self.name_error(label)
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < self.num_classes:
            raise ValueError(f"{label!r} is not a class id of this model (valid: 0..{self.num_classes - 1})")
        return label


class Components:
    """What a family reader sees of a model: which components are present and their configurations — from a
    folder's files (:meth:`from_folder`) or from a loaded pipeline (:meth:`from_pipeline`), read the same way."""

    def __init__(self, present: Callable[[str], bool], config: Callable[[str], Mapping[str, Any]]):
        self.present, self.config = present, config

    @classmethod
    def from_folder(cls, folder: Path) -> Components:
        index_file = folder / "model_index.json"
        if not index_file.is_file() and official_family(folder) is not None:
            # An official transformers layout: the whole folder is the pipeline's transformer.
            root = read_json(folder / "config.json")
            return cls(lambda c: c == "transformer", lambda c: root if c == "transformer" else {})
        index = read_json(index_file) if index_file.is_file() else {}

        def config(component: str) -> Mapping[str, Any]:
            file = folder / component / "config.json"
            return read_json(file) if file.is_file() else {}

        return cls(lambda c: _present(index, c), config)

    @classmethod
    def from_pipeline(cls, pipe: Any) -> Components:
        def config(component: str) -> Mapping[str, Any]:
            module = getattr(pipe, component, None)
            cfg = getattr(module, "config", None)
            if cfg is None:
                return {}
            return cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)

        return cls(lambda c: getattr(pipe, c, None) is not None, config)


@dataclass(frozen=True)
class Family:
    """One model family: its pipeline class (an arvis public name) and how to read a model's capabilities.

    ``official_model_type``: the ``model_type`` of the transformers checkpoint layout its pipeline also loads
    (a folder with a root ``config.json`` and no ``model_index.json``, as the Hub's ``-hf`` checkpoints are);
    ``None`` when it loads only pipeline folders."""

    name: str
    pipeline: str
    kind: DecoderKind
    read: Callable[[Components], Capabilities]
    official_model_type: str | None = None


# ----------------------------------------------------------------------------- reading folders
def read_json(path: Path) -> dict[str, Any]:
    """A small JSON object file; :class:`CheckpointError` naming the file when it is missing or damaged."""
    try:
        return read_json_object(path, max_bytes=_MAX_CONFIG_BYTES)
    except ConfigError as err:  # a damaged file of a model folder: the checkpoint is what is wrong
        raise CheckpointError(str(err)) from None


def _present(index: Mapping[str, Any], component: str) -> bool:
    """Whether ``model_index.json`` lists ``component`` (diffusers writes ``[null, null]`` for an absent one)."""
    entry = index.get(component)
    return isinstance(entry, list | tuple) and len(entry) == 2 and entry[0] is not None


def _names(config: Mapping[str, Any]) -> tuple[tuple[str, ...], int]:
    names = config.get("class_names") or ()
    count = config.get("num_classes", len(names))
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names) \
            or not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise CheckpointError("transformer/config.json: class_names must be a list of strings and num_classes an "
                              "integer >= 0")
    return tuple(names), count


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _llamagen(c: Components) -> Capabilities:
    config = c.config("transformer")
    offers = {"neighbours"}
    offers |= {"draft_model"} if c.present("draft_transformer") else set()
    if c.present("lowres_transformer") and c.present("upsampler"):
        offers |= {"lowres_model", "upsampler"}
    if config.get("model_type", "c2i") == "t2i":
        vocabulary = c.config("text_encoder").get("vocabulary") or ()
        return Capabilities("llamagen", DecoderKind.TOKEN, "text", frozenset(offers),
                            num_tokens=_int(config.get("block_size")),
                            vocabulary=tuple(v for v in vocabulary if isinstance(v, str)))
    names, count = _names(config)
    return Capabilities("llamagen", DecoderKind.TOKEN, "class", frozenset(offers), names, count,
                        num_tokens=_int(config.get("block_size")))


def _emu3(c: Components) -> Capabilities:
    offers = {"neighbours"} | ({"draft_model"} if c.present("draft_transformer") else set())
    return Capabilities("emu3", DecoderKind.TOKEN, "text", frozenset(offers))


def _janus(c: Components) -> Capabilities:
    offers = {"neighbours"} | ({"draft_model"} if c.present("draft_transformer") else set())
    vision = c.config("transformer").get("vision_config")
    tokens = _int(vision.get("num_image_tokens")) if isinstance(vision, Mapping) else None
    return Capabilities("janus", DecoderKind.TOKEN, "text", frozenset(offers), num_tokens=tokens)


def _var(c: Components) -> Capabilities:
    names, count = _names(c.config("transformer"))
    offers = {"draft_model"} if c.present("draft_transformer") else set()
    return Capabilities("var", DecoderKind.NEXT_SCALE, "class", frozenset(offers), names, count)


def _mar(c: Components) -> Capabilities:
    config = c.config("transformer")
    names, count = _names(config)
    offers = {"causal" if config.get("causal") else "masked"}
    if c.present("draft_transformer") and c.present("draft_head"):
        draft = c.config("draft_transformer")
        if bool(draft.get("causal")) == bool(config.get("causal")):  # a draft of the same variant
            offers.add("draft_model")
    return Capabilities("mar", DecoderKind.CONTINUOUS, "class", frozenset(offers), names, count)


def _video(c: Components) -> Capabilities:
    config = c.config("transformer")
    names, count = _names(config)
    frames, side = _int(config.get("num_frames")), _int(config.get("frame_size"))
    return Capabilities("video", DecoderKind.TOKEN, "class", frozenset({"frames", "neighbours"}), names, count,
                        num_frames=frames, num_tokens=frames * side * side if frames and side else None)


FAMILIES: dict[str, Family] = {f.pipeline: f for f in (
    Family("llamagen", "LlamaGenPipeline", DecoderKind.TOKEN, _llamagen),
    Family("emu3", "Emu3Pipeline", DecoderKind.TOKEN, _emu3, official_model_type="emu3"),
    Family("janus", "JanusPipeline", DecoderKind.TOKEN, _janus, official_model_type="janus"),
    Family("var", "VARPipeline", DecoderKind.NEXT_SCALE, _var),
    Family("mar", "MARPipeline", DecoderKind.CONTINUOUS, _mar),
    Family("video", "VideoPipeline", DecoderKind.TOKEN, _video),
)}


def official_family(folder: str | os.PathLike) -> Family | None:
    """The family whose pipeline loads ``folder`` as an official transformers layout (no ``model_index.json``, a
    ``config.json`` whose ``model_type`` is a family's :attr:`Family.official_model_type`), else ``None``."""
    folder = Path(folder)
    config = folder / "config.json"
    if (folder / "model_index.json").is_file() or not config.is_file():
        return None
    try:
        model_type = read_json(config).get("model_type")
    except CheckpointError:
        return None
    return next((f for f in FAMILIES.values() if f.official_model_type and f.official_model_type == model_type), None)


def pipeline_class_name(folder: str | os.PathLike) -> str:
    """The arvis pipeline class a folder names (``model_index.json``'s ``_class_name``; an official layout, a
    ``config.json`` whose ``model_type`` a family loads (``emu3``, ``janus``), is that family's pipeline).
    :class:`CheckpointError` otherwise."""
    folder = Path(folder)
    index_file = folder / "model_index.json"
    if not index_file.is_file():
        family = official_family(folder)
        if family is not None:
            return family.pipeline
        raise CheckpointError(f"{folder}: holds no model_index.json (written by save_pretrained)")
    name = read_json(index_file).get("_class_name")
    if isinstance(name, list | tuple) and len(name) == 2:  # diffusers' custom-pipeline form
        name = name[1]
    if not isinstance(name, str) or name not in FAMILIES:
        raise CheckpointError(f"{index_file}: _class_name {name!r} is not a pipeline arvis provides "
                              f"({', '.join(FAMILIES)})")
    return name


def folder_capabilities(folder: str | os.PathLike) -> Capabilities:
    """A model folder's :class:`Capabilities`, from its metadata alone (milliseconds; nothing is loaded)."""
    folder = Path(folder)
    return FAMILIES[pipeline_class_name(folder)].read(Components.from_folder(folder))


__all__ = ["FAMILIES", "Capabilities", "Components", "Conditioning", "Family", "folder_capabilities", "official_family",
           "pipeline_class_name", "read_json"]
