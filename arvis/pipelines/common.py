"""What every arvis pipeline does the same way around a decode: progress, step callbacks, output types."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import PIL.Image
import torch

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.engine.stats import BatchStats
from arvis.methods import decode
from arvis.models.protocol import Backbone, Condition
from arvis.utils.random import GeneratorArg

OUTPUT_TYPES = ("pil", "np", "pt", "latent")


def check_output_type(output_type: str) -> None:
    if output_type not in OUTPUT_TYPES:
        raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}")


def decode_with_progress(pipe: Any, backbone: Backbone, condition: Condition, sampling: SamplingConfig,
                         method: Any, generator: GeneratorArg, callback_on_step_end: Callable | None,
                         method_options: dict[str, Any]) -> tuple[torch.Tensor, BatchStats]:
    """:func:`arvis.methods.decode` with the pipeline's progress bar (committed tokens, at most 10 updates a
    second) and ``callback_on_step_end(pipe, forward_index, committed_per_sample, {"tokens", "known"})``."""
    B, N = condition.batch_size, backbone.layout.num_tokens
    if isinstance(generator, list | tuple) and len(generator) != B:
        raise ValueError(f"generator: got {len(generator)} generators for {B} images; pass one, or one per image")
    progress = pipe.progress_bar(total=B * N)
    committed = [0]
    last_update = [0.0]

    def on_commit(engine: DecodeEngine) -> None:
        now = time.monotonic()
        if now - last_update[0] > 0.1:  # a host sync for the display at most 10 times a second
            done = int(engine.known.sum())
            progress.update(done - committed[0])
            committed[0], last_update[0] = done, now
        if callback_on_step_end is not None:
            callback_on_step_end(pipe, engine.stats.forward_index - 1, engine.known.sum(-1),
                                 {"tokens": engine.tokens, "known": engine.known})

    try:
        tokens, stats = decode(backbone, condition, sampling, method, generator, on_commit, **method_options)
        progress.update(B * N - committed[0])
    finally:
        progress.close()
    return tokens, stats


def images_to_output(images: torch.Tensor, output_type: str) -> list[PIL.Image.Image] | np.ndarray | torch.Tensor:
    """Decoded images ``[B, 3, H, W]`` in ``[-1, 1]`` → ``"pt"`` (``[0, 1]``), ``"np"`` (``[B, H, W, 3]``) or PIL."""
    images = ((images.float() + 1) / 2).clamp(0, 1).cpu()
    if output_type == "pt":
        return images
    array = images.permute(0, 2, 3, 1).numpy()
    if output_type == "np":
        return array
    return [PIL.Image.fromarray((a * 255).round().astype(np.uint8)) for a in array]
