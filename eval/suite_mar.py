"""The MAR page (docs/figures/mar.md, ``--suite mar``): continuous tokens and continuous speculative decoding.

The models are two pipeline folders assembled by ``python -m arvis.training.train_mar assemble``: the masked
pair (``--model``, target + draft: ``ar`` and the published ``cspd``) and the causal raster pair
(``--causal-model``: ``ar`` and the exact ``cspd-exact``). Jobs (records under ``docs/figures/mar/``):

- ``parity``: ``eval/compare_mar_reference.py`` against an LTH14/mar checkout (its printed lines kept); only with
  ``--reference-repo``;
- ``masked/bench-b1``, ``masked/bench-b8``: ``arvis bench`` of ``ar`` and ``cspd`` on the masked pair;
- ``causal/bench-b1``, ``causal/bench-b8``: ``ar``, ``cspd-exact`` with ``final_std`` 0 (MAR's deterministic last
  step: about one token per verify) and > 0 (whole windows commit) on the causal pair;
- ``masked/fid/*``, ``causal/fid/*``: ``arvis fid`` (N = ``--fid-num``, the domain network) for every method, and
  ``ar`` with a second seed (seed-to-seed noise) and the real-vs-real floor;
- ``acceptance``: ``cspd-exact``'s acceptance rate and target forwards against the heads' sampling steps on the
  causal pair;
- ``lossless``: ``cspd-exact`` against plain AR on the causal pair (two-sample KS tests on scalar views of the
  tokens), with a second AR set as the null and the draft's own samples as the planted-bug control.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from figure_runner import Bench, Declaration, Fid, Option, Page, Stage, Suite, load_record
from figure_tables import fids_by_seed, same_weights

if TYPE_CHECKING:
    import numpy as np
    import torch

MODEL = "arvis/weights/mar-emoji"
CAUSAL_MODEL = "arvis/weights/mar-causal-emoji"
FINAL_STD = 0.05  # cspd-exact's last-step std when whole windows should commit (docs/mar.md)
# the published defaults, and more target-only iterations (prefill) traded for closeness to the target's FID
MASKED_METHODS = ["ar", "cspd", "cspd:prefill_ratio=0.5"]
# cspd-exact's window: its acceptance on the shipped pair is low (docs/mar.md), so 2 drafts waste fewer than 4
EXACT = f"cspd-exact:final_std={FINAL_STD},window=2"
CAUSAL_BENCH = ["ar", "cspd-exact:final_std=0", f"cspd-exact:final_std={FINAL_STD}", EXACT]
CAUSAL_BENCH_B8 = ["ar", EXACT]  # cspd-exact decodes slower than AR on this CPU (docs/mar.md): b8 keeps the two
# An exact method's FID only confirms the sampler, so it is set beside the sampler it is exact for: AR with the same
# last-step std (plain ``ar`` is MAR's deterministic last step); the other settings are bench-only.
EXACT_BASELINE = f"ar:final_std={FINAL_STD}"
CAUSAL_FID = ["ar", EXACT_BASELINE, EXACT]
FID_BATCH = 50  # the head's per-call overhead dominates at small batches on a CPU
HEAD_STEPS = (8, 16, 32, 50, 100)
LOSSLESS_POSITIONS = (0, 1, 2, 7, 31, 63)  # raster positions whose tokens the two-sample test compares
LOSSLESS_ALPHA = 1e-3  # per-test threshold; 12 tests: a false alarm of an exact method has probability < 1.2%
ANCHORS = [
    "CSpD (Wang et al., 2024, MarkXCloud/CSpD): 2.33x fewer target forwards on MAR at similar FID (ImageNet 256, "
    "GPU); its acceptance tempers the density ratio (τ) and is lossy.",
    "MAR (Li et al., NeurIPS 2024): the causal raster AR variant with the diffusion loss is the paper's Table 1 "
    "baseline; masked generation with random order is its default.",
]


def mar_jobs(s: argparse.Namespace) -> list[Declaration]:
    """Every job, in the order they run; their records live under ``<out>/mar``."""
    found: list[Declaration] = []
    if s.reference_repo is not None:
        found.append(Stage("parity", "mar/parity.json", lambda s: task_parity(s.out, s.reference_repo, s.model)))
    for kind, model, b1, b8 in (("masked", s.model, MASKED_METHODS, MASKED_METHODS[:2]),
                                ("causal", s.causal_model, CAUSAL_BENCH, CAUSAL_BENCH_B8)):
        found += [Bench(f"mar/{kind}/bench-b1", tuple(b1), model=model, threads=1, name=f"{kind}/bench-b1"),
                  Bench(f"mar/{kind}/bench-b8", tuple(b8), model=model, samples=2 * s.samples, batch=8, threads=1,
                        name=f"{kind}/bench-b8")]
    for kind, model, methods in (("masked", s.model, MASKED_METHODS), ("causal", s.causal_model, CAUSAL_FID)):
        fid = dict(model=model, threads=1, batch=FID_BATCH, folder=f"mar/{kind}", prefix=f"{kind}/")
        found += [Fid("ar", floor=True, **fid), Fid("ar", seed=1, **fid),
                  *(Fid(spec, **fid) for spec in methods if spec != "ar")]
    found.append(Stage("acceptance", "mar/acceptance.json",
                       lambda s: task_acceptance(s.out, s.causal_model, head_steps=tuple(s.head_steps)),
                       complete=_names_weights, model_setting="causal_model"))
    found.append(Stage("lossless", "mar/lossless.json", lambda s: task_lossless(s.out, s.causal_model, num=s.lossless_num),
                       complete=_names_weights, model_setting="causal_model"))
    return found


def _names_weights(record: Path) -> bool:
    """Whether a stage record names the weights it measured (``model_sha256``): one that does not predates the
    check, so whether the causal pair was replaced since cannot be told, and it runs again."""
    rec = load_record(record)
    return isinstance(rec, dict) and bool(rec.get("model_sha256"))


# ----------------------------------------------------------------------------- stages (run by the suite's command)
def task_parity(out: Path, reference: Path, model: str | None = None) -> None:
    """Run ``eval/compare_mar_reference.py`` and keep its result lines (max |diff| of every compared output); with
    ``model`` (a masked pipeline folder that exists) the checks also run on its trained weights."""
    from arvis.eval.files import write_json_atomic

    script = Path(__file__).resolve().parent / "compare_mar_reference.py"
    extra = ["--pipeline", model] if model and Path(model).is_dir() else []
    done = subprocess.run([sys.executable, str(script), "--reference-repo", str(reference), *extra],
                          capture_output=True, text=True, check=True)
    lines = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()[:2].rstrip(".").isdigit()]
    write_json_atomic(out / "mar" / "parity.json", {"reference": str(reference.name), "lines": lines})


def task_acceptance(out: Path, causal_model: str, num_images: int = 8, head_steps: tuple[int, ...] = HEAD_STEPS,
                    final_std: float = FINAL_STD) -> dict:
    """``cspd-exact`` on the causal pair with both heads sampled at each step count: acceptance, forwards."""
    import torch

    from arvis.eval.files import write_json_atomic
    from arvis.eval.provenance import provenance
    from arvis.pipelines import MARPipeline
    from arvis.utils.random import image_generators

    torch.set_num_threads(1)
    base = MARPipeline.from_pretrained(causal_model)
    base.set_progress_bar_config(disable=True)
    labels = [i % base.transformer.num_classes for i in range(num_images)]
    rows = []
    for steps in head_steps:
        pipe = MARPipeline(base.transformer, base.head.with_sampling_steps(steps), base.vae, base.draft_transformer,
                           base.draft_head.with_sampling_steps(steps))
        pipe.sampling_defaults = base.sampling_defaults
        pipe.set_progress_bar_config(disable=True)
        result = pipe(class_labels=labels, method="cspd-exact", final_std=final_std, output_type="latent",
                      generator=image_generators(0, range(num_images)))
        samples = result.stats.samples
        rows.append({"head_steps": steps,
                     "acceptance_rate": sum(s.extra["acceptance_rate"] for s in samples) / len(samples),
                     "target_forwards": sum(s.target_forwards for s in samples) / len(samples),
                     "tokens": base.transformer.seq_len, "fallbacks": sum(s.extra.get("fallbacks", 0) for s in samples)})
    trained = load_record(Path(causal_model) / "metrics.json")  # how close the pair is: their held-out losses
    losses = ({name: trained[part]["validation_loss"] for name, part in (("target", "transformer"),
                                                                         ("draft", "draft_transformer"))}
              if isinstance(trained, dict) and "draft_transformer" in trained else None)
    record = {"model": Path(causal_model).name, "model_sha256": _weights(causal_model), "num_images": num_images,
              "final_std": final_std,
              "sampling": dict(base.sampling_defaults), "rows": rows, "validation_loss": losses,
              **provenance("cpu", torch.float32)}
    write_json_atomic(out / "mar" / "acceptance.json", record)
    return record


def token_projections(tokens: torch.Tensor, positions: tuple[int, ...] = LOSSLESS_POSITIONS) -> dict[str, np.ndarray]:
    """Scalar views of tokens ``[N, L, D]`` for two-sample tests: channel 0 and the channel mean at each position."""
    L = tokens.shape[1]
    views = {}
    for pos in sorted({min(p, L - 1) for p in positions}):
        views[f"pos{pos}/ch0"] = tokens[:, pos, 0].double().numpy()
        views[f"pos{pos}/mean"] = tokens[:, pos].double().mean(dim=1).numpy()
    return views


def two_sample_p_values(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """Two-sample KS p-value of every :func:`token_projections` view of token sets ``a`` and ``b``."""
    from scipy.stats import ks_2samp

    va, vb = token_projections(a), token_projections(b)
    return {k: float(ks_2samp(va[k], vb[k]).pvalue) for k in va}


def task_lossless(out: Path, causal_model: str, num: int = 1000, final_std: float = FINAL_STD, window: int = 2,
                  batch: int = 250) -> dict:
    """``cspd-exact`` against plain AR on the trained causal pair: ``num`` samples each (labels cycling over the
    classes, the folder's guidance), two-sample KS tests on scalar views of the tokens. Controls: a second AR
    sample set (the null: its p-values are uniform) and the draft's own AR samples — what a loop committing every
    draft unverified would produce — which the same tests must tell from the target's."""
    import torch

    from arvis.engine.sampling import SamplingConfig
    from arvis.eval.files import write_json_atomic
    from arvis.eval.provenance import provenance
    from arvis.methods.continuous import decode_continuous
    from arvis.models.mar import MARModel
    from arvis.pipelines import MARPipeline

    torch.set_num_threads(1)
    pipe = MARPipeline.from_pretrained(causal_model, dtype=torch.float32)
    s = pipe.sampling_defaults
    settings = {"guidance_scale": float(s.get("guidance_scale", 1.0)), "temperature": float(s.get("temperature", 1.0))}
    sampling = SamplingConfig(**settings, guidance="mar", cfg_schedule="constant")
    target, draft = MARModel(pipe.transformer, pipe.head), MARModel(pipe.draft_transformer, pipe.draft_head)
    labels = torch.arange(num) % pipe.transformer.num_classes

    def batched(fn, seed: int):
        parts, stats = [], []
        for i in range(0, num, batch):  # one generator per chunk: the chunks are independent sample sets
            tokens, st = fn(labels[i:i + batch], torch.Generator().manual_seed(seed * 100_000 + i))
            parts.append(tokens)
            stats += st.samples
        return torch.cat(parts), stats

    def ar(model: MARModel, seed: int):
        return batched(lambda lab, g: decode_continuous(model, lab, sampling, "ar", g, final_std=final_std), seed)

    t0 = time.perf_counter()
    ar_target, _ = ar(target, 1)
    ar_target2, _ = ar(target, 2)
    ar_draft, _ = ar(draft, 3)
    spec, stats = batched(lambda lab, g: decode_continuous(target, lab, sampling, "cspd-exact", g, window=window,
                                                           final_std=final_std, draft_model=draft), 4)
    rows = {"cspd-exact": two_sample_p_values(ar_target, spec),
            "ar (second seed set)": two_sample_p_values(ar_target, ar_target2),
            "draft's own samples (planted bug)": two_sample_p_values(ar_target, ar_draft)}
    record = {"model": Path(causal_model).name, "model_sha256": _weights(causal_model), "num": num,
              "final_std": final_std, "window": window,
              "sampling": {**settings, "cfg_schedule": "constant"}, "alpha": LOSSLESS_ALPHA,
              "p_values": rows, "min_p": {k: min(v.values()) for k, v in rows.items()},
              "passes": {k: min(v.values()) > LOSSLESS_ALPHA for k, v in rows.items()},
              "acceptance_rate": sum(x.extra["accepted"] for x in stats) / max(1, sum(x.extra["drafted"] for x in stats)),
              "target_forwards": sum(x.target_forwards for x in stats) / len(stats),
              "seconds": time.perf_counter() - t0, **provenance("cpu", torch.float32)}
    write_json_atomic(out / "mar" / "lossless.json", record)
    return record


# ----------------------------------------------------------------------------- report
def _weights(folder: str) -> str | None:
    """The content hash of a pair folder's weights (``None`` when the folder is missing)."""
    from arvis.hub import folder_sha256

    return folder_sha256(folder) if Path(folder, "model_index.json").is_file() else None


def _measured_on(rec: dict, current: str | None) -> str:
    """Which weights a record was measured on: records name a shipped pair by its alias, so a record of weights
    the alias no longer holds (a replaced pair) says so with its hash."""
    if same_weights(rec.get("model_sha256"), current):
        return f"`{rec.get('model')}`"
    return (f"`{rec.get('model')}` **as it was before** (weights `{rec['model_sha256']}`; not re-measured on the "
            "shipped pair yet)")


def _fid_baseline(spec: str, fids: dict[tuple[str, int], dict]) -> dict | None:
    """The seed-0 FID a method's is compared with: AR with the method's ``final_std`` (the sampler ``cspd-exact`` is
    exact for; ``None`` until measured: plain ``ar`` is another sampler), else plain ``ar``."""
    from arvis.methods.spec import MethodSpec, parse_method_specs

    std = parse_method_specs(spec)[0].options_dict.get("final_std")
    if std:
        return fids.get((MethodSpec("ar", (("final_std", std),)).label, 0))
    return fids.get(("ar", 0))


def _section(root: Path, kind: str, title: str, current: str | None = None) -> list[str]:
    fids, stale = {}, []
    for key, rec in fids_by_seed(root / kind).items():
        if same_weights(rec.get("model_sha256"), current):
            fids[key] = rec
        else:
            stale.append(key)
    ar = {seed: rec for (label, seed), rec in fids.items() if label == "ar"}
    noise = abs(ar[0]["fid"] - ar[1]["fid"]) if 0 in ar and 1 in ar else None
    lines = [f"## {title}", ""]
    for b in (1, 8):
        recs = load_record(root / kind / f"bench-b{b}.json")
        lines += [f"### Batch {b}", ""]
        if not isinstance(recs, list) or not recs:
            lines += ["(not run yet)", ""]
            continue
        r0 = recs[0]
        # a bench of replaced weights: its rows take no FID of the shipped ones
        fid_of = fids if same_weights(r0.get("model_sha256"), current) else {}
        lines += [f"On {_measured_on(r0, current)}.", "",
                  f"{r0['samples']} samples, batch {b}, {r0.get('dtype')}, {r0.get('threads')} thread(s), CFG "
                  f"{r0['sampling']['guidance_scale']}; median of {r0['repeats']} interleaved rounds; commit "
                  f"`{str(r0.get('git_commit'))[:12]}`.", "",
                  "| method | lossless | target fwd | draft fwd | fewer target fwd | acceptance | fallbacks | "
                  "latency s / image | outside forwards | speed-up | FID (N) | ΔFID vs its AR sampler |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        base_fwd = next((r["target_forwards"] for r in recs if r["spec"] == "ar"), None)
        for r in recs:
            fid = fid_of.get((r["spec"], 0))
            fid_s = f"{fid['fid']:.2f} ({fid['num_generated']})" if fid else "–"
            base = _fid_baseline(r["spec"], fid_of)
            delta = f"{fid['fid'] - base['fid']:+.2f}" if fid and base and r["spec"] != "ar" else "–"
            fewer = f"{base_fwd / r['target_forwards']:.2f}x" if base_fwd and r["target_forwards"] else "–"
            extra = r.get("extra") or {}
            acc = f"{extra['acceptance_rate']:.3f}" if "acceptance_rate" in extra else "–"
            fallbacks = f"{extra['fallbacks']:.1f}" if "fallbacks" in extra else "–"
            lines.append(f"| `{r['spec']}` | {'yes' if r['lossless'] else 'no'} | {r['target_forwards']:.1f} | "
                         f"{r['draft_forwards']:.1f} | {fewer} | {acc} | {fallbacks} | {r['latency_s']:.4f} | "
                         f"{r.get('outside_share', float('nan')):.0%} | {r['speedup']:.2f}x | {fid_s} | {delta} |")
        lines += ["", "*outside forwards*: the share of the latency spent outside the transformers' forwards — "
                  "mostly the diffusion heads' sampling steps, which every method runs for every token.", ""]
    if stale:
        lines += [f"FID records of replaced weights, not shown: {len(stale)} ("
                  + ", ".join(f"`{label}` seed {seed}" for label, seed in sorted(stale)) + ").", ""]
    if 0 in ar:
        floor = ar[0].get("real_vs_real_floor")
        lines.append(f"FID of `ar` on {_measured_on(ar[0], current)}: {ar[0]['fid']:.2f} (seed 0)" +
                     (f", {ar[1]['fid']:.2f} (seed 1): seed-to-seed noise |ΔFID| = {noise:.2f}" if noise is not None
                      else "; second seed not run yet") +
                     (f"; real-vs-real floor {floor:.2f}." if floor is not None else "."))
        lines.append("")
    for (label, seed), rec in sorted(fids.items()):
        if label.startswith("ar:") and seed == 0:  # another AR sampler: the one an exact method is compared with
            lines += [f"FID of `{label}` (the sampler `cspd-exact` with the same `final_std` is exact for; seed 0): "
                      f"{rec['fid']:.2f}.", ""]
    return lines


def _schedule_section(root: Path) -> list[str]:
    """The records of ``eval/mar_sampling_schedule.py`` (why the shipped heads sample on the linear schedule)."""
    recs = [r for r in (load_record(p) for p in sorted(root.glob("sampling-schedule-*.json"))) if isinstance(r, dict)]
    lines = ["## The heads' sampling schedule", ""]
    if not recs:
        return lines + ["(run `python eval/mar_sampling_schedule.py --model <folder> --json "
                        "docs/figures/mar/sampling-schedule-<folder>.json`)", ""]
    gains = recs[0]["transition_gain"]
    lines += ["Largest factor by which one transition multiplies the head's ε error: " + "; ".join(
        f"{name}: " + ", ".join(f"{v:.3g} at {k} steps" for k, v in row.items()) for name, row in gains.items()) + ".",
        "", "| folder | ε MSE at t = 999 (held-out) | token std, cosine | token std, linear | held-out latents |",
        "|---|---|---|---|---|"]
    for r in recs:
        std = r["sampled_token_std"]
        lines.append(f"| `{r['model']}` | {r['eps_mse']['999']:.2g} | {std['cosine']:.3g} | {std['linear']:.3g} | "
                     f"{r['heldout_token_std']:.3g} |")
    return lines + ["", f"`{recs[0]['command']}` ({recs[0]['num_images']} images, {recs[0]['head_steps']} head steps). "
                    "The shipped folders sample on the linear schedule (docs/mar.md).", ""]


def mar_page(page: Page) -> list[str]:
    """docs/figures/mar.md from the records under ``mar/`` only (missing records say so)."""
    root = page.out / "mar"
    lines = ["# Figures: MAR (continuous tokens) and continuous speculative decoding", "",
             "Generated by `python eval/figures.py --suite mar` from the JSON records in `mar/` (`--list` prints every "
             "command; `--reference-repo` adds the parity record). The masked pair runs `ar` and the published, "
             "lossy `cspd`; the causal raster pair runs `ar` and the exact `cspd-exact` (docs: [../mar.md](../mar.md)). "
             "FID uses the domain network on held-out crops; a method is within seed noise when |ΔFID| ≤ the "
             "baseline's seed-to-seed |ΔFID|.", "", "## Parity with the official code", ""]
    parity = load_record(root / "parity.json")
    if isinstance(parity, dict):
        lines += [f"`eval/compare_mar_reference.py` against {parity['reference']} (a tiny configuration with perturbed "
                  "random weights; lines tagged with a folder name: the shipped masked pair's trained weights, exported "
                  "to the official layout and loaded by the official module; fixed noise):", "", "```",
                  *parity["lines"], "```", ""]
    else:
        lines += ["(run with `--reference-repo` to produce it)", ""]
    lines += _schedule_section(root)
    causal = _weights(page.settings.causal_model)
    lines += _section(root, "masked", "Masked MAR: `ar` and `cspd` (published, lossy)", _weights(page.settings.model))
    lines += _section(root, "causal", "Causal raster variant: `ar` and `cspd-exact` (exact)", causal)
    lines += [f"`cspd-exact:final_std=0` is exact for MAR's sampler (deterministic last step) but ends each window "
              f"at an accepted trajectory; with `final_std={FINAL_STD}` whole windows commit and the sampler it is "
              "exact for is `ar` with the same `final_std`.", "", "## Acceptance against the heads' sampling steps", ""]
    acc = load_record(root / "acceptance.json")
    if isinstance(acc, dict):
        losses = acc.get("validation_loss")
        close = (f" How close the pair is: held-out diffusion loss of the target {losses['target']:.4f}, of the "
                 f"draft {losses['draft']:.4f}." if losses else "")
        lines += [f"`cspd-exact` (final_std {acc['final_std']}) on {_measured_on(acc, causal)}, {acc['num_images']} images, both "
                  f"heads sampled with the given DDPM steps.{close}", "",
                  "| head steps | acceptance rate | target forwards / image | tokens |", "|---|---|---|---|"]
        for r in acc["rows"]:
            lines.append(f"| {r['head_steps']} | {r['acceptance_rate']:.3f} | {r['target_forwards']:.1f} | {r['tokens']} |")
    else:
        lines.append("(not run yet)")
    lines += ["", "## Lossless test of `cspd-exact` on the trained causal pair", ""]
    ll = load_record(root / "lossless.json")
    if isinstance(ll, dict):
        views = ", ".join(next(iter(ll["p_values"].values())))
        lines += [f"On {_measured_on(ll, causal)}.", "",
                  f"{ll['num']} samples per arm (labels cycling over the classes, CFG {ll['sampling']['guidance_scale']} "
                  f"constant, final_std {ll['final_std']}, window {ll['window']}), two-sample KS test on each of "
                  f"{len(next(iter(ll['p_values'].values())))} scalar views of the tokens ({views}); a set passes when "
                  f"every p-value exceeds {ll['alpha']:g}. Acceptance rate {ll['acceptance_rate']:.3f}, "
                  f"{ll['target_forwards']:.1f} target forwards per image.", "",
                  "| compared with plain AR of the target | min p-value | passes |", "|---|---|---|"]
        for name, p_min in ll["min_p"].items():
            lines.append(f"| {name} | {p_min:.2e} | {'yes' if ll['passes'][name] else 'no'} |")
        lines += ["", "The second AR set is the null (calibration); the draft's own samples are what a loop committing "
                  "every draft unverified would produce, so the test must fail them for it to have power.", ""]
    else:
        lines += ["(not run yet)", ""]
    return lines + ["", "## Published anchors", "", *(f"- {a}" for a in ANCHORS), ""]


SUITE = Suite("mar", MODEL, mar_jobs, (mar_page,), samples=8, options=(
    Option("--causal-model", CAUSAL_MODEL, help="mar: the causal MAR pipeline folder (target + draft)"),
    Option("--head-steps", list(HEAD_STEPS), type=int, nargs="+", help="mar: the heads' sampling steps of the "
           "acceptance job"),
    Option("--reference-repo", type=Path, help="mar: an LTH14/mar checkout"),
    Option("--lossless-num", 1000, type=int, help="mar: samples per arm of the lossless test")))
