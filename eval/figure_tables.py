"""The tables several figure pages share, built from JSON records only (nothing typed in by hand)."""

from __future__ import annotations

import os
from pathlib import Path

from figure_runner import load_record

TOKEN_STATS = "token_stats.json"
#: The figure sets whose next-token statistics every method page shows side by side (folder relative to the repo).
FIGURE_SETS = {"docs/figures": "photos (`llamagen-c2i-photos`)", "docs/figures/emoji": "emoji (`llamagen-c2i-emoji`)",
               "docs/figures/emoji-names": "emoji, one class each (`llamagen-c2i-emoji-names`, the default)"}
REPO_ROOT = Path(__file__).resolve().parents[1]


def fid_label(rec: dict) -> str:
    """The method spec an FID record measured (``mc-sjd:window=16``)."""
    from arvis.eval.bench import MethodSpec

    return MethodSpec(rec["method"], tuple(rec.get("options", {}).items())).label


def fid_records(out: Path) -> dict[tuple[str, int, int], dict]:
    """The FID records of ``out/fid`` by (method, seed, N)."""
    found = {}
    for path in sorted((out / "fid").glob("*.json")):
        rec = load_record(path)
        if isinstance(rec, dict):
            found[(fid_label(rec), rec["seed"], rec["num_generated"])] = rec
    return found


def fids_by_seed(folder: Path) -> dict[tuple[str, int], dict]:
    """The FID records of ``folder/fid`` by (method, seed): a family's records, all at one N."""
    return {(label, seed): rec for (label, seed, _), rec in fid_records(folder).items()}


def best_fid(fids: dict[tuple[str, int, int], dict], label: str) -> dict | None:
    """The seed-0 record of ``label`` with the largest N."""
    recs = [rec for (lab, seed, _), rec in fids.items() if lab == label and seed == 0]
    return max(recs, key=lambda r: r["num_generated"]) if recs else None


def same_model(a: str | None, b: str | None) -> bool:
    """Whether two records may be of the same model: an alias and its shipped folder name are the same model, and a
    record that names no model is not contradicted."""
    from arvis.hub import SHIPPED_PIPELINES

    return a is None or b is None or SHIPPED_PIPELINES.get(a, a) == SHIPPED_PIPELINES.get(b, b)


def same_weights(sha: str | None, current: str | None) -> bool:
    """Whether a record (its ``model_sha256``) was measured on the weights hashed ``current``: records name a shipped
    model by its alias, which outlives the weights it held; a hash missing on either side is not contradicted."""
    return sha is None or current is None or sha == current


