"""Large sampling jobs: every image a pure function of ``(seed, index)``, sharded over ranks, crash-safe.

The rules that make a job reproducible and resumable (docs/measurement.md, docs/reliability.md):

- Image ``i`` uses its own generator ``torch.Generator().manual_seed(seed_for(seed, i))`` and its own
  condition (class ``labels[i % len(labels)]`` or prompt ``prompts[i % len(prompts)]``), so it does not
  depend on the world size, the rank that draws it, the batch it is drawn in, or on a resume. Token
  grids are decoded to pixels one image at a time: the VQ decoder's batched convolutions differ in
  the last float bits with the batch size, which can flip a rounded pixel and so the PNG bytes.
- Rank ``r`` of ``W`` draws the indices ``i`` with ``i % W == r`` (no padding, no duplicates; unlike
  ``accelerate``'s ``split_between_processes``, which pads by repeating samples). The process group
  is accelerate's (:class:`accelerate.PartialState`: ``torchrun`` / ``accelerate launch``, gloo on
  the CPU, NCCL on GPUs); a plain ``python`` launch is rank 0 of 1.
- Each image is written as ``{index:06d}.png`` through a hidden temporary file and an atomic rename,
  so a reader (clean-fid globs ``*.png``) only ever sees finished images, with the permissions the
  umask gives. Right after, its sha256 and size are appended to the rank's hidden journal
  (``.journal-{rank}.jsonl``). ``manifest.json`` (written atomically) records the job at the start
  and every image's sha256, seed and condition at the end (the journals are then folded into it).
- ``resume=True`` keeps exactly the PNGs whose bytes hash to what the manifest or a journal recorded
  for their index, removes temporaries a killed writer left, and draws everything else again: a
  missing, truncated or foreign file (even a valid PNG of the right size) is replaced, never
  certified. A finished job resumed with a larger ``num_samples`` extends it.
- One job at a time per folder: rank 0 holds an exclusive OS lock (``flock`` on ``.arvis-job.lock``)
  for the job's lifetime; a second job on the same folder is refused (:class:`~arvis.errors.JobError`)
  instead of deleting the first one's files. The kernel drops the lock when a process dies, so a
  killed job can always be resumed.
- A write the file system refuses (disk full, quota, read-only, file-size limit) stops the job with a
  :class:`~arvis.errors.StorageError` that says what happened; the images already written are kept
  and ``--resume`` continues.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm

from arvis.errors import ArvisError, JobError
from arvis.errors import storage_errors as write_errors
from arvis.eval.files import (
    png_bytes,
    remove_stale_temporaries,
    sha256_file,
    write_bytes_atomic,
    write_json_atomic,
)
from arvis.utils.random import image_generator, seed_for  # noqa: F401  (the per-image seed rule, re-exported)

MANIFEST = "manifest.json"
LOCK_FILE = ".arvis-job.lock"
JOURNAL_GLOB = ".journal-*.jsonl"
RESUME_ADVICE = ("The images already written are kept: fix the cause, then run the same command with --resume "
                 "(resume=True) to continue")


def shard(indices: Sequence[int], rank: int, world_size: int) -> list[int]:
    """The indices rank ``rank`` of ``world_size`` draws: ``i % world_size == rank``."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size), got rank={rank}, world_size={world_size}")
    return [i for i in indices if i % world_size == rank]


def image_path(folder: str | os.PathLike, index: int) -> Path:
    return Path(folder) / f"{index:06d}.png"


