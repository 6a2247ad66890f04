"""Model cards of the shipped MAR pairs (masked and causal), written from training and evaluation records.

    python eval/mar_model_card.py --pair masked --train-metrics <target>/training_metrics.json \
        <draft>/training_metrics.json --assemble-command "python -m arvis.training.train_mar assemble ..."
    python eval/mar_model_card.py --pair causal ...            # the same for arvis/weights/mar-causal-emoji
    python eval/mar_model_card.py --pair masked --folder mar-photos --grid docs/mar-photos-samples.png  # photo pair

``--train-metrics`` (re)writes the folder's ``metrics.json`` (both runs' training records and the assemble
command); the card is then built from it, the folder's ``sampling_defaults.json`` and the records of
``eval/mar_figures.py`` (``docs/figures/mar/<pair>/``), and for a one-class-per-emoji pair the naming record of
``eval/naming_card.py`` (``docs/figures/naming/<folder>.json``, with its captioned grid). Nothing is typed in by
hand: a missing record shows as "not measured".
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from figures import fid_slug
from var_model_card import _f, _load, naming_rows

from arvis.data.sources import class_names, data_recipe

WEIGHTS = Path("arvis/weights")
FIGS = Path("docs/figures/mar")
FOLDERS = {"masked": "mar-emoji", "causal": "mar-causal-emoji"}  # the shipped pairs (--folder for another)
ALIASES = {"masked": "mar", "causal": "mar-causal"}
PARTS = ("transformer", "draft_transformer")


def _fid(pair: str, method_slug: str, seed: int) -> dict | None:
    for path in sorted((FIGS / pair / "fid").glob(f"{method_slug}-seed{seed}-n*.json")):
        return _load(path)
    return None


def _bench_rows(pair: str) -> list[dict]:
    recs = _load(FIGS / pair / "bench-b1.json")
    return recs if isinstance(recs, list) else []


def pipeline_card(pair: str, m: dict, defaults: dict, name: str, vae: str, naming: dict | None = None) -> str:
    alias = ALIASES[pair]
    t, d = m["transformer"], m["draft_transformer"]
    tc, dc = t["preset_config"], d["preset_config"]
    names = class_names(tc["data"])
    ex = f'"{names[0]}", "{names[len(names) // 2]}"'
    photos = tc["data"] == "photos"
    what = "crops" if photos else "views"
    ar0, ar1 = _fid(pair, "ar", 0), _fid(pair, "ar", 1)
    noise = abs(ar0["fid"] - ar1["fid"]) if ar0 and ar1 else None
    causal = pair == "causal"
    method = "cspd-exact" if causal else "cspd"
    fast_call = (f'fast = pipe(class_labels=[{ex}], method="cspd-exact", final_std=0.05)   # exact, '
                 'vs method="ar", final_std=0.05' if causal else
                 f'fast = pipe(class_labels=[{ex}], method="cspd")   # published CSpD (lossy)')
    kind = ("the causal raster-order variant of MAR (one token per forward, KV cache; the paper's \"AR, causal, "
            "raster\" row)" if causal else "masked MAR (random order, several tokens per forward)")

    def row(label: str, fn) -> str:
        return f"| {label} | {fn(t)} | {fn(d)} |"

    bench = _bench_rows(pair)
    bench_lines = [f"| `{r['spec']}` | {'yes' if r['lossless'] else 'no'} | {r['target_forwards']:.1f} | "
                   f"{r['latency_s']:.3f} | {r['speedup']:.2f}x |" for r in bench]
    fid_lines = []
    for r in bench:
        rec = _fid(pair, fid_slug(r["spec"]), 0)
        fid_lines.append(f"| `{r['spec']}` (seed 0) | {_f(rec and rec['fid'])} |")
    return f"""# {name}: arvis's MAR pair ({'causal raster variant' if causal else 'masked'})

