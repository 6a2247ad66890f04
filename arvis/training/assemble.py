"""Assemble a shipped pipeline folder from trained parts (diffusers layout, fp16 safetensors).

The VQ tokenizer is shared by the pipelines of one data set: each pipeline's ``vqvae`` is a relative
symlink to its tokenizer folder (``arvis/weights/vq-photos``, ``arvis/weights/vq-emoji``) so the weights are
stored once. ``--data`` writes ``evaluation.json`` (``{"data": "emoji"}``), which tells ``arvis fid`` and
``eval/model_card.py`` which held-out images and which evaluation networks the model is judged with. Example::

    python -m arvis.training.assemble --transformer /work/scratch/export-c2i/transformer \\
        --draft /work/scratch/export-draft/transformer --vq arvis/weights/vq-photos \\
        --out arvis/weights/llamagen-c2i-photos --guidance-scale 3.0 --top-k 0
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from arvis.data.sources import DATA_CHOICES, MODEL_DATA_FILE, check_data
from arvis.models.llamagen import LlamaGenTransformer
from arvis.models.text_encoder import WordTextEncoder
from arvis.pipelines import LlamaGenPipeline
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel


def assemble(transformer: str, vq: str, out: str, draft: str | None = None, text_encoder: str | None = None,
             sampling_defaults: dict | None = None, data: str = "photos") -> Path:
    """Write the pipeline folder ``out`` (replacing it atomically) and return its path."""
    out_path = Path(out)
    vq_path = Path(vq).resolve()
    pipe = LlamaGenPipeline(
        transformer=LlamaGenTransformer.from_pretrained(transformer, dtype=torch.float16),
        vqvae=LlamaGenVQModel.from_pretrained(vq, dtype=torch.float16),
        text_encoder=WordTextEncoder.from_pretrained(text_encoder, dtype=torch.float16) if text_encoder else None,
        draft_transformer=LlamaGenTransformer.from_pretrained(draft, dtype=torch.float16) if draft else None,
    )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_path.parent, prefix=f".{out_path.name}.") as tmp:
        staged = Path(tmp) / "pipeline"
        pipe.save_pretrained(staged, safe_serialization=True)
        shutil.rmtree(staged / "vqvae")
        os.symlink(os.path.relpath(vq_path, out_path.resolve()), staged / "vqvae")
        (staged / "sampling_defaults.json").write_text(json.dumps(sampling_defaults or {}, indent=2) + "\n")
        (staged / MODEL_DATA_FILE).write_text(json.dumps({"data": check_data(data)}, indent=2) + "\n")
        if out_path.exists():
            keep = [p for p in ("README.md", "metrics.json", "samples.png") if (out_path / p).exists()]
            for name in keep:  # model cards survive a re-assembly
                shutil.copy2(out_path / name, staged / name)
            shutil.rmtree(out_path)
        staged.replace(out_path)
    return out_path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m arvis.training.assemble", description=__doc__.split("\n\n")[0])
    p.add_argument("--transformer", required=True)
    p.add_argument("--vq", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--draft", default=None)
    p.add_argument("--text-encoder", default=None)
    p.add_argument("--guidance-scale", type=float, default=3.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--data", choices=DATA_CHOICES, default="photos", help="the data set the model was trained on")
    args = p.parse_args(argv)
    path = assemble(args.transformer, args.vq, args.out, args.draft, args.text_encoder,
                    {"guidance_scale": args.guidance_scale, "top_k": args.top_k}, data=args.data)
    loaded = LlamaGenPipeline.from_pretrained(str(path))
    print(f"assembled {path}: components {sorted(k for k, v in loaded.components.items() if v is not None)}")


if __name__ == "__main__":
    main()
