"""Check a model configuration before anything is allocated: one mechanism for every model family.

A constructor reserves memory from its configuration: a ``config.json``, pickled training args or
safetensors metadata saying ``block_size = 8192**2``, ``dim = 2**20`` or ``n_layer = 10**6`` would make
loading try to reserve gigabytes to petabytes before any check ran. So every model class declares,
next to its constructor, what each configuration field may hold::

    CONFIG_BOUNDS = {"dim": Bound.integer(8, 16384), "model_type": Bound.choice("c2i", "t2i"), ...}

and the configuration is checked against it, in this order, before a tensor is allocated:

1. :func:`check_config`: unknown keys (with the nearest known one), wrong types, non-finite numbers,
   values out of bounds. Bounds are generous — several times the largest published model of the
   family — they turn a hostile or mistyped value into an error, they do not limit real models.
2. :func:`expected_shapes`: the parameter shapes the configuration implies, from a construction on
   the meta device (no memory; bounded work, since step 1 bounded the depth and widths).
3. the shapes and dtypes in the weights file's header, read without loading a tensor
   (:func:`arvis.utils.serialization.read_safetensors_header`), must be exactly those.

:class:`CheckedFolderMixin` runs all three when a diffusers-style folder (``config.json`` +
``diffusion_pytorch_model.safetensors``) is loaded, so every component of a pipeline folder is
checked before diffusers reads it; :class:`CheckedPipelineMixin` first checks the pipeline folder's
``model_index.json`` against the pipeline's ``__init__`` (a diffusers ``UNet2DModel`` named as the
transformer is refused before diffusers imports or loads anything), the links of linked components
(:func:`component_folder`) and the pipeline's own settings. A component whose class another library defines
(diffusers' ``AutoencoderKL``, transformers' Emu3 models) is checked the same way through the
:class:`FolderSpec` its pipeline names in ``component_checks``. Single-file loaders (``arvis.models.checkpoint``,
the VAR and MAR loaders) call :func:`check_config` on pickled args, safetensors metadata and the configuration
the tensor shapes imply. A new model family joins by declaring ``config_bounds``, calling ``check_config`` in
its constructor and mixing in ``CheckedFolderMixin``.

Every refusal is a :class:`~arvis.errors.ConfigError` (the configuration) or
:class:`~arvis.errors.CheckpointError` (the weights) naming the file and the field.
"""

from __future__ import annotations

import contextvars
import difflib
import json
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from arvis.errors import CheckpointError, ConfigError
from arvis.utils.files import apply_umask_to_written_files, read_json_object
from arvis.utils.paths import WEIGHTS_DIR
from arvis.utils.serialization import (
    CONFIG_METADATA_KEY,
    SafetensorsHeader,
    add_safetensors_metadata,
    compare_shapes,
    read_safetensors_header,
)

__all__ = ["Bound", "CheckedFolderMixin", "CheckedPipelineMixin", "FolderSpec", "check_config", "check_model_folder",
           "check_pipeline_folder", "component_folder", "expected_shapes", "folder_spec"]


