"""Large sampling jobs: every image a pure function of ``(seed, index)``, sharded over ranks, crash-safe.

The rules that make a job reproducible and resumable (docs/measurement.md, docs/reliability.md):

- Image ``i`` uses its own generator ``torch.Generator().manual_seed(seed_for(seed, i))`` and its own
  condition (class ``labels[i % len(labels)]`` or prompt ``prompts[i % len(prompts)]``), so it does not
  depend on the world size, the rank that draws it, the batch it is drawn in, or on a resume. Token
  grids are decoded to pixels one image at a time: the VQ decoder's batched convolutions differ in
  the last float bits with the batch size, which can flip a rounded pixel and so the PNG bytes.
- Rank ``r`` of ``W`` draws the indices ``i`` with ``i % W == r`` (no padding, no duplicates; unlike
  ``accelerate``'s ``split_between_processes``, which pads by repeating samples).
- Each image is written as ``{index:06d}.png`` through a hidden temporary file and an atomic rename,
  so a reader (clean-fid globs ``*.png``) only ever sees finished images. ``manifest.json`` (written
  atomically) records the job at the start and every image's sha256 at the end.
- ``resume=True`` keeps every PNG that decodes completely, removes temporaries a killed writer left,
  and draws only the missing indices. A finished job resumed with a larger ``num_samples`` extends it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from arvis.eval.files import (
    is_valid_image,
    png_bytes,
    remove_stale_temporaries,
    sha256_file,
    write_bytes_atomic,
    write_json_atomic,
)
from arvis.utils.random import image_generator, seed_for  # noqa: F401  (the per-image seed rule, re-exported)

MANIFEST = "manifest.json"


def shard(indices: Sequence[int], rank: int, world_size: int) -> list[int]:
    """The indices rank ``rank`` of ``world_size`` draws: ``i % world_size == rank``."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size), got rank={rank}, world_size={world_size}")
    return [i for i in indices if i % world_size == rank]


def image_path(folder: str | os.PathLike, index: int) -> Path:
    return Path(folder) / f"{index:06d}.png"


# ----------------------------------------------------------------------------- drawing images
class PipelineSampler:
    """Draw images from a :class:`~arvis.pipelines.LlamaGenPipeline` by index.

    ``sampler([i, j, ...])`` returns ``uint8 [B, H, W, 3]``; image ``i`` depends only on ``(seed, i)``
    and the settings here. The pipeline's own progress bar is turned off (jobs show their own).

    Args:
        pipe: the pipeline.
        seed: the job seed.
        method: decoding method name; ``method_options`` its options.
        labels: class ids cycled over indices (class-conditional; default: all classes in order).
        prompts: prompts cycled over indices (text-conditional).
        **sampling: ``guidance_scale``, ``top_k``, ``top_p``, ``temperature``, ``cfg_interval``.
    """

    def __init__(self, pipe: Any, seed: int, method: str = "ar", method_options: dict[str, Any] | None = None,
                 labels: Sequence[int | str] | None = None, prompts: Sequence[str] | None = None, **sampling: Any):
        from arvis.methods import build_method, with_resources

        seed_for(seed, 0)  # validates the seed
        # Validates the method and its options, with the resources the pipeline will pass (draft model,
        # codebook neighbourhoods).
        build_method(method, **with_resources(method, method_options or {}, getattr(pipe, "draft_transformer", None),
                                              getattr(pipe, "codebook_neighbours", None)))
        self.pipe = pipe
        self.seed = int(seed)
        self.method = method
        self.method_options = dict(method_options or {})
        self.sampling = sampling
        self.device = pipe.transformer.device
        if pipe.transformer.is_class_conditional:
            if prompts:
                raise ValueError("prompts: this model is class-conditional; pass labels")
            ids = pipe.class_ids(list(labels)) if labels is not None else list(range(pipe.transformer.config.num_classes))
            self.labels: list[int] | None = ids
            self.prompts: list[str] | None = None
        else:
            if labels is not None:
                raise ValueError("labels: this model is text-conditional; pass prompts")
            if not prompts:
                raise ValueError("prompts: a text-conditional model needs at least one prompt")
            self.labels, self.prompts = None, list(prompts)
        pipe.set_progress_bar_config(disable=True)
        self.last_stats: Any = None

    def condition(self, index: int) -> dict[str, Any]:
        """The condition of image ``index``: ``{"label": id}`` or ``{"prompt": text}``."""
        if self.labels is not None:
            return {"label": self.labels[index % len(self.labels)]}
        assert self.prompts is not None
        return {"prompt": self.prompts[index % len(self.prompts)]}

    def __call__(self, indices: Sequence[int]) -> np.ndarray:
        indices = list(indices)
        if not indices:
            raise ValueError("indices: empty")
        gens = [image_generator(self.seed, i, self.device) for i in indices]
        conds = [self.condition(i) for i in indices]
        call: dict[str, Any] = ({"class_labels": [c["label"] for c in conds]} if self.labels is not None
                                else {"prompt": [c["prompt"] for c in conds]})
        out = self.pipe(**call, generator=gens, output_type="latent", method=self.method,
                        **self.method_options, **self.sampling)
        self.last_stats = out.stats
        # One image at a time through the VQ decoder: bytes independent of the batch (module docstring).
        images = [np.asarray(self.pipe.decode_tokens(out.tokens[k:k + 1], "pil")[0]) for k in range(len(indices))]
        return np.stack(images)


