"""The command-line vocabulary, defined once: every ``arvis`` subcommand and ``eval/`` script takes its
arguments from these helpers, so a flag means the same thing everywhere (docs/cli.md).

- ``--model NAME``: a shipped alias (``c2i``, ``t2i``…), a shipped folder name, a ``save_pretrained``
  folder, or ``tiny-random`` (an untrained test model);
- ``--num-images N``: how many images in all; image ``i`` gets condition ``i mod len(conditions)`` and the
  generator ``seed_for(seed, i)`` (:func:`arvis.utils.random.seed_for`);
- ``--batch-size B``: images per pipeline call (never changes an image); feature extractors use
  ``--feature-batch-size``;
- ``--method SPEC``: ``name`` or ``name:key=value,key=value`` (values parsed as JSON); several specs are
  joined by ``;`` or given as repeated flags where a command compares methods;
- ``--guidance-scale``, ``--top-k``, ``--top-p``, ``--temperature``: default to the model's own
  ``sampling_defaults.json``;
- ``--threads`` (default: every core this process may use), ``--dtype``, ``--device``;
- ``--no-progress``.

Every check here runs before a model is loaded or a byte is written; errors are ``ValueError`` naming the
flag, the value and the allowed range (the CLI prints them and exits with status 2).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

# Documented limits (docs/cli.md). Images: the standard FID protocol uses 50,000; twice that is the cap for
# the commands that stream images to disk or features (fid, sample, bench). `arvis generate` keeps a run's
# images in memory to show them side by side: 1,000 (eval/sample.py draws more, resumably).
MAX_IMAGES = 100_000
MAX_GENERATE_IMAGES = 1_000
MAX_BATCH_SIZE = 1024
DTYPES = ("fp32", "bf16", "fp16")

# Subcommands register here: name → (help, add_arguments, run). Heavy imports happen inside `run`.
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def command(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None]):
    """Decorator registering ``run`` as the ``arvis NAME`` subcommand (listed by ``arvis --help``)."""
    def register(run: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = (help, add_arguments, run)
        return run

    return register


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask), at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


# ----------------------------------------------------------------------------- argument groups
def add_model(p: argparse.ArgumentParser, *, repeatable: bool = False, help_extra: str = "") -> None:
    from arvis.hub import DEFAULT_MODEL  # the model load_pipeline(None) loads (a light import)

    p.add_argument("--model", default=None, action="append" if repeatable else "store", metavar="NAME",
                   help="shipped alias (c2i, t2i), shipped folder name, save_pretrained folder, or tiny-random "
                        f"(default: {DEFAULT_MODEL}){help_extra}")


def add_images(p: argparse.ArgumentParser, *, default: int | None, batch_size: int = 8,
               what: str = "images in all", max_images: int = MAX_IMAGES, default_text: str | None = None) -> None:
    if default_text is None:  # what a command does when --num-images is absent, if not the default itself
        default_text = "one per condition" if default is None else str(default)
    p.add_argument("--num-images", type=int, default=default, metavar="N",
                   help=f"{what}; image i gets condition i mod (number of conditions) (default {default_text}; "
                        f"at most {max_images})")
    p.add_argument("--batch-size", type=int, default=batch_size, metavar="B",
                   help=f"images per pipeline call; never changes an image (default {batch_size})")
    p.add_argument("--seed", type=int, default=0, help="image i uses the generator seed_for(seed, i) (default 0)")


def add_conditions(p: argparse.ArgumentParser) -> None:
    p.add_argument("--class-ids", default=None, metavar="IDS",
                   help="comma-separated class ids or names, cycled over images (class-conditional; "
                        "default: arvis generate, a few example classes; eval/sample.py, every class in order)")
    p.add_argument("--prompt", action="append", default=None,
                   help="prompt, repeatable, cycled over images (text-conditional)")
    p.add_argument("--prompts", default=None, metavar="FILE",
                   help="text file, one prompt per line, cycled over images (text-conditional)")


def add_method(p: argparse.ArgumentParser, *, several: bool) -> None:
    if several:
        p.add_argument("--method", action="append", default=None, metavar="SPEC",
                       help="decoding method spec, e.g. 'mc-sjd:window=16,coupling=gumbel'; repeatable, or several "
                            "joined by ';' (see `arvis methods`; default ar)")
    else:
        p.add_argument("--method", default="ar", metavar="SPEC",
                       help="decoding method spec, e.g. 'sjd:window=16' (see `arvis methods`; default ar)")


def add_sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument("--guidance-scale", type=float, default=None, help="classifier-free guidance (>= 0; 1 = off; "
                                                                      "default: the model's)")
    p.add_argument("--top-k", type=int, default=None, help="keep the k likeliest tokens (0 = off; default: the model's)")
    p.add_argument("--top-p", type=float, default=None, help="nucleus mass in (0, 1] (1 = off; default: the model's)")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (>= 0; 0 = greedy; "
                                                                   "default: the model's)")


def add_runtime(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=None,
                   help=f"torch CPU threads, 1..{available_cores()} (default: all {available_cores()} cores; "
                        "recorded in every record)")
    p.add_argument("--dtype", choices=DTYPES, default="fp32", help="model dtype (default fp32)")
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:N (default cpu)")


def add_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


# Libraries whose own progress bars --no-progress turns off: (module, is-on, off, on).
_LIBRARY_BARS = (("diffusers.utils.logging", "is_progress_bar_enabled", "disable_progress_bar", "enable_progress_bar"),
                 ("transformers.utils.logging", "is_progress_bar_enabled", "disable_progress_bar",
                  "enable_progress_bar"),
                 ("huggingface_hub.utils", None, "disable_progress_bars", "enable_progress_bars"))


@contextlib.contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """``--no-progress`` for the libraries arvis loads models with: diffusers', transformers' and
    huggingface_hub's own bars ("Loading pipeline components…") are off inside the block, as they were after."""
    if enabled:
        yield
        return
    import importlib

    restore = []
    for module, is_on, off, on in _LIBRARY_BARS:
        try:
            lib = importlib.import_module(module)
        except ImportError:
            continue
        was_on = getattr(lib, is_on)() if is_on else not lib.are_progress_bars_disabled()
        getattr(lib, off)()
        if was_on:
            restore.append(getattr(lib, on))
    try:
        yield
    finally:
        for turn_on in restore:
            turn_on()