A `MARPipeline` folder: {kind}. A class-conditional MAR transformer and its diffusion head (`transformer`,
`head`: the target), a smaller MAR of the same kind (`draft_transformer`, `draft_head`: the draft of `{method}`) and
the KL VAE (`vae`, a relative link to `../{vae}`). Alias `{alias}` in `arvis generate|bench|fid --model
{alias}` and the demo.

```python
import torch
from arvis.pipelines import MARPipeline
pipe = MARPipeline.from_pretrained("{alias}", dtype=torch.float32)     # fp16 files; fp32 is faster on a CPU
out = pipe(class_labels=[{ex}], generator=[torch.Generator().manual_seed(i) for i in range(2)])
{fast_call}
```

Default sampling (`sampling_defaults.json`): {json.dumps(defaults)}.

## Architecture
| | target | draft |
|---|---|---|
{row('width / encoder + decoder blocks / heads', lambda p: f"{p['preset_config']['width']} / {p['preset_config']['depth']} + {p['preset_config']['depth']} / {p['preset_config']['num_heads']}")}
{row('diffusion head width / blocks / sampling steps', lambda p: f"{p['preset_config']['head_width']} / {p['preset_config']['head_depth']} / {p['preset_config']['sampling_steps']}")}
{row('parameters (transformer + head)', lambda p: f"{p['params']:,} + {p['head_params']:,}")}
{row('fp16 safetensors', lambda p: f"{p['safetensors_mb']['transformer']:.1f} + {p['safetensors_mb']['head']:.1f} MB")}

`arvis.models.mar.MARTransformer` (official MAR state-dict keys; buffer of {tc['buffer_size']} class-embedding
positions, null class for guidance) and `arvis.models.diffusion_head.MARDiffusionHead` (MAR's `SimpleMLPAdaLN`,
trained on IDDPM's cosine schedule, sampled on the noise levels of the linear one — the heads' `sampling_schedule`,
because the cosine schedule's first step multiplies their ε error by hundreds: docs/mar.md — with DDPM and MAR's
temperature); tokens are the VAE's 8x8 grid of 16-channel latents of a 128 px image.

## Data
{data_recipe(tc['data'], 128)} {tc['num_train']:,} training {what} (seed {tc['data_seed']}) at 128 px, encoded once by
`{vae}` (posterior moments cached, a fresh posterior sample every step); {tc['num_val']} held-out {what} for
the validation loss. {'Class = the photo.' if photos else f'{len(names)} classes.'}

## Training
```
{t['command']}
{d['command']}
{m['assemble_command']}
```
MAR's diffusion loss ({'teacher forcing, loss on every token' if causal else "random order, MAR's truncated-normal masking ratio, loss on the masked tokens"};
×{tc['diffusion_batch_mul']} head batch), {tc['label_drop_prob']:.0%} class dropout to the null class, AdamW (0.9, 0.95),
warm-up + cosine, EMA {tc['ema_decay']}; the better of raw and EMA weights on validation loss is exported.

| | target | draft |
|---|---|---|
{row('steps (batch ' + str(tc['batch_size']) + ')', lambda p: str(p['steps']))}
{row('wall time (h, 1 thread)', lambda p: f"{p['train_hours']:.2f}")}
{row('final training loss', lambda p: f"{p['final_train_loss']:.4f}")}
{row('validation loss (raw / EMA)', lambda p: f"{p['validation_loss_raw']:.4f} / {p['validation_loss_ema']:.4f}")}
{row('exported weights', lambda p: p['exported_weights'])}

(The draft trains with the same recipe at {dc['width']} width; its steps and losses are above.)

## Evaluation
Commands: `python eval/mar_figures.py` (every figure: docs/figures/mar.md). FID with the shipped domain network
against held-out {what}{'' if photos else f"; naming: `python eval/naming_card.py --model {alias} --samples-dir <scratch>/naming-{alias} --json docs/figures/naming/{name}.json --grid docs/{name}-samples.png`"}.

