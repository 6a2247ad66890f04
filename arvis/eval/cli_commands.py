"""``arvis bench``, ``arvis fid`` and ``arvis clip-score``: registered on the ``arvis`` CLI at import.

Examples::

    arvis bench --method "mc-sjd:window=16,coupling=gumbel;zipar:row_lag=2" --num-images 2
    arvis bench --model tiny-random --method "sjd:window=16;mc-sjd:window=32,init=random" \\
        --num-images 8 --json bench.json --markdown bench.md --plots plots/
    arvis fid --folder samples/c2i-ar --floor                   # domain network vs held-out crops
    arvis fid --model c2i --num-images 1000 --floor --json fid.json   # sample in-process, no files
    arvis clip-score --folder samples/t2i-ar                    # captions from manifest.json
    arvis clip-score --folder samples/emoji --clip-model clip-emoji   # emoji images and their names
    arvis fid --model emoji --num-images 1000 --floor           # emoji model: held-out emoji, domain-emoji

The flags come from :mod:`arvis.cli_args` (docs/cli.md). Nothing is written before the arguments are
validated, and every output is written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from arvis import cli_args as a
from arvis.cli_args import command
from arvis.data.sources import DATA_CHOICES
from arvis.errors import storage_errors

RERUN_ADVICE = "Fix the cause and run the command again"

if TYPE_CHECKING:
    import argparse


def sampling_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling flags as given (``None`` = the model's default, decided by the pipeline)."""
    return {"guidance_scale": args.guidance_scale, "top_k": args.top_k, "top_p": args.top_p,
            "temperature": args.temperature}


def _add_outputs(p: argparse.ArgumentParser, *names: str) -> None:
    helps = {"json": "write a JSON record", "markdown": "write the Markdown tables",
             "plots": "folder for the PNG plots", "save_stats": "also write the generated images' statistics (.npz)"}
    for name in names:
        p.add_argument(f"--{name.replace('_', '-')}", default=None, help=helps[name])


