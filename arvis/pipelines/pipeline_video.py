"""Diffusers-style pipeline for class-conditional (and image-to-video) clip generation with a video GPT.

One ``__call__`` with diffusers' conventions (``generator``, ``num_videos_per_prompt``, ``output_type``,
``return_dict``, ``callback_on_step_end``) plus ``method`` and its options, exactly as the image
pipelines: a lossless method changes how fast the clip comes, never its distribution. Frames are
tokenised one by one by the pipeline's VQ (``vqvae``); the transformer decodes ``T x h x w`` tokens in
frame-major raster order (:class:`arvis.models.video.VideoTransformer`).

Image-to-video: pass ``image`` (the first frame; PIL, ``uint8 [H, W, 3]`` or a list, one per class
label) or its tokens ``first_frame_tokens [B, h, w]``; the frame is written into the cache by the prefill
(:class:`arvis.models.video.FramePrefix`) and every method decodes the frames after it. The returned
clip starts with the given frame as the tokenizer reconstructs it.

Example:
    >>> from arvis.pipelines.pipeline_video import VideoPipeline, export_frames
    >>> pipe = VideoPipeline.from_pretrained("arvis/weights/video-emoji")  # doctest: +SKIP
    >>> out = pipe(class_labels=["red apple"], method="mc-sjd", window=64, coupling="gumbel", init="repeat_temporal",
    ...            generator=torch.Generator().manual_seed(0))
    >>> export_frames(out.frames[0], "apple.gif", fps=4); print(out.stats.format())
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import torch
from diffusers import DiffusionPipeline
from diffusers.utils import BaseOutput

from arvis.engine.engine import NO_TOKEN
from arvis.engine.stats import BatchStats
from arvis.methods.registry import decode
from arvis.models.protocol import Condition
from arvis.models.video import FramePrefix, VideoTransformer
from arvis.pipelines.common import check_finite_pixels, decode_with_progress, grey_uncommitted
from arvis.pipelines.interface import ArvisPipeline, BenchInputs
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from arvis.utils.config_check import CheckedPipelineMixin
from arvis.utils.random import GeneratorArg

__all__ = ["VIDEO_FORMATS", "VideoPipeline", "VideoPipelineOutput", "check_fps", "check_mp4_writer", "export_frames"]

OUTPUT_TYPES = ("pil", "np", "pt", "latent")
VIDEO_FORMATS = (".gif", ".mp4")


@dataclass
class VideoPipelineOutput(BaseOutput):
    """Output of :class:`VideoPipeline`.

    Attributes:
        frames: per video a list of PIL frames (``"pil"``), ``np.ndarray [B, T, H, W, 3]`` in [0, 1] (``"np"``),
            ``torch.Tensor [B, T, 3, H, W]`` in [0, 1] (``"pt"``), or the token grids (``"latent"``).
        tokens: ``[B, T, h, w]`` int64 token ids (the given first frame included, for image-to-video).
        stats: decode statistics of the generated frames.
    """

    frames: list[list[PIL.Image.Image]] | np.ndarray | torch.Tensor
    tokens: torch.Tensor
    stats: BatchStats


class VideoPipeline(ArvisPipeline, CheckedPipelineMixin, DiffusionPipeline):
    """Class-conditional clips with a :class:`~arvis.models.video.VideoTransformer` and a per-frame VQ.

    Components:
        transformer: the video GPT (target model).
        vqvae: :class:`~arvis.tokenizers.llamagen_vq.LlamaGenVQModel`, frames ↔ codes.
    """

    model_cpu_offload_seq = "transformer->vqvae"

    def __init__(self, transformer: VideoTransformer, vqvae: LlamaGenVQModel):
        super().__init__()
        if transformer.config.vocab_size != vqvae.config.codebook_size:
            raise ValueError(f"vqvae: its codebook has {vqvae.config.codebook_size} entries but the transformer "
                             f"predicts {transformer.config.vocab_size} token ids")
        self.register_modules(transformer=transformer, vqvae=vqvae)

    # ------------------------------------------------------------------ inputs
    @property
    def num_frames(self) -> int:
        return self.transformer.layout.grid[0]

    @property
    def resolution(self) -> int:
        """Frame side in pixels."""
        return self.transformer.layout.grid[1] * self.vqvae.downsample_factor

    def encode_frames(self, images: Any) -> torch.Tensor:
        """Frames (PIL, ``uint8 [H, W, 3]``, ``uint8 [B, H, W, 3]`` or a list) → codes ``[B, h, w]``.

        Images of another size are resized (bicubic) to the model's frame side first.
        """
        items = images if isinstance(images, list | tuple) else [images]
        if isinstance(images, np.ndarray) and images.ndim == 4:
            items = list(images)
        arrays = []
        for item in items:
            if isinstance(item, PIL.Image.Image):
                item = np.asarray(item.convert("RGB"))
            if not isinstance(item, np.ndarray) or item.dtype != np.uint8 or item.ndim != 3 or item.shape[-1] != 3:
                raise ValueError("image: expected PIL images or uint8 arrays [H, W, 3], got "
                                 f"{getattr(item, 'dtype', type(item).__name__)} {getattr(item, 'shape', '')}")
            if item.shape[:2] != (self.resolution, self.resolution):
                item = np.asarray(PIL.Image.fromarray(item).resize((self.resolution,) * 2, PIL.Image.Resampling.BICUBIC))
            arrays.append(item)
        x = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
        with torch.no_grad():
            return self.vqvae.encode(x.to(self.vqvae.device, self.vqvae.dtype)).long()

    # ------------------------------------------------------------------ outputs
    def decode_tokens(self, tokens: torch.Tensor, output_type: str = "pil", known: torch.Tensor | None = None):
        """Token clips ``[B, T, h, w]`` → frames in ``output_type`` (see :class:`VideoPipelineOutput`).

        ``known`` (``[B, T, h, w]`` bool, optional) marks committed tokens: the other cells are drawn grey
        (partial clips: previews while decoding).
        """
        if output_type == "latent":
            return tokens
        B, T = tokens.shape[:2]
        filled = tokens if known is None else torch.where(known, tokens, torch.zeros_like(tokens))
        with torch.no_grad():
            frames = self.vqvae.decode_codes(filled.flatten(0, 1).to(self.vqvae.device)).float().cpu()
        check_finite_pixels(frames.unflatten(0, (B, T)), unit="clip")
        if known is not None:
            frames = grey_uncommitted(frames, known.flatten(0, 1))
        frames = ((frames + 1) / 2).clamp(0, 1).unflatten(0, (B, T))  # [B, T, 3, H, W]
        if output_type == "pt":
            return frames
        array = frames.permute(0, 1, 3, 4, 2).numpy()
        if output_type == "np":
            return array
        return [[PIL.Image.fromarray((f * 255).round().astype(np.uint8)) for f in clip] for clip in array]

    # ------------------------------------------------------------------ call
    @torch.no_grad()
    def __call__(
        self,
        class_labels: int | str | Sequence[int | str],
        image: Any = None,
        first_frame_tokens: torch.Tensor | None = None,
        guidance_scale: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        temperature: float | None = None,
        num_videos_per_prompt: int = 1,
        generator: GeneratorArg = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable[[VideoPipeline, int, torch.Tensor, dict], Any] | None = None,
        method: str = "ar",
        **method_options: Any,
    ) -> VideoPipelineOutput | tuple:
        """Generate clips.

        Args:
            class_labels: video class ids or names (``pipe.class_names``).
            image: optional first frame per class label (image-to-video); ``first_frame_tokens`` ``[B, h, w]``
                instead gives its codes.
            guidance_scale: classifier-free guidance (>= 0; 1 disables it).
            top_k, top_p, temperature: sampling of the target distribution (0 = all tokens; 0 = greedy).
                Settings left ``None`` come from :attr:`sampling_defaults` (the model folder's
                ``sampling_defaults.json``), then from :class:`~arvis.engine.SamplingConfig`.
            num_videos_per_prompt: clips per class label (>= 1).
            generator: a ``torch.Generator``, or one per clip.
            output_type: ``"pil"``, ``"np"``, ``"pt"`` or ``"latent"``.
            return_dict: return a :class:`VideoPipelineOutput` (else ``(frames, tokens, stats)``).
            callback_on_step_end: ``f(pipe, forward_index, committed_per_clip, {"tokens", "known"})`` after
                every target forward that committed tokens (frames filling live).
            method: decoding method (:meth:`methods` lists them), e.g. ``"mc-sjd"``.
            **method_options: the method's options (``window=64, coupling="gumbel", init="repeat_temporal"``…).

        Returns:
            :class:`VideoPipelineOutput`.
        """
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}")
        if not isinstance(num_videos_per_prompt, int) or isinstance(num_videos_per_prompt, bool) \
                or num_videos_per_prompt < 1:
            raise ValueError(f"num_videos_per_prompt must be an integer >= 1, got {num_videos_per_prompt!r}")
        if image is not None and first_frame_tokens is not None:
            raise ValueError("pass at most one of image and first_frame_tokens")
        sampling = self.sampling_config(temperature=temperature, top_k=top_k, top_p=top_p,
                                        guidance_scale=guidance_scale)
        ids = self.class_ids(class_labels)
        device = self.transformer.device
        condition = Condition(class_labels=torch.tensor(ids, device=device)).repeat_interleave(num_videos_per_prompt)
        B = condition.batch_size
        if isinstance(generator, list | tuple) and len(generator) != B:
            raise ValueError(f"generator: got {len(generator)} generators for {B} clips; pass one, or one per clip")
        _, h, w = self.transformer.layout.grid
        backbone: Any = self.transformer
        prefix = None
        if image is not None:
            first_frame_tokens = self.encode_frames(image)
        if first_frame_tokens is not None:
            prefix = torch.as_tensor(first_frame_tokens, device=device).long()
            if prefix.ndim != 3 or prefix.shape[1:] != (h, w) or prefix.shape[0] != len(ids):
                raise ValueError(f"first_frame_tokens / image: expected one {h}x{w} frame per class label "
                                 f"({len(ids)}), got shape {tuple(prefix.shape)}")
            prefix = prefix.flatten(1).repeat_interleave(num_videos_per_prompt, 0)
            backbone = FramePrefix(self.transformer, prefix)
        method_obj = self.build_method(method, **method_options)  # refused before anything runs
        tokens, stats = decode_with_progress(self, backbone, condition, sampling, method_obj, generator,
                                             callback_on_step_end)
        if prefix is not None:
            tokens = torch.cat([prefix, tokens], dim=1)
        tokens = tokens.view(B, *self.transformer.layout.grid)
        known = tokens != NO_TOKEN if self._interrupt else None  # an interrupted decode: draw the rest grey
        frames = self.decode_tokens(tokens, output_type, known)
        self.maybe_free_model_hooks()
        if not return_dict:
            return frames, tokens, stats
        return VideoPipelineOutput(frames=frames, tokens=tokens, stats=stats)

    def codebook_neighbours(self, k: int) -> torch.Tensor:
        """``[V, k]`` latent neighbourhoods of the tokenizer's codebook (relaxed acceptance), cached on disk."""
        from arvis.methods.relaxation import codebook_neighbourhoods

        return codebook_neighbourhoods(self.vqvae.codebook_embeddings(), k)

    # ------------------------------------------------------------------ the family seam
    def resources(self) -> dict[str, Any]:
        return {"neighbours": self.codebook_neighbours}

    def bench_inputs(self, conditions: Sequence[int | str] | None, samples: int, batch_size: int) -> BenchInputs:
        device = self.transformer.device
        batches = [(idx, Condition(class_labels=torch.tensor(self.class_ids(values), device=device)))
                   for idx, values in self.condition_batches(conditions, samples, batch_size)]
        return BenchInputs(batches, lambda cond, sampling, method, gens: decode(self.transformer, cond, sampling,
                                                                                method, gens),
                           lambda name, options: self.build_method(name, **options), tuple(self.token_layout.grid),
                           self.transformer.device, self.transformer)