# ----------------------------------------------------------------------------- checks (before any work)
def check_count(flag: str, value: Any, low: int = 1, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``; ``ValueError`` naming ``flag`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{flag} must be an integer in {span}, got {value!r}")
    return value


def setup_runtime(args: argparse.Namespace):
    """Check ``--threads`` and ``--device``, set torch's thread count; returns the torch dtype."""
    import torch

    cores = available_cores()
    threads = cores if args.threads is None else check_count("--threads", args.threads, 1, cores)
    args.device = check_device(args.device)
    torch.set_num_threads(threads)
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]


def check_device(device: str) -> str:
    """``device`` if torch knows it and this machine has it; ``ValueError`` otherwise."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"--device: {device!r} is not a torch device (cpu, cuda, cuda:N…)") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device: {device!r} asked for, but this machine has no usable CUDA GPU; use cpu")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ValueError(f"--device: {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif parsed.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ValueError(f"--device: {device!r} asked for, but MPS is not available here; use cpu")
    elif parsed.type != "cpu":
        raise ValueError(f"--device: {device!r} is not supported (cpu, cuda, cuda:N, mps)")
    return device


def check_images(args: argparse.Namespace, max_images: int = MAX_IMAGES) -> None:
    """``--num-images`` (when set), ``--batch-size`` and ``--seed`` within their ranges."""
    if getattr(args, "num_images", None) is not None:
        check_count("--num-images", args.num_images, 1, max_images)
    if hasattr(args, "batch_size"):
        check_count("--batch-size", args.batch_size, 1, MAX_BATCH_SIZE)
    if hasattr(args, "seed"):
        check_count("--seed", args.seed, 0, 2**63 - 1)


# The sampling flags (add_sampling) and the SamplingConfig fields they set.
SAMPLING_FLAGS = {"guidance_scale": "--guidance-scale", "top_k": "--top-k", "top_p": "--top-p",
                  "temperature": "--temperature"}


def check_sampling_flags(args: argparse.Namespace) -> None:
    """Each sampling flag given (``--guidance-scale``, ``--top-k``, ``--top-p``, ``--temperature``) within the range
    :class:`~arvis.engine.sampling.SamplingConfig` allows, before a model is loaded (whether the model takes the
    setting at all, e.g. ``--top-k`` for MAR's continuous tokens, is its pipeline's to say once loaded)."""
    given = {name: getattr(args, name) for name in SAMPLING_FLAGS if getattr(args, name, None) is not None}
    if not given:  # nothing to check: torch stays unloaded for the fast refusals
        return
    from arvis.engine.sampling import SamplingConfig

    for name, value in given.items():
        try:
            SamplingConfig(**{name: value})
        except ValueError as err:
            raise ValueError(f"{SAMPLING_FLAGS[name]}: {err}") from None


def parse_class_ids(text: str | None) -> list[int | str] | None:
    """``--class-ids``: ``None`` when not given; ids and names, in order. An empty value is an error."""
    if text is None:
        return None
    items = [x.strip() for x in text.split(",")]
    if not text.strip() or any(not x for x in items):
        raise ValueError(f"--class-ids: expected comma-separated class ids or names, got {text!r}")
    return [int(x) if x.lstrip("-").isdigit() else x for x in items]


def read_prompts(args: argparse.Namespace) -> list[str] | None:
    """Prompts from ``--prompt`` (repeatable) or ``--prompts FILE`` (one per line); ``None`` when neither."""
    if args.prompt and getattr(args, "prompts", None):
        raise ValueError("--prompt / --prompts: give prompts one way, not both")
    if getattr(args, "prompts", None):
        file = Path(args.prompts)
        if not file.is_file():
            raise ValueError(f"--prompts: no such file {args.prompts!r}")
        try:
            text = file.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"--prompts: {args.prompts!r} could not be read as text ({err})") from None
        prompts = [line.strip() for line in text.splitlines() if line.strip()]
        if not prompts:
            raise ValueError(f"--prompts: {args.prompts!r} holds no prompt")
        return prompts
    if args.prompt is not None:
        if any(not p.strip() for p in args.prompt):
            raise ValueError("--prompt: empty prompt")
        return [p.strip() for p in args.prompt]
    return None


def parse_methods(values: str | Sequence[str] | None, *, single: bool = False):
    """``--method`` values → validated :class:`~arvis.eval.bench.MethodSpec` list (``ar`` when none).

    Unknown methods and options, and option values of the wrong type, are ``ValueError`` naming the spec.
    """
    from arvis.methods.spec import parse_method_specs

    texts = [values] if isinstance(values, str) else list(values or ["ar"])
    try:
        specs = parse_method_specs(texts)
    except (TypeError, ValueError) as err:  # e.g. jacobi_interval=5 where a pair is expected
        raise ValueError(f"--method {';'.join(texts)!r}: {err}") from None
    if single and len(specs) != 1:
        raise ValueError(f"--method: give exactly one method spec here, got {len(specs)}")
    return specs


def check_specs(specs: Sequence[Any], capabilities: Any) -> None:
    """Every ``--method`` spec applies to the model (:meth:`arvis.families.Capabilities.check`: its decoder kind,
    what the method needs, sequence-index options inside the model's sequence) — from its metadata, before it
    loads."""
    for spec in specs:
        try:
            capabilities.check(spec.name, spec.options_dict)
        except ValueError as err:
            raise ValueError(f"--method {spec.label}: {err}") from None


def model_conditions(capabilities: Any, labels: list[int | str] | None, prompts: list[str] | None) -> list[int | str]:
    """The conditions a run cycles over: ``--class-ids`` (checked against the model's classes, with "did you mean")
    or ``--prompt``s, as the model's conditioning asks; every class in turn when a class-conditional model gets
    neither."""
    if capabilities.conditioning == "class":
        if prompts is not None:
            raise ValueError("--prompt: this model is class-conditional; use --class-ids")
        if labels is None:
            return list(range(capabilities.num_classes))
        out = []
        for label in labels:
            try:
                out.append(capabilities.class_id(label))
            except ValueError as err:
                raise ValueError(f"--class-ids: {err}") from None
        return out
    if labels is not None:
        raise ValueError("--class-ids: this model is text-conditional; use --prompt")
    if prompts is None:
        raise ValueError("--prompt: this model is text-conditional; give --prompt TEXT (repeatable) or --prompts FILE")
    return list(prompts)


def model_capabilities(model: str | None) -> Any:
    """``--model``'s capabilities from its folder's metadata (nothing loads); ``ValueError`` naming the flag."""
    from arvis.hub import model_capabilities as read

    try:
        return read(model)
    except ValueError as err:
        raise ValueError(f"--model: {str(err).removeprefix('model: ')}") from None


def check_output_folder(flag: str, value: str | os.PathLike, *, overwrite: bool = False,
                        expected_bytes: int = 0) -> Path:
    """An output folder that can be written: not a file, empty unless ``overwrite``, with room on its disk.

    Args:
        flag: the flag's name for messages.
        value: the folder (created later, when work starts).
        overwrite: a non-empty folder is accepted (its earlier outputs get replaced).
        expected_bytes: an upper estimate of what will be written; refused when the disk has less free.
    """
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag}: {os.fspath(value)!r} is a file, not a folder")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise ValueError(f"{flag}: {os.fspath(value)!r} is not empty; choose a new folder or pass --overwrite")
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise ValueError(f"{flag}: {os.fspath(existing)!r} is a file; cannot create a folder under it")
    check_writable(flag, existing)
    free = shutil.disk_usage(existing).free
    if expected_bytes > free:
        raise ValueError(f"{flag}: the images need up to {expected_bytes / 2**30:.1f} GiB but "
                         f"{os.fspath(existing)!r} has {free / 2**30:.1f} GiB free; lower --num-images")
    return path


def check_output_file(flag: str, value: str | os.PathLike | None) -> None:
    """An output file path that can be written (not a folder, its parent creatable)."""
    if value is None:
        return
    path = Path(value)
    if path.is_dir():
        raise ValueError(f"{flag}: {os.fspath(value)!r} is a folder; give a file path")
    existing = next((p for p in path.parents if p.exists()), Path("."))
    if not existing.is_dir():
        raise ValueError(f"{flag}: {os.fspath(existing)!r} is a file; cannot create {os.fspath(value)!r} under it")
    check_writable(flag, existing)


def check_writable(flag: str, folder: Path) -> None:
    """Refuse a ``folder`` in which no file can be created (permissions, a read-only or virtual file system such
    as ``/proc``): a hidden probe file is created there and removed at once, the way outputs are written."""
    from arvis.utils.files import create_temporary

    try:
        create_temporary(folder / ".arvis-write-check").unlink()
    except OSError as err:
        raise ValueError(f"{flag}: cannot write under {os.fspath(folder)!r} ({err.strerror or err})") from None


def available_memory_bytes() -> int | None:
    """Memory available to new allocations (Linux ``MemAvailable``), or ``None`` when unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def check_batch_memory(pipe: Any, batch_size: int, uses_cfg: bool) -> None:
    """Refuse a ``--batch-size`` whose decode state alone would not fit in the memory available
    (:meth:`arvis.pipelines.interface.ArvisPipeline.decode_memory_bytes`; models that do not state it are not
    checked)."""
    need = pipe.decode_memory_bytes(batch_size, uses_cfg)
    free = available_memory_bytes()
    if need is not None and free is not None and need > free:
        raise ValueError(f"--batch-size {batch_size}: the decode cache needs about {need / 2**30:.1f} GiB, more than "
                         f"the {free / 2**30:.1f} GiB of memory available; lower --batch-size")
