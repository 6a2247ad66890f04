"""Assemble a shipped pipeline folder from trained parts (diffusers layout, fp16 safetensors).

The VQ tokenizer is shared by the pipelines of one data set: each pipeline's ``vqvae`` is a relative
symlink to its tokenizer folder (``arvis/weights/vq-photos``, ``arvis/weights/vq-emoji``) so the weights are
stored once. ``--data`` writes ``evaluation.json`` (``{"data": "emoji"}``), which tells ``arvis fid`` and
``eval/model_card.py`` which held-out images and which evaluation networks the model is judged with. Example::

    python -m arvis.training.assemble --transformer runs/export-c2i/transformer \\
        --draft runs/export-draft/transformer --vq arvis/weights/vq-photos \\
        --out arvis/weights/llamagen-c2i-photos --guidance-scale 3.0 --top-k 0

Components shipped as folders of their own (with their own model cards) are linked the same way:
``--link lowres_transformer=arvis/weights/lowres-c2i-photos --link upsampler=arvis/weights/upsampler-photos``
(multi-scale drafting). Without ``--transformer`` the links are added to the existing pipeline ``--out``.
A transformer folder holding a ``VARTransformer`` gives a ``VARPipeline`` (its ``vqvae`` links to the
multi-scale tokenizer folder, its ``draft_transformer`` is the small VAR).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import torch

from arvis.data.sources import DATA_CHOICES, MODEL_DATA_FILE, check_data
from arvis.hub import pipeline_class
from arvis.models.llamagen import LlamaGenTransformer
from arvis.models.text_encoder import WordTextEncoder
from arvis.models.upsampler import TokenUpsampler
from arvis.pipelines import LlamaGenPipeline
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from arvis.training.common import ship_training_metrics
from arvis.utils.files import atomic_directory, atomic_path

# Optional components a pipeline may link from their own folders, and their classes.
LINKABLE = {"lowres_transformer": LlamaGenTransformer, "upsampler": TokenUpsampler}


def assemble(transformer: str, vq: str, out: str, draft: str | None = None, text_encoder: str | None = None,
             sampling_defaults: dict | None = None, data: str = "photos") -> Path:
    """Write the pipeline folder ``out`` (replacing it atomically) and return its path."""
    out_path = Path(out)
    vq_path = Path(vq).resolve()
    pipe = _pipeline(transformer, vq, draft, text_encoder)
    # Model cards survive a re-assembly.
    with atomic_directory(out_path, keep=("README.md", "metrics.json", "samples.png")) as staged:
        pipe.save_pretrained(staged, safe_serialization=True)
        shutil.rmtree(staged / "vqvae")
        os.symlink(os.path.relpath(vq_path, out_path.resolve()), staged / "vqvae")
        (staged / "sampling_defaults.json").write_text(json.dumps(sampling_defaults or {}, indent=2) + "\n")
        (staged / MODEL_DATA_FILE).write_text(json.dumps({"data": check_data(data)}, indent=2) + "\n")
        # Each trained component keeps its trainer's record (steps, losses, history, command): its model card is
        # built from it. A text encoder is trained with its transformer and shares that record.
        for name, source in (("transformer", transformer), ("draft_transformer", draft)):
            if source:
                ship_training_metrics(source, staged / name / "training_metrics.json")
    return out_path


def link_components(out: str | os.PathLike, links: dict[str, str]) -> Path:
    """Link component folders into the pipeline folder ``out`` (relative symlinks, as ``vqvae``) and register
    them in its ``model_index.json``; a folder whose config names another class is refused."""
    out_path = Path(out)
    index_path = out_path / "model_index.json"
    if not index_path.is_file():
        raise ValueError(f"out: {out_path} is not a pipeline folder (no model_index.json)")
    index = json.loads(index_path.read_text())
    for name, folder in links.items():
        if name not in LINKABLE:
            raise ValueError(f"--link: unknown component {name!r}; linkable components: {sorted(LINKABLE)}")
        cls = LINKABLE[name]
        config = Path(folder) / "config.json"
        found = json.loads(config.read_text()).get("_class_name") if config.is_file() else None
        if found != cls.__name__:
            raise ValueError(f"--link {name}={folder}: expected a {cls.__name__} folder, found {found or 'no config.json'}")
        target = out_path / name
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        os.symlink(os.path.relpath(Path(folder).resolve(), out_path.resolve()), target)
        index[name] = [cls.__module__, cls.__name__]
    with atomic_path(index_path) as tmp:
        tmp.write_text(json.dumps(dict(sorted(index.items())), indent=2) + "\n")
    return out_path


def _pipeline(transformer: str, vq: str, draft: str | None, text_encoder: str | None):
    """The pipeline of the parts (fp16): a VAR pipeline when the transformer folder holds a VARTransformer."""
    kind = json.loads((Path(transformer) / "config.json").read_text()).get("_class_name")
    if kind == "VARTransformer":
        from arvis.models.var import VARTransformer
        from arvis.pipelines import VARPipeline
        from arvis.tokenizers.var_vq import VARVQModel

        if text_encoder:
            raise ValueError("--text-encoder: VAR pipelines are class-conditional")
        return VARPipeline(
            transformer=VARTransformer.from_pretrained(transformer, dtype=torch.float16),
            vqvae=VARVQModel.from_pretrained(vq, dtype=torch.float16),
            draft_transformer=VARTransformer.from_pretrained(draft, dtype=torch.float16) if draft else None,
        )
    return LlamaGenPipeline(
        transformer=LlamaGenTransformer.from_pretrained(transformer, dtype=torch.float16),
        vqvae=LlamaGenVQModel.from_pretrained(vq, dtype=torch.float16),
        text_encoder=WordTextEncoder.from_pretrained(text_encoder, dtype=torch.float16) if text_encoder else None,
        draft_transformer=LlamaGenTransformer.from_pretrained(draft, dtype=torch.float16) if draft else None,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m arvis.training.assemble", description=__doc__.split("\n\n")[0])
    p.add_argument("--transformer", default=None, help="required unless only --link is given")
    p.add_argument("--vq", default=None, help="required with --transformer")
    p.add_argument("--out", required=True)
    p.add_argument("--link", action="append", default=[], metavar="NAME=FOLDER",
                   help=f"link a component folder into the pipeline ({', '.join(sorted(LINKABLE))}); repeatable")
    p.add_argument("--draft", default=None)
    p.add_argument("--text-encoder", default=None)
    p.add_argument("--guidance-scale", type=float, default=3.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--data", choices=DATA_CHOICES, default="photos", help="the data set the model was trained on")
    args = p.parse_args(argv)
    links = dict(item.split("=", 1) for item in args.link if "=" in item)
    if len(links) != len(args.link):
        raise ValueError(f"--link takes NAME=FOLDER, got {args.link}")
    if args.transformer is None:
        if not links:
            raise ValueError("--transformer is required (or give only --link to add components to --out)")
        path = link_components(args.out, links)
    else:
        if args.vq is None:
            raise ValueError("--vq is required with --transformer")
        path = assemble(args.transformer, args.vq, args.out, args.draft, args.text_encoder,
                        {"guidance_scale": args.guidance_scale, "top_k": args.top_k}, data=args.data)
        if links:
            link_components(path, links)
    loaded = pipeline_class(path).from_pretrained(str(path))
    print(f"assembled {path}: components {sorted(k for k, v in loaded.components.items() if v is not None)}")


if __name__ == "__main__":
    main()
