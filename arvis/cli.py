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
                   help="folder for the PNGs, stats.json and (several methods) side_by_side.png; must be new or "
                        "empty (default: outputs/<date-time>)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a non-empty --output, replacing an earlier run's PNGs and stats.json")
    a.add_sampling(p)
    a.add_runtime(p)
    a.add_progress(p)


def default_output_folder() -> Path:
    """``outputs/<date-time>``, with a suffix when that exists: every run gets its own folder."""
    base = Path("outputs") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path, k = base, 2
    while path.exists():
        path, k = base.with_name(f"{base.name}-{k}"), k + 1
    return path


@command("generate", "generate images with one or several decoding methods (side by side) and print the figures",
         _generate_arguments)
def run_generate(args: argparse.Namespace) -> int:
    from arvis.demo.compare import ImageSet, compare_methods, remove_previous_outputs, write_comparison
    from arvis.eval.provenance import provenance
    from arvis.hub import load_pipeline

    # Everything the command line alone decides is checked before the model loads.
    specs = a.parse_methods(args.method)
    a.check_images(args, a.MAX_GENERATE_IMAGES)
    a.check_count("--rounds", args.rounds, 1, 20)
    labels = a.parse_class_ids(args.class_ids)
    prompts = a.read_prompts(args)
    if labels is not None and prompts is not None:
        raise ValueError("--class-ids / --prompt: give class ids (class-conditional) or prompts (text-conditional)")
    output = Path(args.output) if args.output is not None else default_output_folder()
    a.check_output_folder("--output", output, overwrite=args.overwrite,
                          expected_bytes=_png_bytes_estimate(args.num_images or 1, len(specs)))
    dtype = a.setup_runtime(args)
    pipe, _, model = load_pipeline(args.model, dtype, args.device)
    if getattr(pipe.transformer, "is_class_conditional", False):  # Emu3's transformer is a transformers model
        if prompts is not None:
            raise ValueError("--prompt: this model is class-conditional; use --class-ids")
        conditions = pipe.class_ids(labels) if labels is not None else list(range(pipe.transformer.config.num_classes))
    else:
        if prompts is None:
            raise ValueError("--prompt: this model is text-conditional; give --prompt TEXT (repeatable) or --prompts FILE")
        if labels is not None:
            raise ValueError("--class-ids: this model is text-conditional; use --prompt")
        conditions = prompts
    images = ImageSet(tuple(conditions), args.num_images or len(conditions), args.seed, args.batch_size)
    a.check_specs_fit_model(specs, pipe)
    sampling = {"guidance_scale": args.guidance_scale, "top_k": args.top_k, "top_p": args.top_p,
                "temperature": args.temperature}
    config = pipe.sampling_config(**sampling)  # bad settings: refused before any decoding
    a.check_batch_memory(pipe, min(images.batch_size, images.num_images), config.uses_cfg)
    for spec in specs:  # resources only the pipeline has (draft model, codebook neighbourhoods)
        from arvis.methods import build_method, with_resources

        build_method(spec.name, **with_resources(spec.name, spec.options_dict, getattr(pipe, "draft_transformer", None),
                                                 getattr(pipe, "codebook_neighbours", None),
                                                 getattr(pipe, "lowres_transformer", None),
                                                 getattr(pipe, "upsampler", None)))
    comparison = compare_methods(pipe, specs, images, sampling, rounds=args.rounds, warmup=args.warmup,
                                 progress=not args.no_progress)
    if args.overwrite:
        remove_previous_outputs(output)
    context = {**model.record(), **{k: v for k, v in provenance(args.device, dtype).items() if k != "machine"}}
    write_comparison(comparison, output, context, class_names=getattr(pipe, "class_names", None))
    print(f"model: {model}")
    if len(comparison.results) == 1:
        r = comparison.results[0]
        print(f"method={r.spec.label} images={images.num_images} target_forwards/image={r.mean('target_forwards'):.1f} "
              f"step_compression={r.mean('step_compression'):.2f}x latency_s={r.latency_s:.3f}")
    else:
        print(comparison.format_text())
    print(f"wrote {images.num_images * len(comparison.results)} images and stats.json to {output}/"
          + (" (side_by_side.png: the methods next to each other)" if len(comparison.results) > 1 else ""))
    return 0


def _png_bytes_estimate(num_images: int, methods: int) -> int:
    """An upper bound on the PNG bytes of a run, before the model is known (512 px RGB, uncompressed)."""
    return num_images * methods * (512 * 512 * 3 + 4096)


# ----------------------------------------------------------------------------- methods
@command("methods", "list the decoding methods and their options", lambda p: None)
def run_methods(args: argparse.Namespace) -> int:
    from arvis.methods import describe_methods

    print(describe_methods())  # read from each method's declared options
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
                                     "The flags mean the same in every subcommand (docs/cli.md).")
    parser.add_argument("--version", action="version", version=f"arvis {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, add_arguments, _) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
