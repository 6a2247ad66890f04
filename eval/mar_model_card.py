"""Model cards of the shipped MAR pairs (masked and causal), from training and evaluation records (a card kind of
``eval/cards.py``; the transformer's config says masked or causal).

    python eval/cards.py --model arvis/weights/mar-emoji --train-metrics <target>/training_metrics.json \
        <draft>/training_metrics.json --assemble-command "python -m arvis.training.train_mar assemble ..."
    python eval/cards.py --model arvis/weights/mar-causal-emoji ...   # the same for the causal pair
    python eval/cards.py --model <a photo pair folder> --grid docs/<folder>-samples.png   # photo pair

``--train-metrics`` (re)writes the folder's ``metrics.json`` (both runs' training records and the assemble
command); the card is then built from it, the folder's ``sampling_defaults.json`` and the records of
``eval/figures.py --suite mar`` (``docs/figures/mar/<pair>/``), and for a one-class-per-emoji pair the naming record of
``eval/naming_card.py`` (``docs/figures/naming/<folder>.json``, with its captioned grid). Nothing is typed in by
hand: a missing record shows as "not measured".
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from figure_runner import fid_slug
from figure_tables import same_weights
from var_model_card import _load, history_text, naming_rows, run_history

from arvis.data.sources import class_names, data_recipe
from arvis.hub import folder_sha256
from arvis.utils.model_card import ModelCard, Section, Training, measured, table

WEIGHTS = Path("arvis/weights")
FIGS = Path("docs/figures/mar")
ALIASES = {"masked": "mar", "causal": "mar-causal"}
PARTS = ("transformer", "draft_transformer")


def _fid(pair: str, method_slug: str, seed: int, sha: str | None) -> dict | None:
    """The FID record of a method and seed, if it was measured on these weights (``sha``: the folder's hash)."""
    for path in sorted((FIGS / pair / "fid").glob(f"{method_slug}-seed{seed}-n*.json")):
        rec = _load(path)
        if isinstance(rec, dict) and same_weights(rec.get("model_sha256"), sha):
            return rec
    return None


def _bench_rows(pair: str, sha: str | None) -> list[dict]:
    """The batch-1 bench rows, if they were measured on these weights (records name the pair by its alias, which
    outlives the weights it held)."""
    recs = _load(FIGS / pair / "bench-b1.json")
    return [r for r in recs if same_weights(r.get("model_sha256"), sha)] if isinstance(recs, list) else []


def pipeline_model_card(pair: str, m: dict, defaults: dict, name: str, vae: str,
                        naming: dict | None = None, *, image_size: int, sha: str | None = None) -> ModelCard:
    """The card of the MAR pair folder ``name`` (``pair``: masked or causal; ``vae``: the VAE folder it links;
    ``image_size``: the transformer's, in pixels)."""
    alias = ALIASES[pair]
    t, d = m["transformer"], m["draft_transformer"]
    tc, dc = t["preset_config"], d["preset_config"]
    names = class_names(tc["data"])
    ex = f'"{names[0]}", "{names[len(names) // 2]}"'
    photos = tc["data"] == "photos"
    what = "crops" if photos else "views"
    ar0, ar1 = _fid(pair, "ar", 0, sha), _fid(pair, "ar", 1, sha)
    noise = abs(ar0["fid"] - ar1["fid"]) if ar0 and ar1 else None
    causal = pair == "causal"
    method = "cspd-exact" if causal else "cspd"
    fast_call = (f'fast = pipe(class_labels=[{ex}], method="cspd-exact", final_std=0.05)   # exact, '
                 'vs method="ar", final_std=0.05' if causal else
                 f'fast = pipe(class_labels=[{ex}], method="cspd")   # published CSpD (lossy)')
    kind = ("the causal raster-order variant of MAR (one token per forward, KV cache; the paper's \"AR, causal, "
            "raster\" row)" if causal else "masked MAR (random order, several tokens per forward)")

    def row(label: str, fn) -> tuple[str, str, str]:
        return label, fn(t), fn(d)

    bench = _bench_rows(pair, sha)
    bench_rows = [(f"`{r['spec']}`", "yes" if r["lossless"] else "no", f"{r['target_forwards']:.1f}",
                   f"{r['latency_s']:.3f}", f"{r['speedup']:.2f}x") for r in bench]
    fid_lines = [f"| `{r['spec']}` (seed 0) | {measured(rec and rec['fid'])} |"
                 for r in bench if r["spec"] != "ar"  # plain AR has its own rows above
                 for rec in [_fid(pair, fid_slug(r["spec"]), 0, sha)]]
    metrics = "\n".join([
        table(("metric (defaults)", "value"), []),
        *([] if photos else [naming_rows(naming)]),
        f"| FID of `ar`, N = {ar0['num_generated'] if ar0 else '–'} (seed 0) | {measured(ar0 and ar0['fid'])} |",
        f"| same, seed 1 (seed-to-seed noise {measured(noise)}) | {measured(ar1 and ar1['fid'])} |",
        f"| real-vs-real floor at the same N | {measured(ar0 and ar0.get('real_vs_real_floor'))} |",
        *fid_lines])
    bench_table = table(("method", "lossless", "target fwd", "latency s / image", "speed-up"),
                        bench_rows or [("not measured", "", "", "", "")])
    naming_command = ("" if photos else f"; naming: `python eval/naming_card.py --model {alias} --samples-dir "
                      f"<scratch>/naming-{alias} --json docs/figures/naming/{name}.json --grid docs/{name}-samples.png`")
    history = (f"\n\nRun history — target: {history_text(t, 'schedules were changed to fit sessions')}; draft: "
               f"{history_text(d, 'schedules were changed to fit sessions')}." if t.get("runs") or d.get("runs") else "")
    grid = (f"Sample grid (one sample per class, captioned with its name): `{naming['grid']}`."
            if naming and naming.get("grid") else f"Samples (plain decoding, defaults): `docs/{name}-samples.png`.")
    return ModelCard(
        title=f"{name}: arvis's MAR pair ({'causal raster variant' if causal else 'masked'})",
        summary=f"""A `MARPipeline` folder: {kind}. A class-conditional MAR transformer and its diffusion head (`transformer`,
`head`: the target), a smaller MAR of the same kind (`draft_transformer`, `draft_head`: the draft of `{method}`) and
the KL VAE (`vae`, a relative link to `../{vae}`). Alias `{alias}` in `arvis generate|bench|fid --model
{alias}` and the demo.""",
        usage=f"""import torch
from arvis.pipelines import MARPipeline
pipe = MARPipeline.from_pretrained("{alias}", dtype=torch.float32)     # fp16 files; fp32 is faster on a CPU
out = pipe(class_labels=[{ex}], generator=[torch.Generator().manual_seed(i) for i in range(2)])
{fast_call}""",
        usage_note=f"Default sampling (`sampling_defaults.json`): {json.dumps(defaults)}.",
        architecture=Section("Architecture", table(("", "target", "draft"), [
            row("width / encoder + decoder blocks / heads", lambda p: f"{p['preset_config']['width']} / {p['preset_config']['depth']} + {p['preset_config']['depth']} / {p['preset_config']['num_heads']}"),
            row("diffusion head width / blocks / sampling steps", lambda p: f"{p['preset_config']['head_width']} / {p['preset_config']['head_depth']} / {p['preset_config']['sampling_steps']}"),
            row("parameters (transformer + head)", lambda p: f"{p['params']:,} + {p['head_params']:,}"),
            row("fp16 safetensors", lambda p: f"{p['safetensors_mb']['transformer']:.1f} + {p['safetensors_mb']['head']:.1f} MB")])
            + f"""

`arvis.models.mar.MARTransformer` (official MAR state-dict keys; buffer of {tc['buffer_size']} class-embedding
positions, null class for guidance) and `arvis.models.diffusion_head.MARDiffusionHead` (MAR's `SimpleMLPAdaLN`,
trained on IDDPM's cosine schedule, sampled on the noise levels of the linear one — the heads' `sampling_schedule`,
because the cosine schedule's first step multiplies their ε error by hundreds: docs/mar.md — with DDPM and MAR's
temperature); tokens are the VAE's 8x8 grid of 16-channel latents of a {image_size} px image."""),
        data=Section("Data", f"""{data_recipe(tc['data'], image_size)} {tc['num_train']:,} training {what} (seed {tc['data_seed']}) at {image_size} px, encoded once by
`{vae}` (posterior moments cached, a fresh posterior sample every step); {tc['num_val']} held-out {what} for
the validation loss. {'Class = the photo.' if photos else f'{len(names)} classes.'}"""),
        training=Training([t["command"], d["command"], m["assemble_command"]], f"""MAR's diffusion loss ({'teacher forcing, loss on every token' if causal else "random order, MAR's truncated-normal masking ratio, loss on the masked tokens"};
×{tc['diffusion_batch_mul']} head batch), {tc['label_drop_prob']:.0%} class dropout to the null class, AdamW (0.9, 0.95),
warm-up + cosine, EMA {tc['ema_decay']}; the better of raw and EMA weights on validation loss is exported.

{table(("", "target", "draft"), [
    row('steps (batch ' + str(tc['batch_size']) + ')', lambda p: str(p['steps'])),
    row('wall time (h, 1 thread)', lambda p: f"{p['train_hours']:.2f}"),
    row('final training loss', lambda p: f"{p['final_train_loss']:.4f}"),
    row('validation loss (raw / EMA)', lambda p: f"{p['validation_loss_raw']:.4f} / {p['validation_loss_ema']:.4f}"),
    row('exported weights', lambda p: p['exported_weights'])])}

(The draft trains with the same recipe at {dc['width']} width; its steps and losses are above.){history}"""),
        evaluation=Section("Evaluation", f"""Commands: `python eval/figures.py --suite mar` (every figure: docs/figures/mar.md). FID with the shipped domain network
against held-out {what}{naming_command}.

{metrics}

Batch 1 (fp32, 1 thread; `target fwd` = transformer forwards per image, a CFG pair once):

{bench_table}

{grid}"""))


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


# ---------------------------------------------------------------------------------------------- eval/cards.py
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a MAR pair's card (``python eval/cards.py --model FOLDER``)."""
    parser.add_argument("--train-metrics", nargs=2, default=None, metavar=("TARGET", "DRAFT"),
                        help="the two runs' training_metrics.json: (re)write the folder's metrics.json first")
    parser.add_argument("--assemble-command", default="", help="recorded in metrics.json with --train-metrics")
    parser.add_argument("--train-logs", nargs=2, default=None, metavar=("TARGET", "DRAFT"),
                        help="the two runs' scratch train.log, with --train-metrics: their starts and resumes")
    parser.add_argument("--grid", default=None, help="also write an uncaptioned sample grid PNG here (photo pairs)")


def pipeline_card(folder: Path, args: argparse.Namespace) -> ModelCard:
    """The card of a MAR pair folder (masked or causal, from its transformer's config) from its records."""
    if args.train_metrics:
        merged: dict[str, Any] = {"assemble_command": args.assemble_command}
        for part, path in zip(PARTS, args.train_metrics, strict=True):
            rec = _load(Path(path))
            if not isinstance(rec, dict):
                raise ValueError(f"--train-metrics: cannot read {path}")
            rec.pop("history", None)  # the per-step log stays in the run's scratch folder
            if args.train_logs:
                log = Path(args.train_logs[PARTS.index(part)]).read_text()
                rec["runs"] = run_history(log, int(rec["preset_config"]["steps"]))
            merged[part] = rec
        (folder / "metrics.json").write_text(json.dumps(merged, indent=2) + "\n")
    metrics = _load(folder / "metrics.json")
    if not isinstance(metrics, dict):
        raise SystemExit(f"{folder}/metrics.json: missing; pass --train-metrics first")
    config = json.loads((folder / "transformer" / "config.json").read_text())
    causal = bool(config.get("causal", False))
    vae = Path(os.readlink(folder / "vae")).name if (folder / "vae").is_symlink() else "mar-vae-photos"
    if args.grid:
        write_grid(folder.name, Path(args.grid))
    return pipeline_model_card("causal" if causal else "masked", metrics, _load(folder / "sampling_defaults.json") or {},
                               folder.name, vae, _load(Path("docs/figures/naming") / f"{folder.name}.json"),
                               image_size=int(config["img_size"]), sha=folder_sha256(folder))
