"""What every arvis pipeline does the same way: sampling defaults from the model folder, and around a decode
progress, step callbacks (diffusers' contract, interruption), output types."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import torch
from diffusers.callbacks import MultiPipelineCallbacks, PipelineCallback

from arvis.engine.engine import DecodeEngine, NonFiniteError
from arvis.engine.sampling import SamplingConfig
from arvis.engine.stats import BatchStats
from arvis.errors import ConfigError
from arvis.methods.registry import decode
from arvis.models.protocol import Backbone, Condition
from arvis.utils.config_check import Bound, check_config
from arvis.utils.modes import CFG_SCHEDULES
from arvis.utils.random import GeneratorArg

OUTPUT_TYPES = ("pil", "np", "pt", "latent")
PREVIEW_GREY = 0.5  # colour of not-yet-committed token cells in partial images (previews)
# What a model folder's sampling_defaults.json may set (SamplingConfig's fields a user would tune).
SAMPLING_FIELDS = ("guidance_scale", "top_k", "top_p", "temperature", "cfg_interval")
_CONFIG_FIELDS = ("guidance_scale", "top_k", "top_p", "temperature", "cfg_interval", "cfg_schedule")


_FP32_MAX = float(torch.finfo(torch.float32).max)  # SamplingConfig computes the target distribution in fp32
# What each setting of a sampling_defaults.json may hold (the ranges of SamplingConfig and of MAR's decoder).
SAMPLING_BOUNDS: dict[str, Bound] = {
    "guidance_scale": Bound.number(0.0, _FP32_MAX),
    "temperature": Bound.number(0.0, _FP32_MAX),
    "top_k": Bound.integer(0, 1 << 30),
    "top_p": Bound.number(0.0, 1.0, open_low=True),
    "cfg_interval": Bound.integer(-1, 1 << 30),
    "num_iter": Bound.integer(1, 4096),
    "cfg_schedule": Bound.choice(*CFG_SCHEDULES),
}


def read_sampling_defaults(folder: Path, fields: Sequence[str] = SAMPLING_FIELDS) -> dict[str, Any]:
    """The folder's ``sampling_defaults.json`` checked against ``fields`` and :data:`SAMPLING_BOUNDS` when the
    pipeline loads (``{}`` when absent).

    Raises:
        ConfigError: an unknown setting or a value out of its range, naming the file and the setting.
    """
    from arvis.hub import SAMPLING_DEFAULTS_FILE
    from arvis.hub import read_sampling_defaults as read_file

    defaults = read_file(folder)
    unknown = sorted(set(defaults) - set(fields))
    if unknown:
        raise ConfigError(f"{SAMPLING_DEFAULTS_FILE}: unknown setting(s) {unknown}; known: {list(fields)}")
    return check_config(defaults, {k: SAMPLING_BOUNDS[k] for k in fields}, source=str(folder / SAMPLING_DEFAULTS_FILE))


class SamplingDefaultsMixin:
    """A pipeline whose model folder decides the sampling settings a call leaves out.

    Mix in before ``DiffusionPipeline``. ``from_pretrained`` accepts a shipped model's name (:mod:`arvis.hub`)
    or a folder and reads the folder's ``sampling_defaults.json`` into :attr:`sampling_defaults`;
    ``save_pretrained`` writes it back; :meth:`sampling_config` merges a call's settings over them.
    """

    _sampling_defaults: dict[str, Any] | None = None
    sampling_fields: tuple[str, ...] = SAMPLING_FIELDS  # what sampling_defaults.json may set
    guidance: str = "llamagen"  # the family's guidance rule (arvis.engine.guidance)
    fallback_sampling_defaults: dict[str, Any] = {}  # used when the folder has no sampling_defaults.json

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs: Any) -> Any:
        """Load a pipeline from a shipped model's name (``"c2i"``, ``"var"``…; :mod:`arvis.hub`) or a folder.

        A folder holding ``model_index.json`` wins over a name. Nothing is downloaded. Other keyword
        arguments go to ``DiffusionPipeline.from_pretrained`` (``dtype``…).
        """
        from arvis.hub import resolve_model

        name = os.fspath(pretrained_model_name_or_path)
        if not Path(name).is_dir():
            name = str(resolve_model(name))  # ValueError listing the names when nothing matches
        kwargs.setdefault("local_files_only", True)
        pipe = super().from_pretrained(name, **kwargs)  # type: ignore[misc]
        pipe._sampling_defaults = (read_sampling_defaults(Path(name), cls.sampling_fields)
                                   or dict(cls.fallback_sampling_defaults))
        return pipe

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs: Any) -> None:
        """``DiffusionPipeline.save_pretrained`` without machine paths, plus the folder's ``sampling_defaults.json``."""
        from arvis.hub import SAMPLING_DEFAULTS_FILE
        from arvis.utils.files import atomic_path

        super().save_pretrained(save_directory, **kwargs)  # type: ignore[misc]
        folder = Path(save_directory)
        # diffusers records where each component was loaded from (``_name_or_path``): an absolute path of
        # this machine. A saved folder stands alone, so the field is dropped (loading sets it again).
        for config in [folder / "model_index.json", *folder.glob("*/config.json")]:
            if config.is_file():
                data = json.loads(config.read_text())
                if data.pop("_name_or_path", None) is not None:
                    with atomic_path(config) as tmp:
                        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        if self.sampling_defaults:
            with atomic_path(folder / SAMPLING_DEFAULTS_FILE) as tmp:
                tmp.write_text(json.dumps(self.sampling_defaults, indent=2) + "\n")

    @property
    def sampling_defaults(self) -> dict[str, Any]:
        """The model's sampling defaults (``guidance_scale``, ``top_k``…): the folder's
        ``sampling_defaults.json`` when loaded from one; settable."""
        if self._sampling_defaults is None:
            origin = getattr(self.config, "_name_or_path", None)  # type: ignore[attr-defined]
            found = read_sampling_defaults(Path(origin), self.sampling_fields) if origin else {}
            self._sampling_defaults = found or dict(self.fallback_sampling_defaults)
        return self._sampling_defaults

    @sampling_defaults.setter
    def sampling_defaults(self, value: dict[str, Any]) -> None:
        unknown = sorted(set(value) - set(self.sampling_fields))
        if unknown:
            raise ValueError(f"sampling_defaults: unknown setting(s) {unknown}; known: {list(self.sampling_fields)}")
        self._sampling_defaults = dict(value)

    def sampling_config(self, **settings: Any) -> SamplingConfig:
        """The sampling settings of a call: given values, else :attr:`sampling_defaults`, else
        :class:`~arvis.engine.SamplingConfig`'s defaults (``None`` means "not given"), with the family's
        guidance rule."""
        known = [f for f in self.sampling_fields if f in _CONFIG_FIELDS]
        unknown = sorted(k for k, v in settings.items() if k not in known and v is not None)
        if unknown:
            raise ValueError(f"unknown sampling setting(s) {unknown} for this model; known: {known}")
        merged = {k: v for k, v in self.sampling_defaults.items() if k in known}
        merged.update({k: v for k, v in settings.items() if v is not None})
        return SamplingConfig(**merged, guidance=self.guidance)


