"""The ``arvis`` command line: ``arvis generate``, ``arvis bench``, ``arvis demo``… (``arvis --help``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Subcommands register here: name → (help, add_arguments, run). Heavy imports happen inside `run`.
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def command(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None]):
    def register(run: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = (help, add_arguments, run)
        return run

    return register


def parse_option(text: str) -> tuple[str, Any]:
    """``key=value`` → (key, value) with value parsed as JSON when possible (``window=16``, ``init="random"``)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"method options look like key=value, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key.replace("-", "_"), json.loads(value)
    except json.JSONDecodeError:
        return key.replace("-", "_"), value


def add_runtime_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice; 1 is often fastest for small models)")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32", help="model dtype")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")


def setup_runtime(args: argparse.Namespace):
    import torch

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]


def add_sampling_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--guidance-scale", type=float, default=None, help="CFG scale (default: the model's)")
    p.add_argument("--top-k", type=int, default=None, help="top-k (0 = off; default: the model's)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--method", default="ar", help="decoding method (see `arvis methods`)")
    p.add_argument("--option", "-o", action="append", type=parse_option, default=[], metavar="KEY=VALUE",
                   help="method option, repeatable (e.g. -o window=16 -o init=random)")


def load_pipeline(model: str | None, dtype, device: str):
    """The pipeline for ``model`` (alias or folder) and its default sampling settings."""
    import torch

    from arvis.hub import DEFAULT_MODEL, TINY_RANDOM, resolve_model, shipped_path, tiny_random_pipeline
    from arvis.pipelines import pipeline_class

    if model == TINY_RANDOM or (model is None and not (shipped_path(DEFAULT_MODEL) / "model_index.json").is_file()):
        print("*** UNTRAINED TINY MODEL (random weights): its images are noise; only the decode statistics "
              "mean anything. ***", file=sys.stderr)
        pipe = tiny_random_pipeline().to(device)
        return (pipe if dtype == torch.float32 else pipe.to(dtype=dtype)), {"guidance_scale": 4.0}, TINY_RANDOM
    path = resolve_model(model)
    pipe = pipeline_class(path).from_pretrained(str(path), dtype=dtype).to(device)
    defaults_file = path / "sampling_defaults.json"
    defaults = json.loads(defaults_file.read_text()) if defaults_file.is_file() else {}
    return pipe, defaults, path


def _generate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="shipped model alias (c2i, t2i) or a pipeline folder (default: c2i)")
    p.add_argument("--class-ids", default=None,
                   help="comma-separated class ids or names (class-conditional; default: the first 4 classes)")
    p.add_argument("--prompt", action="append", default=None, help="prompt (text-conditional), repeatable")
    p.add_argument("--num-images", type=int, default=1, help="images per class id / prompt")
    p.add_argument("--seed", type=int, default=0, help="seed; image i uses seed + i (one generator per image)")
    p.add_argument("--output", default="outputs", help="folder for the PNGs and stats.json")
    add_sampling_arguments(p)
    add_runtime_arguments(p)


@command("generate", "generate images and print the decode statistics", _generate_arguments)
def run_generate(args: argparse.Namespace) -> int:
    import torch

    from arvis.utils.random import make_generators
    from arvis.utils.serialization import atomic_path

    dtype = setup_runtime(args)
    pipe, defaults, path = load_pipeline(args.model, dtype, args.device)
    call: dict[str, Any] = {}
    if pipe.transformer.is_class_conditional:
        if args.prompt:
            raise ValueError("--prompt: this model is class-conditional; use --class-ids")
        labels = args.class_ids.split(",") if args.class_ids else list(range(min(4, pipe.transformer.config.num_classes)))
        call["class_labels"] = [int(x) if str(x).strip().lstrip("-").isdigit() else str(x).strip() for x in labels]
        n_cond = len(labels)
    else:
        if not args.prompt:
            raise ValueError("--prompt: this model is text-conditional; give at least one --prompt")
        call["prompt"] = args.prompt
        n_cond = len(args.prompt)
    total = n_cond * args.num_images
    generators = make_generators([args.seed + i for i in range(total)], device=args.device)
    guidance = args.guidance_scale if args.guidance_scale is not None else defaults.get("guidance_scale", 4.0)
    top_k = args.top_k if args.top_k is not None else defaults.get("top_k", 0)
    out = pipe(**call, num_images_per_prompt=args.num_images, generator=generators, guidance_scale=guidance,
               top_k=top_k, top_p=args.top_p, temperature=args.temperature, method=args.method,
               **dict(args.option))
    folder = Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    for i, image in enumerate(out.images):
        with atomic_path(folder / f"{i:04d}.png") as tmp:
            image.save(tmp, format="PNG")
    record = {"model": str(path), "method": args.method, "options": dict(args.option), "seed": args.seed,
              "guidance_scale": guidance, "top_k": top_k, "top_p": args.top_p, "temperature": args.temperature,
              "dtype": args.dtype, "threads": torch.get_num_threads(), **out.stats.summary(),
              "per_sample": [s.to_dict(with_lists=False) for s in out.stats.samples]}
    with atomic_path(folder / "stats.json") as tmp:
        tmp.write_text(json.dumps(record, indent=2))
    print(f"model: {path}")
    print(f"wrote {len(out.images)} images to {folder}/")
    print(out.stats.format())
    return 0


@command("methods", "list the decoding methods and their options", lambda p: None)
def run_methods(args: argparse.Namespace) -> int:
    from arvis.methods import describe_methods

    print(describe_methods())  # read from each method's declared options
    return 0


def _load_optional_commands() -> None:
    """Subcommands that live with the layers they drive (bench, demo…) register on import."""
    import importlib

    for module in ("arvis.eval.cli_commands", "arvis.demo_command"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise


def build_parser() -> argparse.ArgumentParser:
    _load_optional_commands()
    parser = argparse.ArgumentParser(prog="arvis", description="Fast, faithful decoding for visual AR generators.")
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