@dataclass(frozen=True)
class Bound:
    """What one configuration field may hold. Build with the class methods (``Bound.integer(1, 256)``…).

    Attributes:
        kind: ``int``, ``float``, ``bool``, ``str``, ``choice``, ``ints`` (list of ints), ``floats`` (list
            of finite numbers), ``strs`` (list of strings), ``table`` (an object of string keys and integer
            values, e.g. a vocabulary), ``mapping`` (a nested object checked against ``fields``) or ``any``
            (a known field that sizes nothing, accepted as it comes).
        low, high: inclusive range of a number or of every list item.
        open_low, open_high: exclude ``low`` / ``high``.
        optional: ``None`` is allowed.
        choices: the allowed values of a ``choice``.
        max_items: longest list.
        min_items: shortest list of numbers (1; 0 allows an empty one).
        fields: the bounds of a nested object's keys.
        note: why the bound, appended to the error message.
    """

    kind: str
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    optional: bool = False
    choices: tuple[Any, ...] = ()
    max_items: int = 0
    min_items: int = 1
    fields: Mapping[str, Bound] = field(default_factory=dict)
    note: str = ""

    @classmethod
    def integer(cls, low: int, high: int, optional: bool = False, note: str = "") -> Bound:
        return cls("int", low, high, optional=optional, note=note)

    @classmethod
    def number(cls, low: float, high: float, open_low: bool = False, open_high: bool = False,
               optional: bool = False, note: str = "") -> Bound:
        return cls("float", low, high, open_low, open_high, optional=optional, note=note)

    @classmethod
    def boolean(cls) -> Bound:
        return cls("bool")

    @classmethod
    def text(cls, max_items: int = 10_000, optional: bool = False) -> Bound:
        """A string of at most ``max_items`` characters."""
        return cls("str", optional=optional, max_items=max_items)

    @classmethod
    def choice(cls, *choices: Any, optional: bool = False) -> Bound:
        return cls("choice", choices=choices, optional=optional)

    @classmethod
    def null(cls, note: str = "") -> Bound:
        """Only ``null``: a field a library defines that arvis does not use (any other value would be ignored)."""
        return cls("choice", optional=True, note=note)

    @classmethod
    def integers(cls, low: int, high: int, max_items: int, optional: bool = False, note: str = "",
                 min_items: int = 1) -> Bound:
        return cls("ints", low, high, max_items=max_items, optional=optional, note=note, min_items=min_items)

    @classmethod
    def numbers(cls, low: float, high: float, max_items: int, min_items: int = 1, open_low: bool = False,
                optional: bool = False) -> Bound:
        """A list of ``min_items`` to ``max_items`` finite numbers, each in the range."""
        return cls("floats", low, high, open_low=open_low, max_items=max_items, min_items=min_items, optional=optional)

    @classmethod
    def strings(cls, max_items: int, optional: bool = False) -> Bound:
        return cls("strs", max_items=max_items, optional=optional)

    @classmethod
    def table(cls, low: int, high: int, max_items: int, optional: bool = False) -> Bound:
        """An object of at most ``max_items`` string keys whose values are integers in ``[low, high]``."""
        return cls("table", low, high, max_items=max_items, optional=optional)

    @classmethod
    def mapping(cls, fields: Mapping[str, Bound], optional: bool = False) -> Bound:
        return cls("mapping", fields=dict(fields), optional=optional)

    def _range(self) -> str:
        left = "(" if self.open_low else "["
        right = ")" if self.open_high else "]"
        return f"{left}{self.low:g}, {self.high:g}{right}"

    def describe(self) -> str:
        """The allowed values in words, e.g. ``an integer in [1, 256]``."""
        text = {
            "int": lambda: f"an integer in {self._range()}",
            "float": lambda: f"a finite number in {self._range()}",
            "bool": lambda: "true or false",
            "str": lambda: f"a string of at most {self.max_items} characters",
            "choice": lambda: "one of " + ", ".join(repr(c) for c in self.choices) if self.choices else "null",
            "ints": lambda: f"a list of {self.min_items} to {self.max_items} integers in {self._range()}",
            "floats": lambda: f"a list of {self.min_items} to {self.max_items} finite numbers in {self._range()}",
            "strs": lambda: f"a list of at most {self.max_items} strings",
            "table": lambda: f"an object of at most {self.max_items} string keys with integer values in {self._range()}",
            "mapping": lambda: "an object with keys " + ", ".join(sorted(self.fields)),
            "any": lambda: "any value",
        }[self.kind]()
        return text + (" or null" if self.optional and text != "null" else "")

    def _in_range(self, x: float) -> bool:
        assert self.low is not None and self.high is not None
        above = x > self.low if self.open_low else x >= self.low
        below = x < self.high if self.open_high else x <= self.high
        return above and below

    def _int_ok(self, x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and self._in_range(x)

    def _number_ok(self, x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and self._in_range(x)

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is allowed (``mapping`` values: only that they are objects)."""
        if self.kind == "any":
            return True
        if value is None:
            return self.optional
        if self.kind == "int":
            return self._int_ok(value)
        if self.kind == "float":
            return self._number_ok(value)
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "str":
            return isinstance(value, str) and len(value) <= self.max_items
        if self.kind == "choice":
            return any(value == c and type(value) is type(c) for c in self.choices)
        if self.kind == "ints":
            return (isinstance(value, list | tuple) and self.min_items <= len(value) <= self.max_items
                    and all(self._int_ok(v) for v in value))
        if self.kind == "floats":
            return (isinstance(value, list | tuple) and self.min_items <= len(value) <= self.max_items
                    and all(self._number_ok(v) for v in value))
        if self.kind == "strs":
            return (isinstance(value, list | tuple) and len(value) <= self.max_items
                    and all(isinstance(v, str) and len(v) <= 10_000 for v in value))
        if self.kind == "table":
            return (isinstance(value, Mapping) and len(value) <= self.max_items
                    and all(isinstance(k, str) and len(k) <= 10_000 and self._int_ok(v) for k, v in value.items()))
        if self.kind == "mapping":
            return isinstance(value, Mapping)
        raise AssertionError(f"unknown bound kind {self.kind!r}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(value: Any) -> str:
    """A class name read from a file, as it is when it is a short string (else :func:`_show`)."""
    return value if isinstance(value, str) and len(value) <= 60 else _show(value)


# The bookkeeping keys diffusers and transformers write into configurations (dropped by check_config; any other
# key starting with "_" is refused).
PRIVATE_KEYS = frozenset({"_class_name", "_diffusers_version", "_name_or_path", "_use_default_values", "_commit_hash",
                          "_from_model_config"})


def check_config(config: Mapping[str, Any], bounds: Mapping[str, Bound], source: str,
                 prefix: str = "", allow_unknown: bool = False) -> dict[str, Any]:
    """Check every key of ``config`` against ``bounds``; return the public keys (the libraries' bookkeeping,
    :data:`PRIVATE_KEYS` such as ``_class_name``, is dropped; another ``_``-prefixed key is refused).

    Args:
        config: the configuration (a ``config.json`` object, pickled args as a dict, constructor args).
        bounds: field name → :class:`Bound`; a key not in it is an error.
        source: where the configuration comes from, for messages (a path, ``"LlamaGenTransformer"``…).
        prefix: dotted path of a nested object (internal).
        allow_unknown: skip keys without a bound (e.g. training args, where only some fields matter)
            instead of refusing them; they are not returned.

    Raises:
        ConfigError: ``"{source}: {field} = {value} is not {allowed}"`` or an unknown key with the
            nearest known one.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"{source}: {prefix.rstrip('.') or 'the configuration'} must be an object "
                          f"(key: value), got {type(config).__name__}")
    checked: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise ConfigError(f"{source}: config keys must be strings, got {key!r}")
        if key.startswith("_"):
            # diffusers would pass an unknown one on to the constructor (``__class__``: a TypeError deep inside)
            if key not in PRIVATE_KEYS and not allow_unknown:
                raise ConfigError(f"{source}: unknown private config key {prefix + key!r}; the ones a library writes "
                                  f"are {', '.join(sorted(PRIVATE_KEYS))}")
            continue
        bound = bounds.get(key)
        if bound is None and allow_unknown:
            continue
        if bound is None:
            near = difflib.get_close_matches(key, list(bounds), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"{source}: unknown config key {prefix + key!r}{hint}; known keys: "
                              f"{', '.join(sorted(bounds))}")
        if not bound.accepts(value):
            note = f" ({bound.note})" if bound.note else ""
            raise ConfigError(f"{source}: {prefix}{key} = {_show(value)} is not {bound.describe()}{note}")
        if bound.kind == "mapping" and value is not None:
            value = check_config(value, bound.fields, source, prefix=f"{prefix}{key}.")
        checked[key] = value
    return checked


def expected_shapes(cls: Callable[..., torch.nn.Module], config: Mapping[str, Any], source: str) -> dict[str, tuple[int, ...]]:
    """Parameter and buffer shapes of ``cls(**config)``, from a construction on the meta device.

    Call only with a configuration :func:`check_config` accepted (the construction's Python work
    grows with the depth). Constructor refusals (``dim`` not divisible by ``n_head``, a block type a
    library does not know…) become :class:`ConfigError` naming ``source``.
    """
    try:
        with torch.device("meta"):
            model = cls(**config)
    except (ValueError, TypeError, ArithmeticError, KeyError, IndexError, AttributeError, RuntimeError) as err:
        raise ConfigError(f"{source}: {type(err).__name__ + ': ' if not isinstance(err, ValueError) else ''}"
                          f"{err}") from None
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


# Component folders a pipeline's from_pretrained has just checked (so that diffusers' per-component
# from_pretrained calls do not check them a second time).
_CHECKED_FOLDERS: contextvars.ContextVar[frozenset[Path]] = contextvars.ContextVar("checked_folders",
                                                                                    default=frozenset())

# diffusers' names for a model folder's weights (diffusers.utils.constants).
WEIGHTS_NAME = "diffusion_pytorch_model"
PICKLED_WEIGHTS = ("diffusion_pytorch_model.bin", "pytorch_model.bin", "model.pt", "model.pth", "model.ckpt")


@dataclass(frozen=True)
class FolderSpec:
    """What :func:`check_model_folder` checks a model folder against.

    A class that mixes in :class:`CheckedFolderMixin` has one (:func:`folder_spec`); a class arvis does not
    define (diffusers' ``AutoencoderKL``, transformers' Emu3 models) gets one from the module that uses it, and
    a pipeline names it for that component in ``component_checks`` (:func:`check_pipeline_folder`).

    Attributes:
        class_name: the class the folder must hold (checked against ``config.json``'s ``_class_name``).
        bounds: what each configuration field may hold.
        build: the module a checked configuration describes, ``build(**config)`` (run on the meta device).
        config_name: the configuration file.
        weights: stem of the safetensors weights (diffusers: ``diffusion_pytorch_model``; transformers: ``model``).
        rename: tensor name in the file → parameter name in ``build``'s module (transformers' saved layouts),
            or ``None`` when they are the same.
        integer_tensors: name suffixes of the integer tensors the module keeps (BatchNorm's counters).
    """

    class_name: str
    bounds: Mapping[str, Bound]
    build: Callable[..., torch.nn.Module]
    config_name: str = "config.json"
    weights: str = WEIGHTS_NAME
    rename: Callable[[str], str] | None = None
    integer_tensors: tuple[str, ...] = ()


def folder_spec(cls: Any) -> FolderSpec:
    """The :class:`FolderSpec` of a :class:`CheckedFolderMixin` class (a spec is returned as it is)."""
    if isinstance(cls, FolderSpec):
        return cls
    return FolderSpec(cls.__name__, cls.config_bounds, cls, getattr(cls, "config_name", "config.json"))




def _folder_header(folder: Path, variant: str | None, weights: str = WEIGHTS_NAME) -> tuple[Path, SafetensorsHeader]:
    """The safetensors header of a model folder (the single file, or every shard of an index)."""
    stem = weights if variant is None else f"{weights}.{variant}"
    single = folder / f"{stem}.safetensors"
    index = folder / f"{stem}.safetensors.index.json"
    if single.is_file():
        return single, read_safetensors_header(single)
    if index.is_file():
        weight_map = read_json_object(index).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(f"{str(index)!r}: expected a 'weight_map' of tensor name → shard file")
        shapes: dict[str, tuple[int, ...]] = {}
        dtypes: dict[str, str] = {}
        for shard_name in sorted(set(weight_map.values())):
            shard = (folder / shard_name).resolve()
            if shard.parent != folder.resolve():
                raise CheckpointError(f"{str(index)!r}: shard {shard_name!r} is outside the folder")
            header = read_safetensors_header(shard)
            shapes.update(header.shapes)
            dtypes.update(header.dtypes)
        return index, SafetensorsHeader(shapes=shapes, dtypes=dtypes, metadata={})
    pickles = [p.name for p in sorted(folder.iterdir()) if p.name in PICKLED_WEIGHTS or p.suffix in (".bin", ".pt", ".pth")]
    if pickles:
        raise CheckpointError(
            f"{str(folder)!r} holds pickled weights ({', '.join(pickles)}) but no {single.name}: arvis loads model "
            f"folders from safetensors only (a pickle can run code). Convert it: "
            f"safetensors.torch.save_file(torch.load(path, weights_only=True), '{single.name}')"
        )
    raise CheckpointError(f"{str(folder)!r} has no weights file ({single.name})")


def check_model_folder(cls: Any, folder: str | os.PathLike, variant: str | None = None) -> dict[str, Any]:
    """Check a model folder for ``cls`` (a :class:`CheckedFolderMixin` class or a :class:`FolderSpec`) before
    anything is loaded; return its config.

    ``config.json`` against the bounds (and its ``_class_name`` against the class), then the parameter shapes
    it implies against the safetensors header, and every tensor's dtype.

    Raises:
        CheckpointError: no such folder, unreadable files, pickled or missing weights, tensors that do
            not fit, non-floating dtypes.
        ConfigError: the configuration (naming ``config.json`` and the field).
    """
    spec = folder_spec(cls)
    folder = Path(folder).expanduser()
    if not folder.exists():
        raise CheckpointError(f"model folder {str(folder)!r} does not exist (arvis loads local folders; nothing "
                              f"is downloaded)")
    if not folder.is_dir():
        raise CheckpointError(f"model folder {str(folder)!r} is not a folder")
    config_path = folder / spec.config_name
    if not config_path.is_file():
        raise CheckpointError(f"model folder {str(folder)!r} has no {config_path.name}")
    raw = read_json_object(config_path)
    declared = raw.get("_class_name")
    if declared is not None and declared != spec.class_name:
        raise CheckpointError(f"{str(config_path)!r} describes a {_name(declared)}, not a {spec.class_name}; is this "
                              f"the folder of another component?")
    config = check_config(raw, spec.bounds, source=str(config_path))
    weights, header = _folder_header(folder, variant, spec.weights)
    header.check_floating(source=str(weights), allow=spec.integer_tensors)
    shapes = expected_shapes(spec.build, config, source=str(config_path))
    given = header.shapes if spec.rename is None else {spec.rename(k): v for k, v in header.shapes.items()}
    compare_shapes(shapes, given, f"{str(weights)!r} does not fit the {spec.class_name} its {config_path.name} "
                                  f"describes")
    _compare_saved_config(raw, header, config_path, weights)
    return config


def _compare_saved_config(raw: dict[str, Any], header: SafetensorsHeader, config_path: Path, weights: Path) -> None:
    """Fields no shape reveals (``n_head``…) against the configuration arvis recorded in the weights file when it
    saved them (:data:`CONFIG_METADATA_KEY`); files without the record (official or older ones) pass."""
    recorded = header.metadata.get(CONFIG_METADATA_KEY)
    if recorded is None:
        return
    try:
        saved = json.loads(recorded)
    except ValueError:
        raise CheckpointError(f"{str(weights)!r}: its {CONFIG_METADATA_KEY!r} metadata is not JSON") from None
    for key, value in saved.items():
        if key in raw and json.loads(json.dumps(raw[key])) != value:
            raise ConfigError(f"{str(config_path)!r}: {key} = {raw[key]!r}, but the weights in {weights.name} were "
                              f"saved with {key} = {value!r}; the config was edited or belongs to another model "
                              f"(the tensor shapes cannot tell)")


class CheckedFolderMixin:
    """Check a folder (:func:`check_model_folder`) before diffusers' ``from_pretrained`` loads it.

    Mix in before ``ModelMixin`` (``class M(CheckedFolderMixin, ModelMixin, ConfigMixin)``) and set
    ``config_bounds``. Weights are read from safetensors only. File-system errors while diffusers
    reads the checked folder become :class:`CheckpointError`.
    """

    config_bounds: ClassVar[Mapping[str, Bound]] = {}

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        folder = Path(pretrained_model_name_or_path).expanduser()
        if kwargs.get("subfolder"):
            folder = folder / kwargs["subfolder"]
        if folder.resolve() not in _CHECKED_FOLDERS.get() or kwargs.get("variant"):
            check_model_folder(cls, folder, kwargs.get("variant"))
        kwargs["use_safetensors"] = True
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)  # type: ignore[misc]
        except OSError as err:
            raise CheckpointError(f"model folder {str(folder)!r} could not be loaded ({err})") from None

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """diffusers' ``save_pretrained``; the weights file records the configuration (checked on load against
        ``config.json`` for what no shape reveals), and the files get the umask's permissions."""
        start = time.time_ns() - 1_000_000  # file-system timestamps may be coarser than the clock
        super().save_pretrained(save_directory, *args, **kwargs)  # type: ignore[misc]
        record = json.dumps({k: v for k, v in dict(self.config).items() if not k.startswith("_")},  # type: ignore[attr-defined]
                            sort_keys=True, default=list)
        for weights in Path(save_directory).glob("*.safetensors"):
            if weights.stat().st_mtime_ns >= start:
                add_safetensors_metadata(weights, {CONFIG_METADATA_KEY: record})
        apply_umask_to_written_files(save_directory, start)