def check_output_type(output_type: str) -> None:
    if output_type not in OUTPUT_TYPES:
        raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}")


class Interrupted(Exception):
    """Raised inside a decode's step hook when a callback set ``pipe._interrupt`` (every pipeline catches it and
    returns what was committed so far)."""


# What ``callback_on_step_end`` may ask for (diffusers' ``callback_on_step_end_tensor_inputs``).
CALLBACK_TENSOR_INPUTS = ("tokens", "known")


def callback_tensor_inputs(callback: Callable | None, names: Sequence[str] | None) -> list[str]:
    """The tensors a step callback receives: ``PipelineCallback`` objects declare their own; names outside
    :data:`CALLBACK_TENSOR_INPUTS` are an error."""
    if isinstance(callback, PipelineCallback | MultiPipelineCallbacks):
        names = callback.tensor_inputs
    tensor_inputs = list(names or ())
    unknown = [k for k in tensor_inputs if k not in CALLBACK_TENSOR_INPUTS]
    if unknown:
        raise ValueError(f"callback_on_step_end_tensor_inputs: {unknown} are not among {list(CALLBACK_TENSOR_INPUTS)}")
    return tensor_inputs


def run_step_callback(pipe: Any, callback: Callable | None, tensor_inputs: Sequence[str], step: int,
                      tokens: torch.Tensor, known: torch.Tensor) -> None:
    """Call ``callback(pipe, step, committed_per_sample, {name: copy})`` once and honour its return value; then
    stop the decode (:class:`Interrupted`) if it set ``pipe._interrupt``. Every pipeline's step hook ends here.

    The callback gets copies of the tensors named in ``tensor_inputs`` (``tokens`` ``[B, N]``, ``NO_TOKEN``
    where not committed; ``known`` ``[B, N]`` bool). It may return ``None`` or a dict; committed tokens are
    final in autoregressive decoding, so a returned ``tokens`` or ``known`` that differs is an error.
    """
    if callback is not None:
        _call_step_callback(pipe, callback, tensor_inputs, step, tokens, known)
    if pipe._interrupt:
        raise Interrupted()


