"""``arvis bench``, ``arvis fid`` and ``arvis clip-score``: registered on the ``arvis`` CLI at import.

Examples::

    arvis bench --methods ar --samples 4
    arvis bench --model tiny-random --methods "ar;sjd:window=16;mc-sjd:window=32,init=random" \\
        --samples 8 --json bench.json --markdown bench.md --plots plots/
    arvis fid --folder samples/c2i-ar --floor                   # domain network vs held-out crops
    arvis fid --model c2i --num-samples 1000 --floor --json fid.json   # sample in-process, no files
    arvis fid --folder A --ref B --extractor inception:/path/inception-2015-12-05.pt
    arvis clip-score --folder samples/t2i-ar                    # captions from manifest.json
    arvis clip-score --folder samples/emoji --clip-model clip-emoji   # emoji images and their names
    arvis fid --model emoji --num-samples 1000 --floor          # emoji model: held-out emoji, domain-emoji

Nothing is written before the arguments are validated, and every output is written atomically.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arvis.cli import command, load_pipeline, parse_option, setup_runtime

if TYPE_CHECKING:
    import argparse


def _add_runtime(p: argparse.ArgumentParser, all_cores: bool = False) -> None:
    p.add_argument("--threads", type=int, default=None if all_cores else 1,
                   help="torch CPU threads (default: every core this process may use; recorded in every record)"
                   if all_cores else
                   "torch CPU threads (default 1: small ops stall under contention; recorded in every record)")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32", help="model dtype")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")


def _add_sampling(p: argparse.ArgumentParser, with_method: bool) -> None:
    p.add_argument("--guidance-scale", type=float, default=None, help="CFG scale (default: the model's)")
    p.add_argument("--top-k", type=int, default=None, help="top-k (0 = off; default: the model's)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--temperature", type=float, default=1.0)
    if with_method:
        p.add_argument("--method", default="ar", help="decoding method (see `arvis methods`)")
        p.add_argument("--option", "-o", action="append", type=parse_option, default=[], metavar="KEY=VALUE",
                       help="method option, repeatable (e.g. -o window=16)")


def sampling_settings(args: argparse.Namespace, defaults: dict[str, Any]) -> dict[str, Any]:
    """The sampling settings: flags, else the model's sampling_defaults.json, else arvis's defaults."""
    return {"guidance_scale": args.guidance_scale if args.guidance_scale is not None
            else defaults.get("guidance_scale", 4.0),
            "top_k": args.top_k if args.top_k is not None else defaults.get("top_k", 0),
            "top_p": args.top_p, "temperature": args.temperature}


def _check_output_paths(**paths: str | None) -> None:
    """Refuse output paths that cannot be written, before any work starts."""
    for name, value in paths.items():
        if value is None:
            continue
        p = Path(value)
        if p.exists() and p.is_dir() and name != "plots":
            raise ValueError(f"--{name}: {value!r} is a folder; give a file path")
        if name == "plots" and p.exists() and not p.is_dir():
            raise ValueError(f"--plots: {value!r} exists and is not a folder")


# ----------------------------------------------------------------------------- bench
def _bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="shipped alias (c2i), pipeline folder, or tiny-random (default: c2i)")
    p.add_argument("--methods", action="append", default=None, metavar="SPECS",
                   help="method specs: 'ar;sjd:window=16;mc-sjd:window=32,init=random' or 'ar,sjd:window=16' "
                        "(repeatable; AR is always included as the baseline)")
    p.add_argument("--samples", type=int, default=4, help="samples per round (class i %% num_classes)")
    p.add_argument("--batch-size", type=int, default=1, help="samples per decode call (default 1)")
    p.add_argument("--seed", type=int, default=0, help="sample i uses seed_for(seed, i)")
    p.add_argument("--repeats", type=int, default=5, help="timed interleaved rounds (>= 5; median reported)")
    p.add_argument("--prompt", action="append", default=None,
                   help="prompt for text-conditional models, repeatable (sample i gets prompt i mod count)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (>= 1)")
    p.add_argument("--no-forward-cost", action="store_true", help="skip the forward-cost curve")
    p.add_argument("--json", default=None, help="write the records (a list, one object per method spec)")
    p.add_argument("--markdown", default=None, help="write the Markdown tables")
    p.add_argument("--plots", default=None, help="folder for the PNG plots")
    p.add_argument("--no-progress", action="store_true")
    _add_sampling(p, with_method=False)
    _add_runtime(p, all_cores=True)  # latency is measured on every core by default


@command("bench", "time decoding methods side by side (same seeds, interleaved repeats) with the forward-cost curve",
         _bench_arguments)
def run_bench_command(args: argparse.Namespace) -> int:
    from arvis.engine import SamplingConfig
    from arvis.eval.bench import (
        available_cores,
        check_settings,
        format_markdown,
        format_text,
        parse_method_specs,
        run_bench,
    )
    from arvis.eval.files import write_bytes_atomic, write_json_atomic
    from arvis.eval.provenance import provenance

    # Validate everything before loading a model or writing a byte.
    if args.threads is None:
        args.threads = available_cores()
    specs = parse_method_specs(args.methods or ["ar"])
    check_settings(samples=args.samples, repeats=args.repeats, warmup=args.warmup, batch_size=args.batch_size)
    _check_output_paths(json=args.json, markdown=args.markdown, plots=args.plots)
    dtype = setup_runtime(args)
    pipe, defaults, path = load_pipeline(args.model, dtype, args.device)
    sampling = SamplingConfig(**sampling_settings(args, defaults))
    # The name the user gave (an alias such as c2i), not this machine's absolute path of the folder.
    from arvis.hub import DEFAULT_MODEL

    model_name = args.model or DEFAULT_MODEL
    context = {"model": model_name, **provenance(args.device, dtype)}
    backbone, conditions, draft = pipe.transformer, None, getattr(pipe, "draft_transformer", None)
    if hasattr(pipe, "bench_inputs"):  # pipelines that build a backbone per request shape (Emu3)
        backbone, conditions, draft = pipe.bench_inputs(args.prompt or [], args.samples, args.batch_size)
        context["prompts"] = list(args.prompt)
    elif args.prompt:
        raise ValueError("--prompt: this model's bench takes class ids (sample i gets class i mod num_classes)")
    # A next-scale (VAR) pipeline decodes with its own loop; its per-scale timeline replaces the forward-cost curve.
    next_scale = hasattr(pipe, "decode_condition")
    result = run_bench(backbone, specs, sampling, samples=args.samples, seed=args.seed, repeats=args.repeats,
                       warmup=args.warmup, batch_size=args.batch_size, conditions=conditions,
                       forward_cost_sizes=() if args.no_forward_cost or next_scale else (1, 2, 4, 8, 16, 32, 64),
                       **({"decode_fn": pipe.decode_condition} if next_scale else {}),
                       context=context, progress=not args.no_progress,
                       draft_model=draft,
                       neighbours=getattr(pipe, "codebook_neighbours", None),
                       lowres_model=getattr(pipe, "lowres_transformer", None),
                       upsampler=getattr(pipe, "upsampler", None))
    print(format_text(result))
    if args.json:
        write_json_atomic(args.json, result.records)
        print(f"wrote {args.json}")
    if args.markdown:
        write_bytes_atomic(args.markdown, format_markdown(result).encode())
        print(f"wrote {args.markdown}")
    if args.plots:
        from arvis.eval.plots import write_bench_plots

        for f in write_bench_plots(result.records, result.forward_cost, args.plots):
            print(f"wrote {f}")
    return 0


# ----------------------------------------------------------------------------- fid
def _fid_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--folder", default=None, help="folder of generated images (e.g. written by eval/sample.py)")
    p.add_argument("--model", default=None, help="or sample in-process from this model (alias, folder, tiny-random)")
    p.add_argument("--num-samples", type=int, default=1000, help="images to sample with --model (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed with --model (image i: seed_for(seed, i))")
    p.add_argument("--sample-batch-size", type=int, default=8, help="images per pipeline call with --model")
    p.add_argument("--ref", default="heldout",
                   help="reference: 'heldout' (held-out real crops, cached), a folder, or a statistics .npz")
    p.add_argument("--ref-num", type=int, default=5000, help="held-out crops in the reference (default 5000)")
    p.add_argument("--floor", action="store_true", help="also report the real-vs-real floor at the same N")
    p.add_argument("--extractor", default=None,
                   help="'domain' / 'domain-emoji' (shipped domain networks), a domain-network folder, or "
                        "'inception:/path/inception-2015-12-05.pt' (clean-fid's clean-mode Inception); default: the "
                        "domain network of --data")
    p.add_argument("--data", choices=["photos", "emoji"], default=None,
                   help="what the images are: picks the held-out reference and the default extractor (default: "
                        "the --model folder's evaluation.json, else photos)")
    p.add_argument("--batch-size", type=int, default=64, help="feature-extraction batch")
    p.add_argument("--save-stats", default=None, help="also write the generated images' statistics (.npz)")
    p.add_argument("--json", default=None, help="write a JSON record")
    p.add_argument("--no-progress", action="store_true")
    _add_sampling(p, with_method=True)
    _add_runtime(p)


@command("fid", "FID of a folder or of a model's samples against held-out real images (clean-fid)", _fid_arguments)
def run_fid_command(args: argparse.Namespace) -> int:
    from arvis.eval.fid import compute_fid, load_extractor
    from arvis.eval.files import list_images, write_json_atomic
    from arvis.eval.provenance import provenance

    if (args.folder is None) == (args.model is None):
        raise ValueError("pass exactly one of --folder (images on disk) and --model (sample in-process)")
    if args.folder is not None:
        list_images(args.folder, "--folder")  # missing / empty folder: fail before loading anything
    if str(args.ref).endswith(".npz"):
        if not Path(args.ref).is_file():
            raise ValueError(f"--ref: no such statistics file {args.ref!r}")
    elif args.ref != "heldout":
        list_images(args.ref, "--ref")
    if args.floor and args.ref != "heldout":
        raise ValueError("--floor: the real-vs-real floor is defined against --ref heldout")
    for name in ("num_samples", "ref_num", "batch_size", "sample_batch_size"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.model is not None:
        from arvis.methods import validate_method

        validate_method(args.method, dict(args.option))  # unknown method / bad option: fail before any work
    _check_output_paths(json=args.json, save_stats=args.save_stats)
    dtype = setup_runtime(args)
    from arvis.data.sources import model_data
    from arvis.eval.fid import DATA_EXTRACTORS

    data = args.data
    if data is None:
        data = "photos" if args.model is None else model_data(_model_folder(args.model))
    extractor = load_extractor(args.extractor or DATA_EXTRACTORS[data], device=args.device)
    record: dict[str, Any] = {"data": data}
    source: Any
    num = None
    if args.model is not None:
        from arvis.eval.jobs import PipelineSampler

        pipe, defaults, path = load_pipeline(args.model, dtype, args.device)
        sampling = sampling_settings(args, defaults)
        source = PipelineSampler(pipe, args.seed, method=args.method, method_options=dict(args.option), **sampling)
        source.name = f"model:{path}"  # type: ignore[attr-defined]
        num = args.num_samples
        record.update(model=str(path), method=args.method, options=dict(args.option), seed=args.seed,
                      sampling=sampling)
    else:
        source = args.folder
    result = compute_fid(source, args.ref, extractor, num=num, reference_num=args.ref_num, floor=args.floor,
                         batch_size=args.batch_size, source_batch_size=args.sample_batch_size,
                         device=args.device, progress=not args.no_progress, data=data)
    record.update(result.to_dict())
    record.update(provenance(args.device, dtype))
    floor = f"   real-vs-real floor (N={result.generated.count}): {result.floor:.4f}" if result.floor is not None else ""
    print(f"FID ({result.generated.extractor}, N={result.generated.count} vs {result.reference.source}, "
          f"M={result.reference.count}): {result.fid:.4f}{floor}")
    if args.save_stats:
        result.generated.save(args.save_stats)
        print(f"wrote {args.save_stats}")
    if args.json:
        write_json_atomic(args.json, record)
        print(f"wrote {args.json}")
    return 0


def _model_folder(model: str) -> str | None:
    """The folder of a model alias or path (``None`` for the tiny random model)."""
    from arvis.hub import TINY_RANDOM, resolve_model

    return None if model == TINY_RANDOM else str(resolve_model(model))


# ----------------------------------------------------------------------------- clip score
def _clip_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--folder", required=True, help="folder of images (captions from its manifest.json)")
    p.add_argument("--captions", default=None, help="JSON {file name: caption} instead of the manifest")
    p.add_argument("--clip-model", default=None,
                   help="shipped CLIP: 'clip' (scenes, default) or 'clip-emoji'; an open_clip folder; or an open_clip "
                        "architecture (e.g. ViT-B-32) with --weights")
    p.add_argument("--weights", default=None, help="local weights file for an open_clip architecture")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--json", default=None, help="write a JSON record")
    p.add_argument("--no-progress", action="store_true")
    _add_runtime(p)


@command("clip-score", "CLIP score of a folder of images against their captions (open_clip)", _clip_arguments)
def run_clip_command(args: argparse.Namespace) -> int:
    from arvis.eval.clip_score import clip_score_folder, folder_captions, load_clip
    from arvis.eval.files import write_json_atomic
    from arvis.eval.provenance import provenance

    folder_captions(args.folder, args.captions)  # validate before loading the model
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    _check_output_paths(json=args.json)
    dtype = setup_runtime(args)
    scorer = load_clip(args.clip_model, weights=args.weights, device=args.device)
    result = clip_score_folder(args.folder, scorer, args.captions, batch_size=args.batch_size,
                               progress=not args.no_progress)
    print(f"CLIP score ({result.model}, {len(result.per_pair)} pairs): {result.score:.3f}")
    if args.json:
        write_json_atomic(args.json, {**result.to_dict(), **provenance(args.device, dtype)})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    from arvis.cli import main

    sys.exit(main())