def _check_outputs(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if name == "plots":
            if value is not None and Path(value).exists() and not Path(value).is_dir():
                raise ValueError(f"--plots: {value!r} exists and is not a folder")
        else:
            a.check_output_file(f"--{name.replace('_', '-')}", value)


# ----------------------------------------------------------------------------- bench
def _bench_arguments(p: argparse.ArgumentParser) -> None:
    a.add_model(p, help_extra="; class-conditional models, or text-conditional ones with --prompt")
    p.add_argument("--prompt", action="append", default=None, metavar="TEXT",
                   help="prompt for text-conditional models (Emu3), repeatable; sample i gets prompt i mod count")
    a.add_method(p, several=True)
    a.add_images(p, default=4, batch_size=1, what="images per round (class i mod the number of classes)")
    p.add_argument("--repeats", type=int, default=5, help="timed interleaved rounds (>= 5; median reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (>= 1)")
    p.add_argument("--no-forward-cost", action="store_true", help="skip the forward-cost curve")
    _add_outputs(p, "json", "markdown", "plots")
    a.add_sampling(p)
    a.add_runtime(p)
    a.add_progress(p)


@command("bench", "time decoding methods side by side against plain AR (same seeds, interleaved repeats) with "
                  "the forward-cost curve", _bench_arguments)
def run_bench_command(args: argparse.Namespace) -> int:
    from arvis.eval.bench import check_settings, format_markdown, format_text, run_bench
    from arvis.eval.files import write_bytes_atomic, write_json_atomic
    from arvis.eval.provenance import provenance
    from arvis.hub import load_pipeline

    # Validate everything before loading a model or writing a byte.
    specs = a.parse_methods(args.method)
    a.check_images(args)
    check_settings(samples=args.num_images, repeats=args.repeats, warmup=args.warmup, batch_size=args.batch_size)
    a.check_sampling_flags(args)
    _check_outputs(args, "json", "markdown", "plots")
    dtype = a.setup_runtime(args)
    pipe, _, model = load_pipeline(args.model, dtype, args.device)
    a.check_specs_fit_model(specs, pipe)
    sampling = pipe.sampling_config(**sampling_flags(args))
    a.check_batch_memory(pipe, args.batch_size, sampling.uses_cfg)
    context = {**model.record(), **provenance(args.device, dtype)}
    backbone, conditions, draft = pipe.transformer, None, getattr(pipe, "draft_transformer", None)
    if hasattr(pipe, "bench_inputs"):  # pipelines that build a backbone per request shape (Emu3)
        backbone, conditions, draft = pipe.bench_inputs(args.prompt or [], args.num_images, args.batch_size)
        context["prompts"] = list(args.prompt)
    elif args.prompt:
        raise ValueError("--prompt: this model's bench takes class ids (sample i gets class i mod num_classes)")
    # A next-scale (VAR) pipeline decodes with its own loop; its per-scale timeline replaces the forward-cost curve.
    next_scale = hasattr(pipe, "decode_condition")
    result = run_bench(backbone, specs, sampling, samples=args.num_images, seed=args.seed,
                       repeats=args.repeats, warmup=args.warmup, batch_size=args.batch_size, conditions=conditions,
                       forward_cost_sizes=() if args.no_forward_cost or next_scale else (1, 2, 4, 8, 16, 32, 64),
                       **({"decode_fn": pipe.decode_condition} if next_scale else {}),
                       context=context, progress=not args.no_progress, draft_model=draft,
                       neighbours=getattr(pipe, "codebook_neighbours", None),
                       lowres_model=getattr(pipe, "lowres_transformer", None),
                       upsampler=getattr(pipe, "upsampler", None))
    print(format_text(result))
    with storage_errors("writing the bench outputs", RERUN_ADVICE):
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
    a.add_model(p, help_extra="; sample in-process instead of --folder")
    a.add_images(p, default=1000, batch_size=16, what="images to sample with --model")
    a.add_method(p, several=False)
    p.add_argument("--ref", default="heldout",
                   help="reference: 'heldout' (held-out real crops, cached), a folder, or a statistics .npz")
    p.add_argument("--ref-num", type=int, default=5000, help="held-out crops in the reference (default 5000)")
    p.add_argument("--floor", action="store_true", help="also report the real-vs-real floor at the same N")
    p.add_argument("--extractor", default=None,
                   help="'domain' / 'domain-emoji' (shipped domain networks), a domain-network folder, or "
                        "'inception:PATH' (clean-fid's clean-mode Inception TorchScript file); default: the "
                        "domain network of --data")
    p.add_argument("--data", choices=DATA_CHOICES, default=None,
                   help="what the images are: picks the held-out reference and the default extractor (default: "
                        "the --model folder's evaluation.json, else photos)")
    p.add_argument("--feature-batch-size", type=int, default=64, help="images per feature-extractor call (default 64)")
    _add_outputs(p, "save_stats", "json")
    a.add_sampling(p)
    a.add_runtime(p)
    a.add_progress(p)


@command("fid", "FID of a folder or of a model's samples against held-out real images (clean-fid)", _fid_arguments)
def run_fid_command(args: argparse.Namespace) -> int:
    from arvis.eval.fid import compute_fid, load_extractor
    from arvis.eval.files import list_images, write_json_atomic
    from arvis.eval.provenance import provenance
    from arvis.hub import load_pipeline

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
    a.check_images(args)
    a.check_count("--ref-num", args.ref_num, 1, a.MAX_IMAGES)
    a.check_count("--feature-batch-size", args.feature_batch_size, 1, a.MAX_BATCH_SIZE)
    spec = a.parse_methods(args.method, single=True)[0] if args.model is not None else None
    a.check_sampling_flags(args)
    _check_outputs(args, "json", "save_stats")
    dtype = a.setup_runtime(args)
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

        pipe, _, model = load_pipeline(args.model, dtype, args.device)
        a.check_specs_fit_model([spec], pipe)
        sampling = {k: v for k, v in vars(pipe.sampling_config(**sampling_flags(args))).items()
                    if k in ("guidance_scale", "top_k", "top_p", "temperature")}
        a.check_batch_memory(pipe, args.batch_size, sampling["guidance_scale"] != 1.0)
        source = PipelineSampler(pipe, args.seed, method=spec.name, method_options=spec.options_dict, **sampling)
        source.name = f"model:{model}"  # type: ignore[attr-defined]
        num = args.num_images
        record.update(**model.record(), method=spec.name, options=spec.options_dict, seed=args.seed,
                      sampling=sampling)
    else:
        source = args.folder
    result = compute_fid(source, args.ref, extractor, num=num, reference_num=args.ref_num, floor=args.floor,
                         batch_size=args.feature_batch_size, source_batch_size=args.batch_size,
                         device=args.device, progress=not args.no_progress, data=data)
    record.update(result.to_dict())
    record.update(provenance(args.device, dtype))
    floor = f"   real-vs-real floor (N={result.generated.count}): {result.floor:.4f}" if result.floor is not None else ""
    print(f"FID ({result.generated.extractor}, N={result.generated.count} vs {result.reference.source}, "
          f"M={result.reference.count}): {result.fid:.4f}{floor}")
    with storage_errors("writing the FID outputs", RERUN_ADVICE):
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
    p.add_argument("--feature-batch-size", type=int, default=32, help="images per CLIP call (default 32)")
    _add_outputs(p, "json")
    a.add_runtime(p)
    a.add_progress(p)


@command("clip-score", "CLIP score of a folder of images against their captions (open_clip)", _clip_arguments)
def run_clip_command(args: argparse.Namespace) -> int:
    from arvis.eval.clip_score import clip_score_folder, folder_captions, load_clip
    from arvis.eval.files import write_json_atomic
    from arvis.eval.provenance import provenance

    folder_captions(args.folder, args.captions)  # validate before loading the model
    a.check_count("--feature-batch-size", args.feature_batch_size, 1, a.MAX_BATCH_SIZE)
    _check_outputs(args, "json")
    dtype = a.setup_runtime(args)
    scorer = load_clip(args.clip_model, weights=args.weights, device=args.device)
    result = clip_score_folder(args.folder, scorer, args.captions, batch_size=args.feature_batch_size,
                               progress=not args.no_progress)
    print(f"CLIP score ({result.model}, {len(result.per_pair)} pairs): {result.score:.3f}")
    if args.json:
        write_json_atomic(args.json, {**result.to_dict(), **provenance(args.device, dtype)})
        print(f"wrote {args.json}")
    return 0