def check_fps(fps: Any) -> float:
    """``fps`` if it is a number in (0, 240]; ``ValueError`` otherwise."""
    if isinstance(fps, bool) or not (isinstance(fps, int | float) and 0 < fps <= 240):
        raise ValueError(f"fps must be a number in (0, 240], got {fps!r}")
    return float(fps)


def check_mp4_writer() -> None:
    """``ValueError`` unless imageio's ffmpeg writer is installed (checked before any work is done)."""
    # Without its ffmpeg plugin imageio would hand a .mp4 to another writer (tifffile) and fail obscurely.
    if importlib.util.find_spec("imageio") is None or importlib.util.find_spec("imageio_ffmpeg") is None:
        raise ValueError("writing MP4 needs imageio and imageio-ffmpeg (pip install 'arvis[video]'); "
                         "or write a .gif")


def export_frames(frames: Sequence[PIL.Image.Image] | np.ndarray, path: str | os.PathLike, fps: float = 4.0,
                  comment: str | None = None) -> Path:
    """Write one clip as a GIF (PIL) or an MP4 (imageio's ffmpeg writer, needs ``imageio-ffmpeg``), atomically.

    A GIF stores a frame equal to the one before once, shown for longer: it plays the same, but a reader
    of the file sees fewer frames.

    Args:
        frames: PIL frames, or ``[T, H, W, 3]`` uint8 / float in [0, 1].
        path: ``.gif`` or ``.mp4`` file.
        fps: frames per second (> 0).
        comment: GIF only: text stored in the file's comment (e.g. the generation parameters as JSON).

    Returns:
        ``path``.
    """
    from arvis.utils.files import atomic_path

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in VIDEO_FORMATS:
        raise ValueError(f"path: video files end in {' or '.join(VIDEO_FORMATS)}, got {str(path)!r}")
    check_fps(fps)
    if isinstance(frames, np.ndarray):
        array = frames if frames.dtype == np.uint8 else (np.clip(frames, 0, 1) * 255).round().astype(np.uint8)
    else:
        array = np.stack([np.asarray(f.convert("RGB")) for f in frames])
    if array.ndim != 4 or array.shape[-1] != 3 or len(array) == 0:
        raise ValueError(f"frames: expected [T, H, W, 3], got shape {array.shape}")
    if suffix == ".gif":
        images = [PIL.Image.fromarray(a) for a in array]
        with atomic_path(path) as tmp:
            images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], duration=round(1000 / fps),
                           loop=0, **({"comment": comment} if comment else {}))
        return path
    try:
        check_mp4_writer()
    except ValueError as err:
        raise ValueError(f"path: {err}") from None
    import imageio.v3 as iio

    path.parent.mkdir(parents=True, exist_ok=True)
    # ffmpeg picks the container from the file name: write under the real name in a private folder, then move.
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as tmp:
        staged = Path(tmp) / path.name
        try:
            iio.imwrite(staged, array, extension=".mp4", fps=fps, codec="libx264", macro_block_size=16)
        except (ImportError, RuntimeError, OSError) as err:
            raise ValueError(f"path: could not write MP4 ({err}); install imageio-ffmpeg or write a .gif") from err
        os.replace(staged, path)
    return path
