"""``arvis bench``, ``arvis fid`` and ``arvis clip-score``: registered on the ``arvis`` CLI at import.

Examples::

    arvis bench --method "mc-sjd:window=16,coupling=gumbel;zipar:row_lag=2" --num-images 2
    arvis bench --quick --method sjd:window=16          # one warm-up, one round: a look, not a measurement
    arvis bench --model tiny-random --method "sjd:window=16;mc-sjd:window=32,init=random" \\
        --num-images 8 --json bench.json --markdown bench.md --plots plots/
    arvis fid --folder samples/c2i-ar --floor                   # domain network vs held-out crops
    arvis fid --model c2i --num-images 1000 --floor --json fid.json   # sample in-process, no files
    arvis fid --num-images 100                                  # the default model; reference statistics cached
    arvis clip-score --folder samples/t2i-ar                    # captions from manifest.json
    arvis clip-score --folder samples/emoji --clip-model clip-emoji   # emoji images and their names
    arvis fid --model emoji --num-images 1000 --floor           # emoji model: held-out emoji, domain-emoji
    # numbers comparable with papers (ADM's evaluation suite): 50 images per class as ADM's .npz, the FID
    # Inception from a weights file, a reference batch or statistics file
    arvis fid --model c2i --per-class 50 --save-npz samples.npz \
        --extractor inception:pt_inception-2015-12-05-6726825d.pth --ref VIRTUAL_imagenet256_labeled.npz
    arvis fid --sample-batch samples.npz --extractor inception:pt_inception-2015-12-05-6726825d.pth --ref ref.npz

The flags come from :mod:`arvis.cli_args` (docs/cli.md). Nothing is written before the arguments are
validated, and every output is written atomically.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arvis import cli_args as a
from arvis.cli_args import command
from arvis.data.sources import DATA_CHOICES
from arvis.errors import storage_errors
from arvis.eval import defaults as d

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
    a.add_images(p, default=None, batch_size=1, what="images per round (class i mod the number of classes)",
                 default_text=f"{d.BENCH_IMAGES}; with --quick {d.QUICK_IMAGES}")
    p.add_argument("--repeats", type=int, default=None,
                   help=f"timed interleaved rounds, median reported (default and minimum {d.MIN_REPEATS}; "
                        f"with --quick {d.QUICK_REPEATS})")
    p.add_argument("--warmup", type=int, default=None,
                   help=f"untimed rounds first (>= 1; default {d.BENCH_WARMUP}; with --quick {d.QUICK_WARMUP})")
    p.add_argument("--quick", action="store_true",
                   help=f"a look, not a measurement: {d.QUICK_WARMUP} warm-up and {d.QUICK_REPEATS} timed round of "
                        f"{d.QUICK_IMAGES} image, a shorter forward-cost curve, no sync count; labelled QUICK in "
                        f"every output")
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
    if args.num_images is None:
        args.num_images = d.QUICK_IMAGES if args.quick else d.BENCH_IMAGES
    a.check_images(args)
    if args.repeats is None:
        args.repeats = d.QUICK_REPEATS if args.quick else d.MIN_REPEATS
    if args.warmup is None:
        args.warmup = d.QUICK_WARMUP if args.quick else d.BENCH_WARMUP
    check_settings(samples=args.num_images, repeats=args.repeats, warmup=args.warmup, batch_size=args.batch_size,
                   quick=args.quick)
    a.check_sampling_flags(args)
    _check_outputs(args, "json", "markdown", "plots")
    caps = a.model_capabilities(args.model)
    a.check_specs(specs, caps)
    if args.prompt and caps.conditioning != "text":
        raise ValueError("--prompt: this model's bench takes class ids (sample i gets class i mod num_classes)")
    dtype = a.setup_runtime(args)
    with a.progress_bars(not args.no_progress):
        pipe, _, model = load_pipeline(args.model, dtype, args.device)
    sampling = pipe.sampling_config(**sampling_flags(args))
    a.check_batch_memory(pipe, args.batch_size, sampling.uses_cfg)
    context = {**model.record(), **provenance(args.device, dtype)}
    if caps.conditioning == "text":
        context["prompts"] = list(args.prompt or [])
    inputs = pipe.bench_inputs(args.prompt, args.num_images, args.batch_size)
    # Token models: the forward-cost curve of their backbone explains latency; next-scale and continuous models
    # report their own timeline instead.
    result = run_bench(inputs, specs, sampling, seed=args.seed, repeats=args.repeats, warmup=args.warmup,
                       forward_cost_sizes=() if args.no_forward_cost or inputs.backbone is None
                       else (1, 2, 4, 8, 16, 32, 64),
                       context=context, progress=not args.no_progress, quick=args.quick)
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
    p.add_argument("--sample-batch", default=None, metavar="FILE.npz",
                   help="generated images as an ADM sample batch (.npz, uint8 NHWC arr_0), as LlamaGen, VAR and "
                        "MAR write them")
    a.add_model(p, help_extra="; sampled in-process when neither --folder nor --sample-batch is given")
    a.add_images(p, default=None, batch_size=16, what="images to sample from the model",
                 default_text=f"{d.FID_IMAGES}, or --per-class")
    p.add_argument("--per-class", type=int, default=None, metavar="K",
                   help="with --model: K images of every class (papers: 50), instead of --num-images")
    p.add_argument("--save-npz", default=None, metavar="FILE.npz",
                   help="also write the generated images (and class labels) as an ADM sample batch: arr_0 uint8 "
                        "[N, H, W, 3], arr_1 labels; the file ADM's evaluator reads")
    a.add_method(p, several=False)
    p.add_argument("--ref", default="heldout",
                   help="reference: 'heldout' (held-out real images of --data, cached), a folder, an arvis statistics "
                        ".npz (--save-stats), or a reference batch / statistics .npz in ADM's layout (arr_0 images "
                        "and/or mu, sigma; pytorch-fid and clean-fid statistics too) (default %(default)s)")
    p.add_argument("--ref-num", type=int, default=d.DEFAULT_REFERENCE_COUNT,
                   help="held-out images in the reference (default %(default)s)")
    p.add_argument("--floor", action="store_true",
                   help=f"also report the real-vs-real floor at the same N (always below N={d.MIN_MEANINGFUL_IMAGES})")
    p.add_argument("--extractor", default=None,
                   help="'domain' / 'domain-emoji' (shipped domain networks), a domain-network folder, or "
                        "'inception:PATH': the FID Inception from pytorch-fid's pt_inception-2015-12-05-6726825d.pth "
                        "(or a .safetensors copy) or clean-fid's inception-2015-12-05.pt; default: the domain "
                        "network of --data")
    p.add_argument("--resize", choices=d.RESIZE_MODES, default=None,
                   help="how images reach the network's input size: clean (clean-fid's PIL bicubic) or bilinear "
                        "(torch, as pytorch-fid; the usual stand-in for ADM's TensorFlow evaluator); default: "
                        "bilinear against a third party's .npz reference, clean otherwise")
    p.add_argument("--data", choices=DATA_CHOICES, default=None,
                   help="what the images are: picks the held-out reference and the default extractor (default: "
                        "the --model folder's evaluation.json, else photos)")
    p.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="where reference statistics are cached (default: $ARVIS_CACHE, else ~/.cache/arvis/data)")
    p.add_argument("--feature-batch-size", type=int, default=d.FEATURE_BATCH_SIZE,
                   help="images per feature-extractor call (default %(default)s)")
    _add_outputs(p, "save_stats", "json")
    a.add_sampling(p)
    a.add_runtime(p)
    a.add_progress(p)


def _check_fid_sources(args: argparse.Namespace) -> int | None:
    """The FID sources and reference, before anything loads; returns N when it is already known."""
    from arvis.eval.adm import open_batch
    from arvis.eval.fid import is_arvis_statistics
    from arvis.eval.files import list_images

    given = [f for f in ("folder", "sample_batch", "model") if getattr(args, f) is not None]
    if len(given) > 1:
        raise ValueError("pass one of --folder (images on disk), --sample-batch (an .npz) and --model (sample "
                         "in-process; the default when neither of the others is given)")
    if args.folder is not None or args.sample_batch is not None:
        for flag in ("num_images", "per_class"):
            if getattr(args, flag) is not None:
                raise ValueError(f"--{flag.replace('_', '-')}: only when sampling from a model, not with "
                                 f"--folder or --sample-batch")
    elif args.num_images is not None and args.per_class is not None:
        raise ValueError("--num-images / --per-class: give one (--per-class K draws K images of every class)")
    if args.per_class is not None:
        a.check_count("--per-class", args.per_class, 1, a.MAX_IMAGES)
    if args.save_npz is not None:
        if args.sample_batch is not None:
            raise ValueError("--save-npz: the images already are an .npz (--sample-batch)")
        if not str(args.save_npz).endswith(".npz"):
            raise ValueError(f"--save-npz: {args.save_npz!r} must end in .npz")
    n = None
    if args.folder is not None:
        n = len(list_images(args.folder, "--folder"))  # missing / empty folder: fail before loading anything
    if args.sample_batch is not None:
        if not str(args.sample_batch).endswith(".npz"):
            raise ValueError(f"--sample-batch: {args.sample_batch!r} must be an .npz sample batch")
        batch = open_batch(args.sample_batch, "--sample-batch")
        if batch.image_size is None:
            raise ValueError(f"--sample-batch: {args.sample_batch!r} holds no images (arr_0)")
        n = batch.count
    if str(args.ref).endswith(".npz"):
        if not is_arvis_statistics(args.ref):
            open_batch(args.ref, "--ref")  # missing file, wrong layout, neither images nor statistics
    elif args.ref != "heldout":
        list_images(args.ref, "--ref")
    if args.floor and args.ref != "heldout":
        raise ValueError("--floor: the real-vs-real floor is defined against --ref heldout")
    return n


@command("fid", "FID of a folder, an .npz sample batch or a model's samples against held-out real images or a "
                "reference batch (clean-fid's machinery; ADM's .npz layout)", _fid_arguments)
def run_fid_command(args: argparse.Namespace) -> int:
    from arvis.data.sources import model_data
    from arvis.eval.fid import DATA_EXTRACTORS, compute_fid, load_extractor
    from arvis.eval.files import write_json_atomic
    from arvis.eval.provenance import provenance
    from arvis.hub import load_pipeline

    known_n = _check_fid_sources(args)
    a.check_images(args)
    a.check_count("--ref-num", args.ref_num, 1, a.MAX_IMAGES)
    a.check_count("--feature-batch-size", args.feature_batch_size, 1, a.MAX_BATCH_SIZE)
    sampling_model = args.folder is None and args.sample_batch is None  # --model, or the default model
    spec = a.parse_methods(args.method, single=True)[0] if sampling_model else None
    a.check_sampling_flags(args)
    _check_outputs(args, "json", "save_stats", "save_npz")
    if spec is not None:
        a.check_specs([spec], a.model_capabilities(args.model))
    dtype = a.setup_runtime(args)
    data = args.data
    if data is None:
        data = model_data(_model_folder(args.model)) if sampling_model else "photos"
    extractor = load_extractor(args.extractor or DATA_EXTRACTORS[data], device=args.device)
    record: dict[str, Any] = {"data": data}
    source: Any
    num, writer = None, None
    if sampling_model:
        from arvis.eval.jobs import PipelineSampler

        with a.progress_bars(not args.no_progress):
            pipe, _, model = load_pipeline(args.model, dtype, args.device)
        config = pipe.sampling_config(**sampling_flags(args))
        sampling = {k: v for k, v in vars(config).items() if k in ("guidance_scale", "top_k", "top_p", "temperature")}
        a.check_batch_memory(pipe, args.batch_size, config.uses_cfg)
        source = PipelineSampler(pipe, args.seed, method=spec.name, method_options=spec.options_dict, **sampling)
        source.name = f"model:{model}"  # type: ignore[attr-defined]
        num = _images_to_sample(args, source)
        record.update(**model.record(), method=spec.name, options=spec.options_dict, seed=args.seed,
                      sampling=sampling, per_class=args.per_class)
        if args.save_npz:
            from arvis.eval.adm import SampleBatchWriter, recording

            writer = SampleBatchWriter(args.save_npz, num)
            source = recording(source, writer)
    else:
        source = args.folder if args.folder is not None else args.sample_batch
    n = known_n if known_n is not None else num
    # Below MIN_MEANINGFUL_IMAGES the floor at the same N is what the figure can be compared with: always shown.
    floor = args.floor or (args.ref == "heldout" and n is not None and n < d.MIN_MEANINGFUL_IMAGES)
    try:
        result = compute_fid(source, args.ref, extractor, num=num, reference_num=args.ref_num, floor=floor,
                             batch_size=args.feature_batch_size, source_batch_size=args.batch_size,
                             device=args.device, progress=not args.no_progress, data=data, resize=args.resize,
                             cache_dir=args.cache_dir)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    record.update(result.to_dict())
    record["reference_cache"] = result.reference.extra.get("cache")
    record.update(provenance(args.device, dtype))
    print(format_fid(result))
    print(_reference_line(result))
    warning = result.warning()
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    with storage_errors("writing the FID outputs", RERUN_ADVICE):
        if writer is not None:
            print(f"wrote {writer.close()} (ADM sample batch: arr_0 {num} images"
                  f"{', arr_1 labels' if writer.labels else ''})")
        elif args.save_npz:
            from arvis.eval.adm import write_folder_batch

            print(f"wrote {write_folder_batch(args.folder, args.save_npz)} (ADM sample batch)")
        if args.save_stats:
            result.generated.save(args.save_stats)
            print(f"wrote {args.save_stats}")
        if args.json:
            write_json_atomic(args.json, record)
            print(f"wrote {args.json}")
    return 0


def _images_to_sample(args: argparse.Namespace, sampler: Any) -> int:
    """``--num-images``, or ``--per-class`` times the number of classes (each class exactly that often, since
    image ``i`` gets class ``i mod classes``)."""
    if args.per_class is None:
        return d.FID_IMAGES if args.num_images is None else args.num_images
    if sampler.labels is None:
        raise ValueError("--per-class: this model is text-conditional; give --num-images")
    return a.check_count("--per-class x classes", args.per_class * len(sampler.labels), 1, a.MAX_IMAGES)


def format_fid(result: Any) -> str:
    """The FID line: extractor, resize, N, reference and M, with the real-vs-real floor and its N beside it."""
    ref = result.reference
    m = f"M={ref.count}" if ref.count else "M=precomputed"
    floor = (f"   real-vs-real floor (N={result.generated.count}): {result.floor:.4f}"
             if result.floor is not None else "")
    return (f"FID ({result.generated.extractor}, resize {result.generated.resize}, N={result.generated.count} vs "
            f"{ref.source}, {m}): {result.fid:.4f}{floor}")


def _reference_line(result: Any) -> str:
    extra = result.reference.extra
    state = {"hit": "read from the cache", "miss": "computed and cached",
             "stale": "recomputed (the cached file was stale) and cached"}.get(extra.get("cache"))
    if state is not None:
        return f"reference statistics: {state} in {extra['cache_file']}"
    if "file" in extra:
        return f"reference statistics: read from {extra['file']}"
    return "reference statistics: computed from the reference images (not cached)"


def _model_folder(model: str | None) -> str | None:
    """The folder of a model alias or path, or of the default model for ``None`` (``None`` for the tiny random
    model, which :func:`arvis.hub.load_pipeline` also loads for ``None`` when the default model is absent)."""
    from arvis.hub import DEFAULT_MODEL, TINY_RANDOM, resolve_model, shipped_names

    if model == TINY_RANDOM or (model is None and DEFAULT_MODEL not in shipped_names()):
        return None
    return str(resolve_model(model))


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
    with a.progress_bars(not args.no_progress):
        scorer = load_clip(args.clip_model, weights=args.weights, device=args.device)
    result = clip_score_folder(args.folder, scorer, args.captions, batch_size=args.feature_batch_size,
                               progress=not args.no_progress)
    print(f"CLIP score ({result.model}, {len(result.per_pair)} pairs): {result.score:.3f}")
    if args.json:
        write_json_atomic(args.json, {**result.to_dict(), **provenance(args.device, dtype)})
        print(f"wrote {args.json}")
    return 0
