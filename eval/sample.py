#!/usr/bin/env python
"""Draw N images for evaluation: sharded over ranks, resumable, every image a pure function of (seed, index).

One process:
    python eval/sample.py --model c2i --num-images 1000 --seed 0 --output samples/c2i-ar
Two CPU processes (gloo) or GPUs (nccl), with torch's launcher or accelerate's:
    torchrun --nproc_per_node 2 eval/sample.py --model c2i --num-images 1000 --seed 0 --output samples/c2i-ar
    accelerate launch --multi_gpu --num_processes 2 eval/sample.py --model c2i --num-images 1000 --seed 0 --output ...
(accelerate's --multi_gpu launcher is torch.distributed.run; with --device cpu the ranks join a gloo group,
set up by accelerate's PartialState. Its --cpu flag instead runs one process.)
After a crash (any rank, any moment) or a write error (disk full…), run the same command with --resume:
PNGs whose bytes match the sha256 recorded when they were written are kept, anything else is drawn again,
and the folder ends with exactly N valid images, byte-identical to an uninterrupted run. One job per
folder at a time: a second job on a folder in use is refused. A method and its options:
--method sjd:window=16 (docs/cli.md).

Output: {index:06d}.png and manifest.json (the job, then each image's sha256, class label / prompt and
generator seed). Feed the folder to `arvis fid --folder DIR`. For numbers comparable with papers (ADM's
evaluation suite): --per-class 50 draws 50 images of every class, and --save-npz FILE also packs the finished
job into ADM's sample batch (arr_0 uint8 [N, H, W, 3], arr_1 labels), the file its evaluator reads:
    python eval/sample.py --model c2i --per-class 50 --seed 0 --output samples/c2i-ar --save-npz samples/c2i-ar.npz
"""

from __future__ import annotations

import argparse
import json
import sys


def build_parser() -> argparse.ArgumentParser:
    from arvis import cli_args as a

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    a.add_model(p)
    images = p.add_mutually_exclusive_group(required=True)
    images.add_argument("--num-images", type=int, metavar="N", help="N: images 0 … N-1")
    images.add_argument("--per-class", type=int, metavar="K",
                        help="K images of every class (of --class-ids, default all): N = K x classes")
    p.add_argument("--batch-size", type=int, default=8, metavar="B",
                   help="images per pipeline call; never changes an image (default 8)")
    p.add_argument("--seed", type=int, default=0, help="image i uses the generator seed_for(seed, i) (default 0)")
    p.add_argument("--output", required=True, help="folder for {index:06d}.png and manifest.json")
    p.add_argument("--resume", action="store_true", help="continue the job already in --output")
    p.add_argument("--save-npz", default=None, metavar="FILE",
                   help="when the job is complete, also write its images as an ADM sample batch .npz (arr_0, arr_1)")
    p.add_argument("--class-ids", default=None, help="comma-separated class ids/names cycled over indices "
                                                     "(default: every class, in order)")
    p.add_argument("--prompts", default=None, help="text file, one prompt per line, cycled over indices (t2i)")
    a.add_method(p, several=False)
    a.add_sampling(p)
    a.add_runtime(p)
    a.add_progress(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except ValueError as err:
        print(f"eval/sample.py: error: {err}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    import torch

    from arvis import cli_args as a
    from arvis.eval.jobs import PipelineSampler, SamplingJob, distributed_state, run_sampling_job
    from arvis.hub import load_pipeline

    a.check_images(args)
    if args.per_class is not None:
        a.check_count("--per-class", args.per_class, 1, a.MAX_IMAGES)
    if args.save_npz is not None:
        if not str(args.save_npz).endswith(".npz"):
            raise ValueError(f"--save-npz: {args.save_npz!r} must end in .npz")
        a.check_output_file("--save-npz", args.save_npz)
    a.check_sampling_flags(args)
    spec = a.parse_methods(args.method, single=True)[0]
    a.check_specs([spec], a.model_capabilities(args.model))  # from the folder's metadata, before anything loads
    a.check_device(args.device)
    labels = a.parse_class_ids(args.class_ids)
    args.prompt = None
    prompts = a.read_prompts(args)
    # accelerate joins the process group (gloo on the CPU, NCCL with cuda:LOCAL_RANK per rank) before the
    # thread count is set: it sets its own default when OMP_NUM_THREADS is unset.
    state = distributed_state(args.device)
    dtype = a.setup_runtime(args)
    rank, world = state.process_index, state.num_processes
    device = state.device if torch.device(args.device).type == "cuda" else args.device
    with a.progress_bars(not args.no_progress):
        pipe, _, model = load_pipeline(args.model, dtype, device)
    sampling = {k: v for k, v in vars(pipe.sampling_config(guidance_scale=args.guidance_scale, top_k=args.top_k,
                                                           top_p=args.top_p, temperature=args.temperature)).items()
                if k in ("guidance_scale", "top_k", "top_p", "temperature")}
    options = spec.options_dict
    sampler = PipelineSampler(pipe, args.seed, method=spec.name, method_options=options, labels=labels,
                              prompts=prompts, **sampling)
    num_images = args.num_images
    if args.per_class is not None:  # image i gets class labels[i mod len(labels)]: each exactly K times
        if sampler.labels is None:
            raise ValueError("--per-class: this model is text-conditional; give --num-images")
        num_images = a.check_count("--per-class x classes", args.per_class * len(sampler.labels), 1, a.MAX_IMAGES)
    job = SamplingJob(model=str(model), model_sha256=model.sha256, seed=args.seed, num_samples=num_images,
                      method=spec.name, method_options=options, sampling=sampling, labels=sampler.labels,
                      prompts=sampler.prompts)
    result = run_sampling_job(sampler, job, args.output, batch_size=args.batch_size, resume=args.resume,
                              progress=not args.no_progress)
    print(json.dumps({"rank": rank, "world_size": world, "written": result.written, "skipped": result.skipped,
                      "replaced": result.replaced, "removed_temporaries": result.removed_temporaries,
                      "manifest": str(result.manifest) if result.manifest else None}))
    if args.save_npz is not None and rank == 0:
        from arvis.eval.adm import write_folder_batch

        print(json.dumps({"npz": str(write_folder_batch(args.output, args.save_npz))}))
    state.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