# ----------------------------------------------------------------------------- drawing images
class PipelineSampler:
    """Draw images from an arvis pipeline (:class:`~arvis.pipelines.interface.ArvisPipeline`) by index.

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
        seed_for(seed, 0)  # validates the seed
        pipe.check_method(method, method_options or {})  # the method runs on this model, its options are valid
        self.pipe = pipe
        self.seed = int(seed)
        self.method = method
        self.method_options = dict(method_options or {})
        self.sampling = sampling
        self.device = pipe.transformer.device
        caps = pipe.capabilities
        if caps.conditioning == "class":
            if prompts:
                raise ValueError("prompts: this model is class-conditional; pass labels")
            ids = pipe.class_ids(list(labels)) if labels is not None else list(range(caps.num_classes))
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
def distributed_state(device: str | torch.device | None = None) -> Any:
    """accelerate's process state: joins the process group when launched by ``torchrun`` / ``accelerate launch``.

    Args:
        device: the sampling device; on the CPU the ranks join a gloo group (accelerate only does so
            when told the job runs on the CPU), on CUDA an NCCL group with ``cuda:LOCAL_RANK`` per rank.
            ``None`` reuses the state already initialised in this process (or initialises the default).

    Returns:
        :class:`accelerate.PartialState` (``process_index``, ``num_processes``, ``wait_for_everyone``).
    """
    from accelerate import PartialState

    if device is None:
        return PartialState()
    return PartialState(cpu=torch.device(device).type == "cpu")


def _share_from_rank0(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (identity without a process group)."""
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0]


def storage_errors(action: str) -> contextlib.AbstractContextManager[None]:
    """Turn an ``OSError`` met while ``action`` into a :class:`StorageError` saying how to continue (``--resume``)."""
    return write_errors(action, RESUME_ADVICE)


def open_own_file(path: Path, flags: int) -> int:
    """``os.open`` a job's own file (journal, lock) for writing, never through a link: ``O_NOFOLLOW`` refuses a
    symbolic link planted at ``path``, and a file with other names (a hard link) is refused too, so no write of
    the job can reach a file outside it.

    Raises:
        JobError: ``path`` is a symbolic link or has other names.
    """
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise JobError(f"output: {str(path)!r} is a symbolic link; a sampling job never writes through links. "
                           f"Remove it (or choose another folder)") from None
        raise
    links = os.fstat(fd).st_nlink
    if links > 1:
        os.close(fd)
        raise JobError(f"output: {str(path)!r} has {links} names (hard links); a sampling job writes only its own "
                       f"files. Remove it (or choose another folder)")
    return fd


class JobLock:
    """An exclusive OS lock (``flock``) on ``{folder}/.arvis-job.lock``, held while a job runs.

    The lock file holds the owner's pid (for the refusal message) and is removed on release. A
    finishing job unlinks the file while a starting one may already have opened it; the starter then
    holds a lock on a file that is no longer in the folder, so :meth:`acquire` checks that the file it
    locked is still the one at the path, and retries otherwise.
    """

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd

    @classmethod
    def acquire(cls, folder: Path) -> JobLock:
        """Lock ``folder`` (created if needed) or raise :class:`JobError` naming the holder's pid."""
        path = folder / LOCK_FILE
        while True:
            fd = open_own_file(path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise JobError(f"output: {str(folder)!r} is being written by another sampling job (pid {holder}); "
                               f"wait for it to finish, or choose another folder") from None
            try:
                current = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(path, fd)

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self._fd)