| metric (defaults) | value |
|---|---|
{'' if photos else naming_rows(naming) + chr(10)}| FID of `ar`, N = {ar0['num_generated'] if ar0 else '–'} (seed 0) | {_f(ar0 and ar0['fid'])} |
| same, seed 1 (seed-to-seed noise {_f(noise)}) | {_f(ar1 and ar1['fid'])} |
| real-vs-real floor at the same N | {_f(ar0 and ar0.get('real_vs_real_floor'))} |
{chr(10).join(line for line in fid_lines if not line.startswith('| `ar`'))}

Batch 1 (fp32, 1 thread; `target fwd` = transformer forwards per image, a CFG pair once):

| method | lossless | target fwd | latency s / image | speed-up |
|---|---|---|---|---|
{chr(10).join(bench_lines) if bench_lines else '| not measured | | | | |'}

{f"Sample grid (one sample per class, captioned with its name): `{naming['grid']}`." if naming and naming.get('grid') else f"Samples (plain decoding, defaults): `docs/{name}-samples.png`."}
"""


def write_grid(folder: str, path: Path, per_class: int = 1) -> None:
    import numpy as np
    import torch
    from PIL import Image

    from arvis.pipelines import MARPipeline

    pipe = MARPipeline.from_pretrained(str(WEIGHTS / folder), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    classes = list(range(pipe.transformer.num_classes))
    rows = []
    for k in range(per_class):
        out = pipe(class_labels=classes, generator=[torch.Generator().manual_seed(1000 * k + c) for c in classes],
                   output_type="np")
        images = list((out.images * 255).round().astype(np.uint8))
        half = (len(images) + 1) // 2  # two rows of classes: the grid stays readable
        images += [np.full_like(images[0], 255)] * (2 * half - len(images))
        rows += [np.concatenate(images[:half], axis=1), np.concatenate(images[half:], axis=1)]
    Image.fromarray(np.concatenate(rows, axis=0)).save(path)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pair", choices=sorted(FOLDERS), required=True)
    p.add_argument("--train-metrics", nargs=2, default=None, metavar=("TARGET", "DRAFT"),
                   help="the two runs' training_metrics.json: (re)write the folder's metrics.json")
    p.add_argument("--assemble-command", default="", help="recorded in metrics.json with --train-metrics")
    p.add_argument("--folder", default=None, help="the pipeline folder under arvis/weights (default: the shipped pair)")
    p.add_argument("--grid", default=None, help="also write an uncaptioned sample grid PNG here (photo pairs)")
    args = p.parse_args(argv)
    name = args.folder or FOLDERS[args.pair]
    folder = WEIGHTS / name
    if args.train_metrics:
        merged: dict[str, Any] = {"assemble_command": args.assemble_command}
        for name, path in zip(PARTS, args.train_metrics, strict=True):
            rec = _load(Path(path))
            if not isinstance(rec, dict):
                raise ValueError(f"--train-metrics: cannot read {path}")
            rec.pop("history", None)  # the per-step log stays in the run's scratch folder
            merged[name] = rec
        (folder / "metrics.json").write_text(json.dumps(merged, indent=2) + "\n")
    metrics = _load(folder / "metrics.json")
    if not isinstance(metrics, dict):
        raise SystemExit(f"{folder}/metrics.json: missing; pass --train-metrics first")
    defaults = _load(folder / "sampling_defaults.json") or {}
    vae = Path(os.readlink(folder / "vae")).name if (folder / "vae").is_symlink() else "mar-vae-photos"
    naming = _load(Path("docs/figures/naming") / f"{name}.json")
    (folder / "README.md").write_text(pipeline_card(args.pair, metrics, defaults, name, vae, naming))
    if args.grid:
        write_grid(name, Path(args.grid))
    print(f"wrote {folder}/README.md")


if __name__ == "__main__":
    main()
