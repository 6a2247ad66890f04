"""Side by side with FoundationVision/LlamaGen's own code on the same weights: logits and AR speed.

arvis does not contain or vendor LlamaGen's code. Point this script at a checkout of the reference
repository (``--reference-repo``, the folder holding ``autoregressive/`` and ``utils/``); it exports
an arvis model in the official layout, loads it with the reference ``Transformer``, and checks:

1. weight compatibility — the reference ``load_state_dict(strict=True)`` accepts the export and its
   teacher-forced logits equal arvis's (max |Δ| printed; fp32);
2. speed — the reference ``generate()`` against arvis's plain AR (``method="ar"``) with the same
   weights, batch, CFG scale, top-k and temperature, interleaved repeats, median wall time.

Example::

    python eval/compare_llamagen_reference.py --reference-repo /tmp/llamagen-ref --model c2i --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from reference_common import (
    add_to_path,
    checked_reference_repo,
    interleaved_times,
    reference_transformer,
    teacher_forced_max_diff,
    write_record,
)


def load_reference(repo: Path):
    repo = checked_reference_repo(repo, ("autoregressive/models/gpt.py", "autoregressive/models/generate.py"),
                                  "FoundationVision/LlamaGen")
    add_to_path(repo)
    from autoregressive.models import generate as ref_generate  # noqa: PLC0415
    from autoregressive.models import gpt as ref_gpt  # noqa: PLC0415

    return ref_gpt, ref_generate


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference-repo", required=True, type=Path)
    p.add_argument("--model", default="c2i", help="arvis model alias or pipeline folder (class-conditional)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--guidance-scale", type=float, default=3.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: every core)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from arvis.eval.bench import available_cores

    torch.set_num_threads(args.threads or available_cores())

    from arvis.engine.sampling import SamplingConfig
    from arvis.hub import load_pipeline
    from arvis.methods import decode
    from arvis.models.protocol import Condition

    ref_gpt, ref_generate = load_reference(args.reference_repo)
    pipe, _, _ = load_pipeline(args.model, torch.float32, "cpu")
    model = pipe.transformer.float().eval()
    cfg = model.config
    ref = reference_transformer(ref_gpt, model)

    B, N = args.batch, model.layout.num_tokens
    max_diff = teacher_forced_max_diff(model, ref, B)
    labels = torch.randint(0, cfg.num_classes, (B,), generator=torch.Generator().manual_seed(0))

    sampling = SamplingConfig(guidance_scale=args.guidance_scale, top_k=args.top_k)
    gens = lambda: [torch.Generator().manual_seed(s) for s in range(B)]  # noqa: E731

    def run_ours(_round: int):
        decode(model, Condition(class_labels=labels), sampling, "ar", gens())

    def run_ref(_round: int):
        with torch.no_grad():
            ref_generate.generate(ref, labels, N, cfg_scale=args.guidance_scale, top_k=args.top_k,
                                  temperature=1.0, top_p=1.0, sample_logits=True)

    times, _ = interleaved_times({"arvis": run_ours, "reference": run_ref}, args.repeats)
    result = {"model": args.model, "batch": B, "guidance_scale": args.guidance_scale, "top_k": args.top_k,
              "threads": torch.get_num_threads(), "max_abs_logit_diff": max_diff,
              "arvis_ar_s": statistics.median(times["arvis"]),
              "reference_generate_s": statistics.median(times["reference"])}
    result["arvis_speedup_over_reference"] = result["reference_generate_s"] / result["arvis_ar_s"]
    write_record(result, args.json)
    return result


if __name__ == "__main__":
    main()