def bench_table(records: list[dict], fids: dict[tuple[str, int, int], dict], extra_cols: bool = False) -> list[str]:
    """Per method of a bench record: forwards, step compression, tokens per forward, latency, speedup, FID
    (``extra_cols``: the relaxed rules' realised total variation per token)."""
    head = ["method", "lossless", "target fwd", "draft fwd", "step compr.", "tokens/fwd", "latency s", "speedup",
            "FID (N)"]
    if extra_cols:
        head += ["mean TV/token", "max TV/token"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        fid = best_fid(fids, r["spec"])
        if fid is not None and not same_model(fid.get("model"), r.get("model")):
            fid = None  # a figure set's FIDs are of its own model; a bench of another model (Emu3 beside c2i) has none
        fid_s = f"{fid['fid']:.2f} ({fid['num_generated']})" if fid else "–"
        row = [f"`{r['spec']}`", "yes" if r["lossless"] else "no", f"{r['target_forwards']:.1f}",
               f"{r['draft_forwards']:.1f}", f"{r['step_compression']:.2f}x", f"{r['accepted_per_forward']:.2f}",
               f"{r['latency_s']:.3f}", f"{r['speedup']:.2f}x", fid_s]
        if extra_cols:
            ex = r.get("extra", {})
            row += [f"{ex['mean_tv_per_token']:.4f}" if "mean_tv_per_token" in ex else "–",
                    f"{ex['max_tv_per_token']:.4f}" if "max_tv_per_token" in ex else "–"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def cost_table(curve: list[dict]) -> list[str]:
    """A forward-cost curve (ms per forward against positions evaluated) as one table."""
    if not curve:
        return []
    return ["| positions T | " + " | ".join(str(c["positions"]) for c in curve) + " |",
            "|---|" + "---|" * len(curve),
            "| ms / forward | " + " | ".join(f"{c['ms']:.2f}" for c in curve) + " |",
            "| vs T = 1 | " + " | ".join("–" if c["ratio"] is None else f"{c['ratio']:.2f}" for c in curve) + " |"]


def survival_table(records: list[dict], points: tuple[int, ...] = (2, 3, 5, 9, 17, 33, 65)) -> list[str]:
    """P(a forward commits exactly 1 token) and P(it commits >= j tokens) per method, from the accepted-per-forward
    histograms of all samples: the single-token forwards SJD-PAC targets, and how far into the window acceptance
    survives (with the forward's own token, j - 1 drafts accepted)."""
    head = ["method", "= 1", *(f">= {j}" for j in points)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        hist = {int(k): v for k, v in r.get("accepted_per_forward_histogram", {}).items()}
        total = sum(hist.values())
        if not total or r["method"] == "ar":
            continue
        cells = [f"{hist.get(1, 0) / total:.3f}", *(f"{sum(v for k, v in hist.items() if k >= j) / total:.3f}"
                                                     for j in points)]
        lines.append(f"| `{r['spec']}` | " + " | ".join(cells) + " |")
    return lines


def setting_line(records: list[dict]) -> str:
    """How a bench record was measured: model, samples, batch, dtype, threads, sampling, rounds, commit, time."""
    r = records[0]
    s = r["sampling"]
    return (f"model `{r.get('model')}`, {r['samples']} samples (class i mod classes), batch {r['batch_size']}, "
            f"dtype {r.get('dtype')}, {r.get('threads')} thread(s), CFG {s.get('guidance_scale')}, "
            f"top-k {s.get('top_k')}, temperature {s.get('temperature')}; median of {r['repeats']} interleaved "
            f"rounds after {r['warmup']} warm-up; commit `{str(r.get('git_commit'))[:12]}`"
            f"{' (dirty tree)' if r.get('git_dirty') else ''}, {r.get('timestamp', '')[:16]}")


def latency_table(records: list[dict]) -> list[str]:
    """Per method of a bench record: latency, speedup over AR, the ideal speedup and where the time goes."""
    head = ["method", "lossless", "step compr.", "T", "latency s", "speedup", "ideal", "fwd ms", "outside ms",
            "outside", "syncs / iter"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        ideal = r.get("ideal_speedup")
        lines.append("| " + " | ".join([
            f"`{r['spec']}`", "yes" if r["lossless"] else "no", f"{r['step_compression']:.2f}x",
            str(r.get("positions_per_forward") or "–"), f"{r['latency_s']:.3f}", f"**{r['speedup']:.2f}x**",
            "–" if ideal is None else f"{ideal:.2f}x", f"{r['target_ms_per_forward']:.2f}",
            f"{r['outside_ms_per_forward']:.2f}", f"{100 * r['outside_share']:.0f}%",
            f"{r['host_syncs_per_iteration']:.2f}"]) + " |")
    return lines


def token_stats_section(suite: str, out: Path) -> list[str]:
    """This figure set's next-token statistics (first) beside every other known set's, with links to their
    pages of ``suite``."""
    from arvis.eval.token_stats import TABLE_HEADER, table_row

    here = out.resolve()
    known = {(REPO_ROOT / f).resolve(): name for f, name in FIGURE_SETS.items()}
    rows = []
    for folder in [here, *(f for f in known if f != here)]:
        rec = load_record(folder / TOKEN_STATS)
        if not isinstance(rec, dict):
            continue
        label = known.get(folder, f"`{rec['model']}`")
        page = folder / f"{suite}.md"
        link = ("this page" if folder == here else f"[its {suite} figures]({os.path.relpath(page, here)})"
                if page.is_file() else f"no {suite} figures for it yet")
        rows.append(table_row(f"{label} ({link})", rec))
    if not rows:
        return []
    return ["## How predictable each model is", "",
            "Next-token statistics over AR samples (`eval/token_stats.py`: the sampling distribution recomputed "
            "teacher-forced at every position, CFG as in decoding). How much a method wins depends on these: a "
            "sharper model accepts a right guess more often and a random draft less often (1 − TV(p, uniform)), so "
            "a figure measured on one model does not stand for the other. Read each table beside the other "
            "model's.", "",
            *TABLE_HEADER, *rows, ""]
