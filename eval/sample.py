#!/usr/bin/env python
"""Draw N images for evaluation: sharded over ranks, resumable, every image a pure function of (seed, index).

One process:
    python eval/sample.py --model c2i --num-samples 1000 --seed 0 --output samples/c2i-ar
Two CPU processes (gloo) or GPUs (nccl), with torch's launcher or accelerate's:
    torchrun --nproc_per_node 2 eval/sample.py --model c2i --num-samples 1000 --seed 0 --output samples/c2i-ar
    accelerate launch --multi_gpu --num_processes 2 eval/sample.py --model c2i --num-samples 1000 --seed 0 --output ...
(accelerate's --multi_gpu launcher is torch.distributed.run; with --device cpu the ranks join a gloo group,
set up by accelerate's PartialState. Its --cpu flag instead runs one process.)
After a crash (any rank, any moment) or a write error (disk full…), run the same command with --resume:
PNGs whose bytes match the sha256 recorded when they were written are kept, anything else is drawn again,
and the folder ends with exactly N valid images, byte-identical to an uninterrupted run. One job per
folder at a time: a second job on a folder in use is refused. A method's options: --method sjd -o window=16.

Output: {index:06d}.png and manifest.json (the job, then each image's sha256, class label / prompt and
generator seed). Feed the folder to `arvis fid --folder DIR`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    from arvis.cli import parse_option

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--model", default=None, help="shipped alias (c2i, t2i), pipeline folder, or tiny-random")
    p.add_argument("--num-samples", type=int, required=True, help="N: images 0 … N-1")
    p.add_argument("--seed", type=int, default=0, help="job seed; image i uses seed_for(seed, i)")
    p.add_argument("--output", required=True, help="folder for {index:06d}.png and manifest.json")
    p.add_argument("--batch-size", type=int, default=8, help="images per pipeline call (does not change images)")
    p.add_argument("--resume", action="store_true", help="continue the job already in --output")
    p.add_argument("--class-ids", default=None, help="comma-separated class ids/names cycled over indices "
                                                     "(default: every class, in order)")
    p.add_argument("--prompts", default=None, help="text file, one prompt per line, cycled over indices (t2i)")
    p.add_argument("--method", default="ar", help="decoding method (see `arvis methods`)")
    p.add_argument("--option", "-o", action="append", type=parse_option, default=[], metavar="KEY=VALUE",
                   help="method option, repeatable")
    p.add_argument("--guidance-scale", type=float, default=None, help="CFG scale (default: the model's)")
    p.add_argument("--top-k", type=int, default=None, help="top-k (default: the model's)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (each rank takes cuda:LOCAL_RANK)")
    p.add_argument("--no-progress", action="store_true")
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

    from arvis.cli import load_pipeline, setup_runtime
    from arvis.eval.cli_commands import sampling_settings
    from arvis.eval.jobs import PipelineSampler, SamplingJob, distributed_state, run_sampling_job

    if args.num_samples < 1:
        raise ValueError(f"--num-samples must be >= 1, got {args.num_samples}")
    try:
        torch.device(args.device)
    except RuntimeError:
        raise ValueError(f"--device: {args.device!r} is not a torch device (cpu, cuda, cuda:1…)") from None
    # accelerate joins the process group (gloo on the CPU, NCCL with cuda:LOCAL_RANK per rank) before the
    # thread count is set: it sets its own default when OMP_NUM_THREADS is unset.
    state = distributed_state(args.device)
    dtype = setup_runtime(args)
    rank, world = state.process_index, state.num_processes
    device = state.device if torch.device(args.device).type == "cuda" else args.device
    pipe, defaults, path = load_pipeline(args.model, dtype, device)
    sampling = sampling_settings(args, defaults)
    labels = None
    if args.class_ids:
        labels = [int(x) if x.strip().lstrip("-").isdigit() else x.strip() for x in args.class_ids.split(",")]
    prompts = None
    if args.prompts:
        prompt_file = Path(args.prompts)
        if not prompt_file.is_file():
            raise ValueError(f"--prompts: no such file {args.prompts!r}")
        try:
            text = prompt_file.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"--prompts: {args.prompts!r} could not be read as text ({err})") from None
        prompts = [line.strip() for line in text.splitlines() if line.strip()]
    options = dict(args.option)
    sampler = PipelineSampler(pipe, args.seed, method=args.method, method_options=options, labels=labels,
                              prompts=prompts, **sampling)
    job = SamplingJob(model=str(path), seed=args.seed, num_samples=args.num_samples, method=args.method,
                      method_options=options, sampling=sampling, labels=sampler.labels, prompts=sampler.prompts)
    result = run_sampling_job(sampler, job, args.output, batch_size=args.batch_size, resume=args.resume,
                              progress=not args.no_progress)
    print(json.dumps({"rank": rank, "world_size": world, "written": result.written, "skipped": result.skipped,
                      "replaced": result.replaced, "removed_temporaries": result.removed_temporaries,
                      "manifest": str(result.manifest) if result.manifest else None}))
    state.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