def component_folder(root: str | os.PathLike, name: str) -> Path:
    """Where the component ``name`` of the pipeline folder ``root`` lives: ``root/name``, or the folder its link
    points to, which must lie inside ``root``, be a folder next to it (``vqvae -> ../vq-photos``, the way the
    shipped pipelines share a tokenizer) or a shipped model folder (``arvis/weights/vq-photos``, which pipelines
    assembled elsewhere link). A link anywhere else (``/``, ``/usr``, ``../../../../tmp``) is refused before
    anything reads or hashes what it points to.

    Raises:
        CheckpointError: the link points elsewhere, or cannot be resolved (a loop).
    """
    root = Path(root)
    path = root / name
    if not path.is_symlink():
        return path
    try:
        base, target = root.resolve(), path.resolve()
    except (OSError, RuntimeError) as err:  # a link loop
        raise CheckpointError(f"pipeline folder {str(root)!r}: {name} is a link that cannot be resolved ({err})") from None
    inside = target.is_relative_to(base)
    beside = target.parent in (base.parent, WEIGHTS_DIR) and target != target.parent
    if not (inside or beside):
        raise CheckpointError(f"pipeline folder {str(root)!r}: {name} is a link to {str(target)!r}, outside "
                              f"{root.name!r} and the folders next to it; a component may link only to a folder "
                              f"inside the pipeline folder, beside it (e.g. vqvae -> ../vq-photos) or shipped in "
                              f"arvis/weights")
    return target


