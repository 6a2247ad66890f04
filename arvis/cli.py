"""The ``arvis`` command line: ``arvis generate``, ``arvis bench``, ``arvis demo``… (``arvis --help``).

The flags are defined once, in :mod:`arvis.cli_args`, and mean the same in every subcommand (docs/cli.md).
User errors (``ValueError`` naming the flag and the allowed range) print one line and exit with status 2,
before any model is loaded or any file written.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
from pathlib import Path
from typing import Any

from arvis import __version__
from arvis import cli_args as a
from arvis.cli_args import COMMANDS, command  # noqa: F401  (subcommands register through these)


# ----------------------------------------------------------------------------- generate
def _generate_arguments(p: argparse.ArgumentParser) -> None:
    a.add_model(p)
    a.add_conditions(p)
    a.add_images(p, default=None, what="images per method (eval/sample.py draws more, resumably)",
                 max_images=a.MAX_GENERATE_IMAGES)
    a.add_method(p, several=True)
    p.add_argument("--rounds", type=int, default=1,
                   help="timed rounds per method, interleaved; the median is reported (default 1: a single run)")
    p.add_argument("--warmup", action="store_true", help="one untimed image per method first (fairer timings)")
    p.add_argument("--output", default=None, metavar="FOLDER",
                   help="folder for the PNGs (video models: GIFs or MP4s), stats.json and (several methods) "
                        "side_by_side.png (.gif / .mp4); must be new or empty (default: outputs/<date-time>)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a non-empty --output, replacing an earlier run's images and stats.json")
    video = p.add_argument_group("video models")
    video.add_argument("--image", action="append", default=None, metavar="FILE",
                       help="image-to-video: the first frame (resized to the model's frame side); give one for "
                            "every clip, or one per --class-ids entry, in order (repeatable)")
    video.add_argument("--video-format", choices=CLIP_FORMATS, default=None,
                       help="how clips are written: gif (default) or mp4 (needs imageio-ffmpeg)")
    video.add_argument("--fps", type=float, default=None, help="frames per second of the clips (default 4)")
    a.add_sampling(p)
    a.add_runtime(p)
    a.add_progress(p)


CLIP_FORMATS = ("gif", "mp4")  # arvis.demo.compare.CLIP_FORMATS (not imported here: `arvis --help` stays light)
DEFAULT_FPS = 4.0


def default_output_folder() -> Path:
    """``outputs/<date-time>``, with a suffix when that exists: every run gets its own folder."""
    base = Path("outputs") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path, k = base, 2
    while path.exists():
        path, k = base.with_name(f"{base.name}-{k}"), k + 1
    return path


@command("generate", "generate images (or clips) with one or several decoding methods (side by side) and print the "
                     "figures", _generate_arguments)
def run_generate(args: argparse.Namespace) -> int:
    # Everything the command line and the model folder's metadata decide is checked before the model loads.
    specs = a.parse_methods(args.method)
    a.check_images(args, a.MAX_GENERATE_IMAGES)
    a.check_count("--rounds", args.rounds, 1, 20)
    labels = a.parse_class_ids(args.class_ids)
    prompts = a.read_prompts(args)
    if labels is not None and prompts is not None:
        raise ValueError("--class-ids / --prompt: give class ids (class-conditional) or prompts (text-conditional)")
    a.check_sampling_flags(args)
    first_frames = read_first_frames(args.image)
    fps = DEFAULT_FPS if args.fps is None else _check_fps(args.fps)
    if args.video_format == "mp4":
        from arvis.pipelines.pipeline_video import check_mp4_writer

        try:
            check_mp4_writer()
        except ValueError as err:
            raise ValueError(f"--video-format mp4: {err}") from None
    output = Path(args.output) if args.output is not None else default_output_folder()
    a.check_output_folder("--output", output, overwrite=args.overwrite,
                          expected_bytes=_png_bytes_estimate(args.num_images or 1, len(specs)))
    caps = a.model_capabilities(args.model)
    a.check_specs(specs, caps)
    video = caps.num_frames is not None
    if not video:
        for flag, value in (("--image", args.image), ("--video-format", args.video_format), ("--fps", args.fps)):
            if value is not None:
                raise ValueError(f"{flag}: this model generates images, not clips; this flag is for video models")
    if labels is None and prompts is None and args.num_images is None:  # a bare `arvis generate`: a few examples
        labels, prompts = example_conditions(args.model, caps)
    conditions = a.model_conditions(caps, labels, prompts)
    if first_frames and len(first_frames) not in (1, len(conditions)):
        raise ValueError(f"--image: give one first frame for every clip or one per class ({len(conditions)}), "
                         f"got {len(first_frames)}")

    from arvis.demo.compare import ImageSet, compare_methods, remove_previous_outputs, write_comparison
    from arvis.errors import storage_errors
    from arvis.eval.provenance import provenance
    from arvis.hub import load_pipeline

    images = ImageSet(tuple(conditions), args.num_images or len(conditions), args.seed, args.batch_size,
                      first_frames=tuple(first_frames))
    dtype = a.setup_runtime(args)
    with a.progress_bars(not args.no_progress):
        pipe, _, model = load_pipeline(args.model, dtype, args.device)
    sampling = {"guidance_scale": args.guidance_scale, "top_k": args.top_k, "top_p": args.top_p,
                "temperature": args.temperature}
    config = pipe.sampling_config(**sampling)  # bad settings: refused before any decoding
    a.check_batch_memory(pipe, min(images.batch_size, images.num_images), config.uses_cfg)
    comparison = compare_methods(pipe, specs, images, sampling, rounds=args.rounds, warmup=args.warmup,
                                 progress=not args.no_progress)
    if args.overwrite:
        remove_previous_outputs(output)
    context = {**model.record(), **{k: v for k, v in provenance(args.device, dtype).items() if k != "machine"}}
    clip_format = args.video_format or CLIP_FORMATS[0]
    with storage_errors(f"writing the outputs to {str(output)!r}", "Fix the cause and run the command again "
                        "(with --overwrite: the folder holds part of this run)"):
        write_comparison(comparison, output, context, class_names=pipe.class_names, clip_format=clip_format, fps=fps)
    print(f"model: {model}")
    unit = comparison.unit
    if len(comparison.results) == 1:
        r = comparison.results[0]
        print(f"method={r.spec.label} {unit}s={images.num_images} target_forwards/{unit}={r.mean('target_forwards'):.1f} "
              f"step_compression={r.mean('step_compression'):.2f}x latency_s={r.latency_s:.3f}")
    else:
        print(comparison.format_text())
    what = f"{clip_format.upper()} clips" if video else "images"
    sheet = f"side_by_side.{clip_format if video else 'png'}"
    print(f"wrote {images.num_images * len(comparison.results)} {what} and stats.json to {output}/"
          + (f" ({sheet}: the methods next to each other)" if len(comparison.results) > 1 else ""))
    return 0


def example_conditions(model: str | None, caps: Any) -> tuple[list[int | str] | None, list[str] | None]:
    """What a bare ``arvis generate`` draws: the model's first two example classes (or its first example prompt,
    :mod:`arvis.demo.examples`), else its first two classes — seconds, not one image per class."""
    from arvis.demo.examples import MODEL_EXAMPLES
    from arvis.hub import TINY_RANDOM, resolve_model

    examples = {} if model == TINY_RANDOM else MODEL_EXAMPLES.get(resolve_model(model).name, {})
    if caps.conditioning == "text":
        return None, list(examples.get("prompts", ())[:1]) or None
    classes = list(examples.get("classes", ())[:2]) or list(range(min(2, caps.num_classes)))
    print(f"drawing {', '.join(map(repr, classes))} (--class-ids / --num-images: others, more)")
    return classes, None


def read_first_frames(paths: list[str] | None) -> list[Any]:
    """``--image`` files as ``uint8 [H, W, 3]`` arrays (read before any model loads); ``[]`` when none."""
    import numpy as np
    import PIL.Image

    frames = []
    for path in paths or []:
        if not Path(path).is_file():
            raise ValueError(f"--image: no such file {path!r}")
        try:
            with PIL.Image.open(path) as im:
                frames.append(np.asarray(im.convert("RGB")))
        except (OSError, ValueError, PIL.Image.DecompressionBombError) as err:
            raise ValueError(f"--image: {path!r} could not be read as an image ({err})") from None
    return frames


def _check_fps(fps: float) -> float:
    from arvis.pipelines.pipeline_video import check_fps

    try:
        return check_fps(fps)
    except ValueError as err:
        raise ValueError(f"--{err}") from None


def _png_bytes_estimate(num_images: int, methods: int) -> int:
    """An upper bound on the PNG bytes of a run, before the model is known (512 px RGB, uncompressed)."""
    return num_images * methods * (512 * 512 * 3 + 4096)


# ----------------------------------------------------------------------------- methods
def _methods_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, metavar="NAME",
                   help="list only the methods that run on this model (a shipped alias, a folder, or tiny-random)")


@command("methods", "list the decoding methods and their options (per model family; --model: the ones that run "
                    "on that model)", _methods_arguments)
def run_methods(args: argparse.Namespace) -> int:
    from arvis.methods.catalog import describe

    if args.model is None:
        print(describe())  # every kind, read from each method's declaration
        return 0
    caps = a.model_capabilities(args.model)
    print(f"{args.model}: a {caps.family} model ({caps.kind} decoding, {caps.conditioning}-conditional)")
    print(describe(caps.kind, caps.offers))
    return 0


# ----------------------------------------------------------------------------- the parser
def _load_optional_commands() -> None:
    """Subcommands that live with the layers they drive (bench, demo…) register on import."""
    import importlib

    for module in ("arvis.eval.cli_commands", "arvis.demo.command"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise


def build_parser() -> argparse.ArgumentParser:
    _load_optional_commands()
    parser = argparse.ArgumentParser(prog="arvis", description="Fast, faithful decoding for visual AR generators. "
                                     "The flags mean the same in every subcommand (docs/cli.md).", allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"arvis {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, add_arguments, _) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False))
    return parser


def _subcommand_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of subcommand ``name`` (its usage is what an error about its flags should print)."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # flags the subcommand does not take: its usage, not the top level's
        target = _subcommand_parser(parser, args.command) if args.command else parser
        target.error(f"unrecognized arguments: {' '.join(unknown)}")
    if not args.command:
        parser.print_help()
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # arvis never downloads
    try:
        return COMMANDS[args.command][2](args)
    except ValueError as err:
        print(f"arvis {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