def _call_step_callback(pipe: Any, callback: Callable, tensor_inputs: Sequence[str], step: int, tokens: torch.Tensor,
                        known: torch.Tensor) -> None:
    state = {"tokens": tokens, "known": known}
    returned = callback(pipe, step, known.sum(-1), {k: state[k].clone() for k in tensor_inputs})
    if returned is None:
        return
    if not isinstance(returned, dict):
        raise TypeError(f"callback_on_step_end must return a dict or None, got {type(returned).__name__}")
    for key, value in returned.items():
        if key in state and not (isinstance(value, torch.Tensor) and torch.equal(value.to(state[key].device),
                                                                                state[key])):
            raise ValueError(f"callback_on_step_end returned a changed {key!r}: committed tokens are final in "
                             f"autoregressive decoding; set pipe._interrupt = True to stop early instead")


def decode_with_progress(pipe: Any, backbone: Backbone, condition: Condition, sampling: SamplingConfig,
                         method: Any, generator: GeneratorArg, callback_on_step_end: Callable | None,
                         tensor_inputs: Sequence[str] = CALLBACK_TENSOR_INPUTS) -> tuple[torch.Tensor, BatchStats]:
    """:func:`arvis.methods.decode` with the pipeline's progress bar (committed tokens, at most 10 updates a
    second) and diffusers' step callback after every commit (:func:`run_step_callback`).

    Args:
        method: a built token method (the pipeline's ``build_method``).
        tensor_inputs: the tensors the callback receives (checked by :func:`callback_tensor_inputs`).

    A callback that sets ``pipe._interrupt = True`` stops the decode after that commit: the tokens committed so
    far are returned (``NO_TOKEN`` elsewhere) with the statistics up to there.

    Returns:
        ``tokens [B, N]`` and the decode statistics.
    """
    B, N = condition.batch_size, backbone.layout.num_tokens
    if isinstance(generator, list | tuple) and len(generator) != B:
        raise ValueError(f"generator: got {len(generator)} generators for {B} images; pass one, or one per image")
    pipe._interrupt = False
    progress = pipe.progress_bar(total=B * N)
    committed = [0]
    last_update = [0.0]
    engines: list[DecodeEngine] = []

    def on_commit(engine: DecodeEngine) -> None:
        if not engines:
            engines.append(engine)
        now = time.monotonic()
        if now - last_update[0] > 0.1:  # a host sync for the display at most 10 times a second
            done = int(engine.known.sum())
            progress.update(done - committed[0])
            committed[0], last_update[0] = done, now
        run_step_callback(pipe, callback_on_step_end, tensor_inputs, engine.stats.forward_index - 1, engine.tokens,
                          engine.known)

    try:
        tokens, stats = decode(backbone, condition, sampling, method, generator, on_commit)
        progress.update(B * N - committed[0])
    except Interrupted:
        engine = engines[0]
        tokens, stats = engine.tokens.clone(), engine.partial_stats()
    finally:
        progress.close()
    return tokens, stats


def grey_uncommitted(images: torch.Tensor, known: torch.Tensor) -> torch.Tensor:
    """Decoded images ``[B, 3, H, W]`` in ``[-1, 1]`` with the cells of uncommitted tokens drawn grey (``known``
    ``[B, h, w]`` bool: committed token cells) — partial images: previews and interrupted decodes."""
    cells = torch.nn.functional.interpolate(known[:, None].float().to(images.device), size=images.shape[-2:],
                                            mode="nearest").to(images.dtype)
    return images * cells + (2 * PREVIEW_GREY - 1) * (1 - cells)
def check_finite_pixels(images: torch.Tensor, unit: str = "image") -> None:
    """Refuse decoded pixels ``[B, …]`` that are NaN or infinite (a decoder whose weights or activations are not
    finite): they would become NaN arrays or black images without a word. One host read per decoded batch.

    Raises:
        NonFiniteError: naming the ``unit`` indices (images, or clips) affected.
    """
    bad = ~torch.isfinite(images.reshape(images.shape[0], -1)).all(1)
    if bool(bad.any()):
        which = bad.nonzero().flatten().tolist()
        shown = ", ".join(str(i) for i in which[:8]) + (", …" if len(which) > 8 else "")
        raise NonFiniteError(f"the image decoder produced NaN or infinite pixels ({unit} {shown} of {len(bad)}): its "
                             f"weights or activations are not finite (a damaged decoder, or an overflow in a low "
                             f"precision dtype; try float32)")


def images_to_output(images: torch.Tensor, output_type: str) -> list[PIL.Image.Image] | np.ndarray | torch.Tensor:
    """Decoded images ``[B, 3, H, W]`` in ``[-1, 1]`` → ``"pt"`` (``[0, 1]``), ``"np"`` (``[B, H, W, 3]``) or PIL.

    Raises:
        NonFiniteError: a pixel is NaN or infinite (:func:`check_finite_pixels`).
    """
    check_finite_pixels(images)
    images = ((images.float() + 1) / 2).clamp(0, 1).cpu()
    if output_type == "pt":
        return images
    array = images.permute(0, 2, 3, 1).numpy()
    if output_type == "np":
        return array
    return [PIL.Image.fromarray((a * 255).round().astype(np.uint8)) for a in array]