# ----------------------------------------------------------------------------- distributed helpers
def init_distributed(device: str | torch.device = "cpu") -> tuple[int, int]:
    """``(rank, world_size)``; joins the process group when launched by ``torchrun`` / ``accelerate launch``.

    Backend: ``gloo`` on the CPU, ``nccl`` on CUDA. A plain ``python`` launch is rank 0 of 1.
    """
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _barrier() -> None:
    if _distributed():
        import torch.distributed as dist

        dist.barrier()


def _share_from_rank0(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (identity without a process group)."""
    if not _distributed():
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# ----------------------------------------------------------------------------- the job
@dataclass
class SamplingJob:
    """What a job draws; two runs with equal fields (``num_samples`` aside) write identical images."""

    model: str
    seed: int
    num_samples: int
    method: str = "ar"
    method_options: dict[str, Any] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=dict)
    labels: list[int] | None = None
    prompts: list[str] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise ValueError(f"num_samples must be an integer >= 1, got {self.num_samples!r}")
        seed_for(self.seed, 0)

    def identity(self) -> dict[str, Any]:
        """Every field that determines image ``i`` (all but ``num_samples``)."""
        d = asdict(self)
        d.pop("num_samples")
        return d


@dataclass
class JobResult:
    written: int  # images this rank drew in this run
    skipped: int  # images of this rank's shard already present
    removed_temporaries: int
    manifest: Path | None  # rank 0 only


def _prepare(job: SamplingJob, output: Path, resume: bool) -> tuple[str | None, int]:
    """Rank 0: check the folder against the job, clear temporaries, write the opening manifest."""
    manifest_path = output / MANIFEST
    removed = 0
    if output.exists() and not output.is_dir():
        return f"output: {str(output)!r} exists and is not a folder", 0
    if manifest_path.is_file():
        import json

        try:
            previous = json.loads(manifest_path.read_text())
            old = SamplingJob(**previous["job"])
        except (ValueError, KeyError, TypeError) as err:
            return f"output: {str(manifest_path)!r} is not an arvis sampling manifest ({err})", 0
        if not resume:
            return (f"output: {str(output)!r} already holds a sampling job ({old.num_samples} images); pass "
                    f"--resume to continue it, or choose an empty folder"), 0
        if old.identity() != job.identity():
            diff = sorted(k for k, v in job.identity().items() if old.identity().get(k) != v)
            return (f"output: the job in {str(output)!r} differs from this one in {diff}; resuming would mix "
                    f"images of two jobs. Use the same settings or another folder"), 0
    elif output.is_dir() and any(output.glob("*.png")):
        return (f"output: {str(output)!r} holds PNGs but no {MANIFEST}; refusing to mix them with a new job. "
                f"Choose an empty folder"), 0
    beyond = [p.name for p in output.glob("*.png") if p.stem.isdigit() and int(p.stem) >= job.num_samples] \
        if output.is_dir() else []
    if beyond:
        return (f"num_samples: the folder already holds images with index >= {job.num_samples} "
                f"(e.g. {sorted(beyond)[0]}); a job can be extended, not shrunk"), 0
    output.mkdir(parents=True, exist_ok=True)
    removed = len(remove_stale_temporaries(output))
    write_json_atomic(manifest_path, {"job": asdict(job), "complete": False})
    return None, removed


def run_sampling_job(sampler: Callable[[Sequence[int]], np.ndarray], job: SamplingJob, output: str | os.PathLike,
                     batch_size: int = 8, resume: bool = False, progress: bool = True) -> JobResult:
    """Draw the job's images into ``output`` (this process's shard when a process group is initialised).

    Args:
        sampler: ``indices -> uint8 [B, H, W, 3]``, each image a pure function of ``(job.seed, index)``
            (e.g. :class:`PipelineSampler`).
        job: the job description (recorded in the manifest and checked on resume).
        output: the image folder.
        batch_size: indices per sampler call (does not change any image).
        resume: continue a job already in ``output``.
        progress: a tqdm bar per rank.

    Raises:
        ValueError: the folder holds another job, foreign PNGs, or (without ``resume``) this job.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    output = Path(output)
    rank, world = (0, 1)
    if _distributed():
        import torch.distributed as dist

        rank, world = dist.get_rank(), dist.get_world_size()
    error, removed = _prepare(job, output, resume) if rank == 0 else (None, 0)
    error = _share_from_rank0(error)
    if error:
        raise ValueError(error)
    _barrier()

    mine = shard(range(job.num_samples), rank, world)
    pending = [i for i in mine if not is_valid_image(image_path(output, i))]
    bar = tqdm(total=len(pending), desc=f"sampling rank {rank}/{world}", unit="img", disable=not progress,
               position=rank)
    for start in range(0, len(pending), batch_size):
        indices = pending[start:start + batch_size]
        images = sampler(indices)
        if images.shape[0] != len(indices) or images.dtype != np.uint8:
            raise RuntimeError(f"sampler returned {images.shape} {images.dtype} for {len(indices)} indices")
        for i, image in zip(indices, images, strict=True):
            write_bytes_atomic(image_path(output, i), png_bytes(image))
        bar.update(len(indices))
    bar.close()
    _barrier()

    manifest = None
    if rank == 0:
        manifest = write_manifest(job, output, sampler)
    _barrier()
    return JobResult(written=len(pending), skipped=len(mine) - len(pending), removed_temporaries=removed,
                     manifest=manifest)


def write_manifest(job: SamplingJob, output: Path, sampler: Any = None) -> Path:
    """Check that all ``num_samples`` images are present and valid; write the closing manifest."""
    records = []
    missing = []
    for i in tqdm(range(job.num_samples), desc="manifest", unit="img", disable=job.num_samples < 2000):
        path = image_path(output, i)
        if not is_valid_image(path):
            missing.append(i)
            continue
        record: dict[str, Any] = {"index": i, "file": path.name, "sha256": sha256_file(path),
                                  "seed": seed_for(job.seed, i)}
        if hasattr(sampler, "condition"):
            record.update(sampler.condition(i))
        records.append(record)
    if missing:
        raise RuntimeError(f"{len(missing)} images missing after sampling (e.g. index {missing[0]})")
    return write_json_atomic(output / MANIFEST, {"job": asdict(job), "complete": True, "count": len(records),
                                                 "images": records})