class Journal:
    """A rank's append-only record of the images it wrote: one JSON line per image (index, sha256, size).

    Lines are appended right after an image's atomic rename; a line torn by a kill does not parse and
    is skipped (its image is then drawn again), and the next run starts on a fresh line.
    """

    def __init__(self, folder: Path, rank: int):
        self.path = folder / f".journal-{rank}.jsonl"
        fd = open_own_file(self.path, os.O_RDWR | os.O_APPEND)
        size = os.fstat(fd).st_size
        self._file = os.fdopen(fd, "ab")
        if size and os.pread(fd, 1, size - 1) != b"\n":
            self._file.write(b"\n")

    def record(self, index: int, digest: str, height: int, width: int) -> None:
        line = json.dumps({"index": index, "sha256": digest, "height": height, "width": width})
        self._file.write(line.encode() + b"\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def recorded_images(folder: Path) -> dict[int, dict[str, Any]]:
    """Index → record (``sha256``, ``height``, ``width``) from the manifest and every rank's journal."""
    records: dict[int, dict[str, Any]] = {}
    manifest = folder / MANIFEST
    if manifest.is_file():
        with contextlib.suppress(ValueError, TypeError, KeyError):
            for r in json.loads(manifest.read_text()).get("images", []):
                records[int(r["index"])] = r
    for journal in sorted(folder.glob(JOURNAL_GLOB)):
        for line in journal.read_bytes().splitlines():
            try:
                r = json.loads(line)
                records[int(r["index"])] = r
            except (ValueError, TypeError, KeyError):
                continue  # a line torn by a kill
    return records


def _verified(path: Path, record: dict[str, Any] | None) -> bool:
    """Whether ``path`` holds exactly the bytes ``record`` certifies."""
    if record is None or not path.is_file():
        return False
    try:
        return sha256_file(path) == record.get("sha256")
    except OSError:
        return False


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
    # The weights' content hash (arvis.hub.folder_sha256): a model retrained under the same name is another job,
    # so a resume never mixes its images with its predecessor's.
    model_sha256: str | None = None

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
    skipped: int  # images of this rank's shard already present with their recorded bytes
    replaced: int  # files of this rank's shard that were present but not certified, drawn again
    removed_temporaries: int
    manifest: Path | None  # rank 0 only


def _prepare(job: SamplingJob, output: Path, resume: bool) -> int:
    """Rank 0, holding the folder's lock: check the folder against the job, clear temporaries, write the
    opening manifest (keeping the image records of a finished job being extended).

    Returns:
        How many stale temporaries were removed.

    Raises:
        JobError: the folder holds another job, foreign PNGs, this job without ``resume``, or more images.
    """
    manifest_path = output / MANIFEST
    previous: dict[str, Any] = {}
    if manifest_path.is_file():
        try:
            previous = json.loads(manifest_path.read_text())
            old = SamplingJob(**previous["job"])
        except (ValueError, KeyError, TypeError) as err:
            raise JobError(f"output: {str(manifest_path)!r} is not an arvis sampling manifest ({err})") from None
        if not resume:
            raise JobError(f"output: {str(output)!r} already holds a sampling job ({old.num_samples} images); pass "
                           f"--resume to continue it, or choose an empty folder")
        if old.identity() != job.identity():
            diff = sorted(k for k, v in job.identity().items() if old.identity().get(k) != v)
            raise JobError(f"output: the job in {str(output)!r} differs from this one in {diff}; resuming would mix "
                           f"images of two jobs. Use the same settings or another folder")
    elif any(output.glob("*.png")):
        raise JobError(f"output: {str(output)!r} holds PNGs but no {MANIFEST}; refusing to mix them with a new job. "
                       f"Choose an empty folder")
    beyond = [p.name for p in output.glob("*.png") if p.stem.isdigit() and int(p.stem) >= job.num_samples]
    if beyond:
        raise JobError(f"num_samples: the folder already holds images with index >= {job.num_samples} "
                       f"(e.g. {sorted(beyond)[0]}); a job can be extended, not shrunk")
    removed = len(remove_stale_temporaries(output))
    images = previous.get("images", []) if isinstance(previous.get("images"), list) else []
    write_json_atomic(manifest_path, {"job": asdict(job), "complete": False, "images": images})
    return removed


def run_sampling_job(sampler: Callable[[Sequence[int]], np.ndarray], job: SamplingJob, output: str | os.PathLike,
                     batch_size: int = 8, resume: bool = False, progress: bool = True) -> JobResult:
    """Draw the job's images into ``output`` (this process's shard when launched on several ranks).

    Args:
        sampler: ``indices -> uint8 [B, H, W, 3]``, each image a pure function of ``(job.seed, index)``
            (e.g. :class:`PipelineSampler`).
        job: the job description (recorded in the manifest and checked on resume).
        output: the image folder.
        batch_size: indices per sampler call (does not change any image).
        resume: continue a job already in ``output``.
        progress: a tqdm bar per rank.

    Raises:
        JobError: another job is writing to the folder; the folder holds another job, foreign PNGs, or
            (without ``resume``) this job.
        StorageError: the file system refused a write (the images written so far are kept).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    output = Path(output)
    state = distributed_state()
    rank, world = state.process_index, state.num_processes
    lock: JobLock | None = None
    outcome: ArvisError | int = 0
    if rank == 0:
        try:
            if output.exists() and not output.is_dir():
                raise JobError(f"output: {str(output)!r} exists and is not a folder")
            with storage_errors(f"preparing the output folder {str(output)!r}"):
                output.mkdir(parents=True, exist_ok=True)
                lock = JobLock.acquire(output)
                outcome = _prepare(job, output, resume)
        except ArvisError as err:
            outcome = err
    outcome = _share_from_rank0(outcome)  # the refusal (or the count of removed temporaries) on every rank
    try:
        if isinstance(outcome, ArvisError):
            raise outcome
        state.wait_for_everyone()
        result = _draw_shard(sampler, job, output, batch_size, progress, rank, world)
        result.removed_temporaries = outcome
        state.wait_for_everyone()
        if rank == 0:
            with storage_errors(f"writing {MANIFEST} in {str(output)!r}"):
                result.manifest = write_manifest(job, output, sampler)
        state.wait_for_everyone()
        return result
    finally:
        if lock is not None:
            lock.release()


def _draw_shard(sampler: Callable[[Sequence[int]], np.ndarray], job: SamplingJob, output: Path, batch_size: int,
                progress: bool, rank: int, world: int) -> JobResult:
    """Draw this rank's indices that are not already present with their recorded bytes."""
    records = recorded_images(output)
    mine = shard(range(job.num_samples), rank, world)
    pending = [i for i in mine if not _verified(image_path(output, i), records.get(i))]
    replaced = sum(image_path(output, i).exists() for i in pending)
    bar = tqdm(total=len(pending), desc=f"sampling rank {rank}/{world}", unit="img", disable=not progress,
               position=rank)
    with storage_errors(f"opening the journal in {str(output)!r}"):
        journal = Journal(output, rank)
    try:
        for start in range(0, len(pending), batch_size):
            indices = pending[start:start + batch_size]
            images = sampler(indices)
            if images.shape[0] != len(indices) or images.dtype != np.uint8:
                raise RuntimeError(f"sampler returned {images.shape} {images.dtype} for {len(indices)} indices")
            for i, image in zip(indices, images, strict=True):
                data = png_bytes(image)
                path = image_path(output, i)
                with storage_errors(f"writing {path.name} in {str(output)!r}"):
                    write_bytes_atomic(path, data)
                    journal.record(i, hashlib.sha256(data).hexdigest(), int(image.shape[0]), int(image.shape[1]))
            bar.update(len(indices))
    finally:
        bar.close()
        with contextlib.suppress(OSError):
            journal.close()
    return JobResult(written=len(pending), skipped=len(mine) - len(pending), replaced=replaced,
                     removed_temporaries=0, manifest=None)


def write_manifest(job: SamplingJob, output: Path, sampler: Any = None) -> Path:
    """Certify the job: every image present with the bytes, size and mode recorded when it was written;
    write the closing manifest and fold the journals into it.

    Raises:
        JobError: an image is missing or differs from its record (changed while the job ran).
    """
    records = recorded_images(output)
    certified = []
    bad = []
    size = None
    for i in tqdm(range(job.num_samples), desc="manifest", unit="img", disable=job.num_samples < 2000):
        path = image_path(output, i)
        record = records.get(i)
        if not _verified(path, record):
            bad.append(i)
            continue
        assert record is not None
        with Image.open(path) as im:
            shape = (im.height, im.width, im.mode)
        if size is None:
            size = shape
        if shape != size or (record.get("height"), record.get("width")) not in ((None, None), shape[:2]):
            bad.append(i)
            continue
        entry: dict[str, Any] = {"index": i, "file": path.name, "sha256": record["sha256"],
                                 "seed": seed_for(job.seed, i)}
        if isinstance(sampler, PipelineSampler):
            entry.update(sampler.condition(i))
        certified.append(entry)
    if bad:
        raise JobError(f"{len(bad)} images are missing or differ from what this job wrote (e.g. index {bad[0]}); "
                       f"run the same command with --resume to draw them again")
    assert size is not None
    manifest = write_json_atomic(output / MANIFEST, {
        "job": asdict(job), "complete": True, "count": len(certified),
        "image": {"height": size[0], "width": size[1], "mode": size[2]}, "images": certified})
    for journal in output.glob(JOURNAL_GLOB):
        journal.unlink()
    return manifest
