"""The VAR page (docs/figures/var.md, ``--suite var``): next-scale decoding's methods on the shipped pair.

Jobs (records under ``docs/figures/var/``):

- ``layout``: the shipped transformer and tokenizer written in the official layout and read back
  (``torch.load(weights_only=True)``): key sets, tensors and logits compared;
- ``reference-b1`` / ``reference-b8``: ``eval/compare_var_reference.py`` against a FoundationVision/VAR checkout
  (tokenizer ids and reconstructions, logits, same-noise tokens, official sampler vs arvis timed
  interleaved); only with ``--reference-repo`` (and ``--reference-commit``);
- ``var/bench-b1`` / ``var/bench-b8``: ``arvis bench --model var`` over every method (latency speedup over plain
  next-scale decoding, median of interleaved rounds);
- ``timeline-b1`` / ``timeline-b8``: where the time goes — per scale, forward time and positions evaluated,
  for every method (median of interleaved rounds), and the plot ``var/per-scale.png``;
- ``fid/*``: ``arvis fid --model var`` for every method (the domain network of the model's data, held-out images
  at the model's resolution) and the baseline with a second seed (seed-to-seed noise) and the real-vs-real floor;
- ``acceptance``: ``eval/var_acceptance.py`` (would speculative verification of drafted scales pay?).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from figure_runner import (
    Bench,
    Declaration,
    Fid,
    Option,
    Page,
    Script,
    Stage,
    Suite,
    current_model_sha256,
    load_record,
    record_model_sha256,
)
from figure_tables import fids_by_seed

MODEL = "var"
# Every method once, plus the compositions the target asks about (≥ 1.7x at FID within seed noise).
METHODS = ["ar", "code:draft_scales=4", "code:draft_scales=5", "cfg-cutoff:guided_scales=3",
           "cfg-cutoff:guided_scales=5", "fastvar:prune_ratios=[0.5]", "fastvar:prune_ratios=[0.75]",
           "code:draft_scales=4,guided_scales=5", "code:draft_scales=4,guided_scales=4",
           "code:draft_scales=3,guided_scales=3"]
ANCHORS = [
    "CoDe (Chen et al., CVPR 2025): VAR-d30 drafts, VAR-d16 refines; 1.7x at FID 1.95 → 1.98 (8 + 2 scales), "
    "2.9x at FID 2.27 (6 + 4), ImageNet 256, GPU.",
    "FastVAR (Guo et al., ICCV 2025): 2.7x over FlashAttention-accelerated VAR-family models at high resolution, "
    "< 1% quality drop (pruning 50% / 75% of the last two scales at 1024 px).",
]


def var_jobs(s: argparse.Namespace) -> list[Declaration]:
    found: list[Declaration] = [Stage("layout", "var/layout.json", lambda s: task_layout(s.out, s.model))]
    for b in (1, 8) if s.reference_repo else ():
        record = f"var/reference-b{b}.json"
        found.append(Script(f"reference-b{b}", record, (
            "eval/compare_var_reference.py", "--reference-repo", str(s.reference_repo), "--reference-commit",
            s.reference_commit or "unknown", "--model", s.model, "--batch", str(b), "--json", str(s.out / record))))
    found += [Bench("var/bench-b1", tuple(METHODS), samples=8), Bench("var/bench-b8", tuple(METHODS), samples=16, batch=8)]
    found += [Stage(f"timeline-b{b}", f"var/timeline-b{b}.json", lambda s, b=b: task_timeline(s.out, b, model_name=s.model))
              for b in (1, 8)]
    # One thread: on a shared two-core machine a second thread stalls (docs/evaluation.md).
    found += [Fid("ar", floor=True, folder="var", threads=1), Fid("ar", seed=1, folder="var", threads=1),
              *(Fid(spec, folder="var", threads=1) for spec in METHODS if spec != "ar")]
    found.append(Script("acceptance", "var/acceptance.json", ("eval/var_acceptance.py", "--model", s.model, "--samples",
                                                             "64", "--json", str(s.out / "var" / "acceptance.json"))))
    return found


def _verdict(recs: list[dict], fids: dict, ar_fids: dict, noise: float | None) -> str:
    """The target (a method at >= 1.7x latency whose FID is within the baseline's seed noise), judged from the
    records. "Within" is one-sided: a method may not be worse than ``ar`` by more than the seed-to-seed |ΔFID|;
    a method better by more than the noise counts too, and is named as such."""
    if noise is None or 0 not in ar_fids:
        return "Target (>= 1.7x at FID within seed noise): not judged yet (the baseline's two FID seeds are missing)."

    def delta(r: dict) -> float | None:
        f = fids.get((r["spec"], 0))
        return None if f is None else f["fid"] - ar_fids[0]["fid"]

    ok = [r for r in recs if r["spec"] != "ar" and (d := delta(r)) is not None and d <= noise]
    head = f"Target (>= 1.7x with ΔFID <= the seed noise {noise:.2f}, i.e. no worse than `ar` beyond its noise)"
    if not ok:
        return f"{head}: no method measured so far qualifies."
    best = max(ok, key=lambda r: r["speedup"])
    d = delta(best)
    side = "within the noise" if abs(d) <= noise else "better than `ar` by more than the noise"
    return (f"{head}: **{'met' if best['speedup'] >= 1.7 else 'missed'}** — the fastest qualifying method is "
            f"`{best['spec']}` at {best['speedup']:.2f}x (ΔFID {d:+.2f}, {side}).")


# ----------------------------------------------------------------------------- stages (run by the suite's command)
def task_layout(out: Path, model_name: str = MODEL) -> None:
    """Official layout round trip of the shipped transformer, draft and tokenizer."""
    import tempfile

    import torch

    from arvis.eval.files import write_json_atomic
    from arvis.hub import load_pipeline
    from arvis.models.var import export_var_checkpoint, load_var_checkpoint, official_state_dict
    from arvis.tokenizers.var_vq import VARVQModel

    pipe, _, loaded = load_pipeline(model_name, torch.float32, "cpu")
    record: dict = loaded.record()
    with tempfile.TemporaryDirectory() as tmp:
        for name, component in (("transformer", pipe.transformer), ("draft_transformer", pipe.draft_transformer)):
            model = component.float()
            path = Path(tmp) / f"{name}.pth"
            export_var_checkpoint(model, path)
            raw = torch.load(path, weights_only=True)
            back = load_var_checkpoint(path)
            x = torch.randn(2, model.scale_layout.num_tokens - 1, model.config.Cvae, generator=torch.Generator().manual_seed(0))
            labels = torch.tensor([0, 1])
            with torch.no_grad():
                diff = float((back(labels, x) - model(labels, x)).abs().max())
            again = Path(tmp) / f"{name}-again.pth"
            export_var_checkpoint(back, again)
            raw2 = torch.load(again, weights_only=True)
            record[name] = {"keys": len(raw), "keys_equal_official": set(raw) == set(official_state_dict(model)),
                            "rewrite_identical": set(raw2) == set(raw) and all(torch.equal(raw[k], raw2[k]) for k in raw),
                            "max_abs_logit_diff_after_reload": diff}
        vq = pipe.vqvae.float()
        path = Path(tmp) / "vae.pth"
        torch.save(vq.state_dict(), path)
        sd = torch.load(path, weights_only=True)
        vq2 = VARVQModel(**{k: v for k, v in vq.config.items() if not k.startswith("_")})
        vq2.load_state_dict(sd, strict=True)
        codes = torch.randint(0, vq.codebook_size, (2, vq.num_tokens), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            diff = float((vq2.decode_codes(codes) - vq.decode_codes(codes)).abs().max())
        record["vqvae"] = {"keys": len(sd), "max_abs_decode_diff_after_reload": diff}
    write_json_atomic(out / "var" / "layout.json", record)


def task_timeline(out: Path, batch: int, repeats: int = 5, model_name: str = MODEL) -> None:
    """Per scale, median forward time and positions evaluated, for every method (interleaved rounds)."""
    import torch

    from arvis.eval.bench import parse_method_specs
    from arvis.eval.files import write_json_atomic
    from arvis.eval.jobs import image_generator
    from arvis.eval.provenance import provenance
    from arvis.hub import load_pipeline

    torch.set_num_threads(1)
    pipe, _, loaded = load_pipeline(model_name, torch.float32, "cpu")
    sampling = pipe.sampling_config()  # the folder's defaults, VAR's guidance rule
    specs = parse_method_specs(METHODS)
    methods = {s.label: pipe.build_method(s.name, **s.options_dict) for s in specs}
    labels = torch.arange(batch) % pipe.transformer.num_classes
    runs: dict[str, list[dict]] = {s.label: [] for s in specs}
    for r in range(repeats + 1):
        for s in specs:
            _, stats = pipe.decode(labels, sampling, methods[s.label], [image_generator(0, i) for i in range(batch)])
            if r:  # the first round warms up
                runs[s.label].append(stats.samples[0].extra | {"latency_s": stats.latency_s})
    record = {**loaded.record(), "batch": batch, "repeats": repeats, "sampling": {"guidance_scale": sampling.guidance_scale,
                                                                              "top_k": sampling.top_k},
              "patch_nums": list(pipe.transformer.scale_layout.patch_nums), **provenance("cpu", torch.float32),
              "methods": {}}
    for label, rounds in runs.items():
        first = rounds[0]
        record["methods"][label] = {
            "scale_model": first["scale_model"], "scale_rows": first["scale_rows"],
            "scale_positions": first["scale_positions"],
            "scale_ms": [statistics.median(r["scale_ms"][i] for r in rounds) for i in range(len(first["scale_ms"]))],
            "latency_s": statistics.median(r["latency_s"] for r in rounds),
        }
    write_json_atomic(out / "var" / f"timeline-b{batch}.json", record)


# ----------------------------------------------------------------------------- report
def plot_timeline(page: Page) -> list[Path]:
    """var/per-scale.png: forward time and positions per scale of every method, from the timeline records."""
    out = page.out
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for b in (1, 8) if isinstance(r := _record(page, f"timeline-b{b}.json"), dict)]
    if not recs:
        return []
    fig, axes = plt.subplots(2, len(recs), figsize=(7 * len(recs), 7.5), squeeze=False)
    colors = plt.get_cmap("tab10").colors
    for col, rec in enumerate(recs):
        labels = list(rec["methods"])
        width = 0.8 / len(labels)
        for k, label in enumerate(labels):
            m = rec["methods"][label]
            xs = [i + k * width for i in range(len(m["scale_ms"]))]
            hatches = ["//" if who == "draft" else "" for who in m["scale_model"]]
            heights = (m["scale_ms"], [p * r for p, r in zip(m["scale_positions"], m["scale_rows"], strict=True)])
            for row in (0, 1):
                bars = axes[row][col].bar(xs, heights[row], width, color=colors[k % 10], edgecolor="black",
                                          linewidth=0.3, label=label if row == 0 else None)
                for bar, hatch in zip(bars, hatches, strict=True):
                    bar.set_hatch(hatch)
        for row, title in ((0, "time per scale step (ms, median)"), (1, "positions evaluated x rows")):
            ax = axes[row][col]
            ax.set_title(f"batch {rec['batch']}: {title}", fontsize=9)
            ax.set_xticks([i + 0.4 for i in range(len(rec["patch_nums"]))])
            ax.set_xticklabels([f"{p}x{p}" for p in rec["patch_nums"]])
        axes[0][col].legend(fontsize=6, loc="upper left")
    fig.text(0.01, 0.005, "hatched: the small (draft) model's steps; plain: the large (target) model's", fontsize=8)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    path = out / "var" / "per-scale.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _measured_here(page: Page, record: Any) -> bool:
    """Whether a record was measured on the weights the page's model names now (its ``model_sha256``; a bench
    record's first row). A record naming no weights, or others, is left out: a replaced model's figures never
    stand under its successor's name."""
    current = current_model_sha256(page.settings.model)
    return current is not None and record_model_sha256(record) == current


def _record(page: Page, name: str) -> Any:
    """The record ``var/<name>`` when it was measured on the page's model now, else ``None``."""
    record = load_record(page.out / "var" / name)
    return record if _measured_here(page, record) else None


def _left_out(page: Page) -> list[str]:
    """The page's jobs whose record exists but was measured on other weights (or names none)."""
    return [job.name for job in page.jobs if job.output.exists() and not _measured_here(page, load_record(job.output))]


def _model_words(page: Page) -> str:
    """Which weights the page's figures were measured on: the model's folder now (each record shown names its
    content hash), and the records left out because they were measured on other weights."""
    from arvis.hub import SHIPPED_PIPELINES, model_capabilities

    alias = page.settings.model
    folder = SHIPPED_PIPELINES.get(alias, alias)
    where = f"`arvis/weights/{folder}`" if alias in SHIPPED_PIPELINES else f"`{alias}`"
    classes = model_capabilities(alias).num_classes
    words = (f"The model is the pair `{alias}` ({where}, {classes} classes; see its model card): every figure below "
             f"comes from a record measured on these weights (content hash `{current_model_sha256(alias)}`)")
    stale = _left_out(page)
    if stale:
        words += (f"; the records of these jobs were measured on other weights and are left out until they run "
                  f"again (`--force`): {', '.join(f'`{s}`' for s in stale)}")
    return words


def _not_run(job: str, timed: bool = False) -> str:
    how = f"`python eval/figures.py --suite var --only {job}`"
    return f"(not measured on this model yet: {how}" + (", timed: run it on an otherwise idle machine)" if timed else ")")


def var_page(page: Page) -> list[str]:
    """docs/figures/var.md from the records under ``var/`` measured on the page's model."""
    fids = {key: rec for key, rec in fids_by_seed(page.out / "var").items() if _measured_here(page, rec)}
    lines = ["# Figures: VAR (next-scale decoding)", "",
             "Generated by `python eval/figures.py --suite var` from the JSON records in `var/` (`--list` prints every "
             f"command; `--reference-repo` adds the parity records). {_model_words(page)}. The math is in "
             "[../var.md](../var.md).",
             ""]
    layout = _record(page, "layout.json")
    lines += ["## Official layout round trip", ""]
    if isinstance(layout, dict):
        lines += ["| part | keys | keys = official | rewrite identical | max |Δ| after reload |", "|---|---|---|---|---|"]
        for name in ("transformer", "draft_transformer"):
            r = layout[name]
            lines.append(f"| {name} | {r['keys']} | {r['keys_equal_official']} | {r['rewrite_identical']} | "
                         f"{r['max_abs_logit_diff_after_reload']:.1e} (logits) |")
        lines.append(f"| vqvae | {layout['vqvae']['keys']} | (its state dict is the official one) | – | "
                     f"{layout['vqvae']['max_abs_decode_diff_after_reload']:.1e} (pixels) |")
    else:
        lines.append(_not_run("layout"))
    lines += ["", "## Parity with the official code and speed against the official sampler", ""]
    refs = [r for b in (1, 8) if isinstance(r := _record(page, f"reference-b{b}.json"), dict)]
    if refs:
        lines += ["| batch | tokenizer ids identical | max |Δ| reconstruction | max |Δ| logits (fp32) | same-noise token "
                  "mismatches | official `autoregressive_infer_cfg` s | arvis `ar` s | arvis speed-up |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in refs:
            lines.append(f"| {r['batch']} | {r['tokenizer_ids_identical']} | {r['max_abs_reconstruction_diff']:.1e} | "
                         f"{r['max_abs_logit_diff']:.1e} | {r['same_noise_token_mismatches']} / {r['same_noise_tokens']} | "
                         f"{r['reference_s']:.3f} | {r['arvis_s']:.3f} | {r['arvis_speedup_over_reference']:.2f}x |")
        lines += ["", f"Reference: {refs[0]['reference']}; {refs[0]['repeats']} interleaved repeats, median, both sides "
                      f"returning images, {refs[0]['threads']} thread(s), CFG {refs[0]['guidance_scale']}, top-k "
                      f"{refs[0]['top_k']}."]
    else:
        lines.append("(not measured on this model yet: run with `--reference-repo` (a FoundationVision/VAR checkout) "
                     "to produce it; timed: on an otherwise idle machine)")
    ar_fids = {seed: rec for (label, seed), rec in fids.items() if label == "ar"}
    noise = abs(ar_fids[0]["fid"] - ar_fids[1]["fid"]) if 0 in ar_fids and 1 in ar_fids else None
    for b in (1, 8):
        recs = _record(page, f"bench-b{b}.json")
        lines += ["", f"## Latency and FID, batch {b}", ""]
        if not isinstance(recs, list):
            lines.append(_not_run(f"var/bench-b{b}", timed=True))
            continue
        r0 = recs[0]
        lines += [f"{r0['samples']} samples (class i mod classes), batch {b}, {r0.get('dtype')}, {r0.get('threads')} "
                  f"thread(s), VAR CFG {r0['sampling']['guidance_scale']} (ramped), top-k {r0['sampling']['top_k']}; "
                  f"median of {r0['repeats']} interleaved rounds; commit `{str(r0.get('git_commit'))[:12]}`.", "",
                  "| method | lossless | large-model fwd | small-model fwd | latency s / image | speed-up | FID (N) | "
                  "ΔFID vs `ar` |", "|---|---|---|---|---|---|---|---|"]
        for r in recs:
            fid = fids.get((r["spec"], 0))
            fid_s = f"{fid['fid']:.2f} ({fid['num_generated']})" if fid else "–"
            delta = f"{fid['fid'] - ar_fids[0]['fid']:+.2f}" if fid and 0 in ar_fids and r["spec"] != "ar" else "–"
            lines.append(f"| `{r['spec']}` | {'yes' if r['lossless'] else 'no'} | {r['target_forwards']:.0f} | "
                         f"{r['draft_forwards']:.0f} | {r['latency_s']:.4f} | {r['speedup']:.2f}x | {fid_s} | {delta} |")
        lines += ["", _verdict(recs, fids, ar_fids, noise)]
    lines += ["", "## FID: every method, baseline seed noise and floor", ""]
    if 0 in ar_fids:
        a0 = ar_fids[0]
        floor = a0.get("real_vs_real_floor")
        lines.append(f"`ar`: FID {a0['fid']:.2f} (seed 0), "
                     f"{ar_fids[1]['fid']:.2f} (seed 1) → seed-to-seed noise |ΔFID| = {noise:.2f}; real-vs-real floor "
                     f"at the same N {floor:.2f}." if noise is not None and floor is not None else
                     f"`ar`: FID {a0['fid']:.2f} (seed 0); second seed not run yet.")
        lines.append("A method is 'within seed noise' when |ΔFID| ≤ the seed-to-seed |ΔFID| of the baseline.")
        lines += ["", f"{a0['num_generated']} images per method (seed 0, class i mod classes) against "
                      f"{a0['num_reference']} held-out images ({a0['reference']}), {a0['extractor']} feature network, "
                      f"{a0['threads']} thread(s):", "",
                  "| method | FID (N) | ΔFID vs `ar` | within seed noise |", "|---|---|---|---|"]
        for spec in METHODS:
            fid = fids.get((spec, 0))
            if fid is None:
                lines.append(f"| `{spec}` | – | – | – |")
                continue
            d = fid["fid"] - a0["fid"]
            within = "–" if spec == "ar" or noise is None else ("yes" if abs(d) <= noise else
                                                                 "no (better)" if d < 0 else "no (worse)")
            lines.append(f"| `{spec}` | {fid['fid']:.2f} ({fid['num_generated']}) | "
                         f"{'–' if spec == 'ar' else f'{d:+.2f}'} | {within} |")
    else:
        lines.append(_not_run("fid"))
    lines += ["", "## Where the time goes (per scale)", ""]
    timelines = [r for b in (1, 8) if isinstance(r := _record(page, f"timeline-b{b}.json"), dict)]
    for rec in timelines:
        pn = rec["patch_nums"]
        lines += [f"Batch {rec['batch']}, median of {rec['repeats']} interleaved rounds, ms per scale step (forward + "
                  "sampling; `*` = small model; positions evaluated in brackets when pruned or prefilled):", "",
                  "| method | " + " | ".join(f"{p}x{p}" for p in pn) + " | total s |", "|---|" + "---|" * (len(pn) + 1)]
        for label, m in rec["methods"].items():
            cells = []
            steps = {i: i for i in range(len(m["scale_ms"]))}
            for i in steps:
                tok = pn[i] ** 2 if len(m["scale_ms"]) == len(pn) else None
                mark = "*" if m["scale_model"][i] == "draft" else ""
                extra = f" ({m['scale_positions'][i]})" if tok is not None and m["scale_positions"][i] != tok else ""
                cells.append(f"{m['scale_ms'][i]:.1f}{mark}{extra}")
            lines.append(f"| `{label}` | " + " | ".join(cells) + f" | {m['latency_s']:.3f} |")
        lines.append("")
    if not timelines:
        lines += [_not_run("timeline", timed=True), ""]
    elif (page.out / "var" / "per-scale.png").exists():
        lines += ["Plot: [var/per-scale.png](var/per-scale.png) (forward time and positions per scale, every method).", ""]
    acc = _record(page, "acceptance.json")
    lines += ["## Would speculative verification of drafted scales pay?", ""]
    if isinstance(acc, dict):
        lines += [f"{acc['samples']} samples of the target, CFG {acc['guidance_scale']}, top-k {acc['top_k']}; per scale, "
                  f"the mean per-token TV between target and draft, the probability that per-token exact verification "
                  f"keeps the whole scale (Π(1 − TV_i), mean over samples, and log10 of its median), and the best "
                  f"whole-scale acceptance of any exact verification (1 − TV of the joint laws, {acc['joint_draws']} "
                  "draft draws per sample):", "",
                  "| scale | tokens | mean TV/token | P(all tokens accepted) | log10 median | joint 1 − TV |",
                  "|---|---|---|---|---|---|"]
        for r in acc["scales"]:
            lines.append(f"| {r['side']}x{r['side']} | {r['tokens']} | {r['tv']:.3f} | {r['tokenwise']:.2e} | "
                         f"{r['log10_tokenwise_median_of_batches']:.1f} | {r['joint']:.2e} |")
    else:
        lines.append(_not_run("acceptance"))
    return lines + ["", "## Published anchors", "", *(f"- {a}" for a in ANCHORS), ""]


SUITE = Suite("var", MODEL, var_jobs, (var_page,), extras=(plot_timeline,),
              options=(Option("--reference-repo", type=Path, help="var: a FoundationVision/VAR checkout"),
                       Option("--reference-commit", help="var: the checkout's commit (recorded)")))