# Libraries a pipeline component typed ``Any`` may come from (e.g. a transformers T5 text encoder).
COMPONENT_LIBRARIES = ("arvis", "diffusers", "transformers")


def check_pipeline_folder(pipeline_cls: Any, folder: str | os.PathLike, passed: Mapping[str, Any] = {}
                          ) -> frozenset[Path]:
    """Check a pipeline folder's ``model_index.json`` against ``pipeline_cls.__init__`` before loading.

    Every listed component must be an ``__init__`` argument, be of a class its type hint allows
    (by name and library; a hint of ``Any`` allows classes of :data:`COMPONENT_LIBRARIES`), and have
    its sub-folder; every required component must be listed (or passed to ``from_pretrained``).
    Components whose class checks its folders (:class:`CheckedFolderMixin`) are checked, and so are
    those the pipeline names in ``component_checks`` (component → :class:`FolderSpec`, a tuple of them when several
    model classes may sit there, or a function
    that checks the folder), all of them before diffusers loads the first one. The pipeline's own
    settings in ``model_index.json`` (``__init__`` arguments that are not components) are checked
    against its ``config_bounds``.

    Args:
        pipeline_cls: a ``DiffusionPipeline`` subclass.
        folder: the pipeline folder.
        passed: components given to ``from_pretrained`` as objects (not loaded from the folder).

    Returns:
        The component folders checked (resolved paths).

    Raises:
        CheckpointError: naming ``model_index.json`` and the component.
        ConfigError: a component's configuration or a pipeline setting.
    """
    folder = Path(folder).expanduser()
    checked: set[Path] = set()
    if not folder.is_dir():
        raise CheckpointError(f"pipeline folder {str(folder)!r} does not exist or is not a folder (arvis loads "
                              f"local folders; nothing is downloaded)")
    index_path = folder / "model_index.json"
    if not index_path.is_file():
        raise CheckpointError(f"pipeline folder {str(folder)!r} has no model_index.json (written by save_pretrained)")
    try:
        index = read_json_object(index_path)
    except ConfigError as err:
        raise CheckpointError(str(err)) from None
    declared = index.get("_class_name")
    if declared is not None and declared != pipeline_cls.__name__:
        raise CheckpointError(f"{str(index_path)!r} describes a {_name(declared)}, not a {pipeline_cls.__name__}")
    hints = pipeline_cls._get_signature_types()
    required, settings = pipeline_cls._get_signature_keys(pipeline_cls)
    optional = set(getattr(pipeline_cls, "_optional_components", []))
    component_checks: Mapping[str, Any] = getattr(pipeline_cls, "component_checks", {})
    check_config({k: v for k, v in index.items() if k in settings}, getattr(pipeline_cls, "config_bounds", {}),
                 source=str(index_path))
    for name, entry in index.items():
        if name.startswith("_") or name in passed or name in settings:
            continue
        if name not in hints:
            raise CheckpointError(f"{str(index_path)!r}: unknown component {name!r}; {pipeline_cls.__name__} takes "
                                  f"{', '.join(sorted(hints))}")
        if not (isinstance(entry, list | tuple) and len(entry) == 2):
            raise CheckpointError(f"{str(index_path)!r}: {name} must be [library, class], got {_show(entry)}")
        library, class_name = entry
        if library is None and class_name is None:
            if name in optional:
                continue
            raise CheckpointError(f"{str(index_path)!r}: the required component {name!r} is null")
        allowed = hints[name]
        ok_names = {t.__name__: t.__module__.split(".")[0] for t in allowed if isinstance(t, type)}
        open_hint = Any in allowed
        if not (isinstance(library, str) and isinstance(class_name, str)):
            raise CheckpointError(f"{str(index_path)!r}: {name} must be [library, class], got {_show(entry)}")
        root = library.split(".")[0]
        fits = (class_name in ok_names and root == ok_names[class_name]) or (open_hint and root in COMPONENT_LIBRARIES)
        spec = component_checks.get(name)
        if isinstance(spec, tuple):  # several model classes may sit there: the folder's own class picks its spec
            spec = next((s for s in spec if s.class_name == class_name), spec[0])
            specs = component_checks[name]
        else:
            specs = (spec,) if isinstance(spec, FolderSpec) else ()
        if specs and fits and class_name not in {s.class_name for s in specs}:
            ok_names, fits = {s.class_name: root for s in specs}, False
        if not fits:
            raise CheckpointError(
                f"{str(index_path)!r}: {name} is a {library}.{class_name}, but {pipeline_cls.__name__} takes a "
                f"{' or '.join(sorted(ok_names)) or 'model'} there")
        if not component_folder(folder, name).is_dir():
            raise CheckpointError(f"{str(index_path)!r} lists {name!r} but {str(folder)!r} has no {name}/ folder")
        component_cls = next((t for t in allowed if isinstance(t, type) and t.__name__ == class_name), None)
        if isinstance(spec, FolderSpec):
            check_model_folder(spec, folder / name)
        elif spec is not None:
            spec(folder / name)
        elif component_cls is not None and issubclass(component_cls, CheckedFolderMixin):
            check_model_folder(component_cls, folder / name)
            checked.add((folder / name).resolve())
    listed = {k for k in index if not k.startswith("_")} | set(passed)
    missing = sorted(set(required) - listed - optional)
    if missing:
        raise CheckpointError(f"{str(index_path)!r} lists no {', '.join(missing)}; {pipeline_cls.__name__} needs them")
    return frozenset(checked)


class CheckedPipelineMixin:
    """Check a pipeline folder (:func:`check_pipeline_folder`) before diffusers' ``from_pretrained``.

    Mix in before ``DiffusionPipeline``. Each component is then checked by its own class
    (:class:`CheckedFolderMixin`) as diffusers loads it. File-system errors become
    :class:`CheckpointError`.
    """

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs: Any) -> Any:
        names = cls._get_signature_types()  # type: ignore[attr-defined]
        checked = check_pipeline_folder(cls, pretrained_model_name_or_path,
                                        {k: v for k, v in kwargs.items() if k in names})
        token = _CHECKED_FOLDERS.set(checked)
        try:
            return super().from_pretrained(pretrained_model_name_or_path, **kwargs)  # type: ignore[misc]
        except OSError as err:
            raise CheckpointError(f"pipeline folder {str(pretrained_model_name_or_path)!r} could not be loaded "
                                  f"({err})") from None
        finally:
            _CHECKED_FOLDERS.reset(token)

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """diffusers' ``save_pretrained``, with every component's files given the umask's permissions
        (safetensors writes 0600 for diffusers and transformers components alike)."""
        start = time.time_ns() - 1_000_000
        super().save_pretrained(save_directory, *args, **kwargs)  # type: ignore[misc]
        apply_umask_to_written_files(save_directory, start, subfolders=self.components)  # type: ignore[attr-defined]
