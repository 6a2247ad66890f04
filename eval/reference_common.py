"""What the reference comparisons (``eval/compare_*_reference.py``) share: checking a reference checkout,
exporting an arvis LlamaGen model in the official layout and loading it into the reference's own
``Transformer`` class, the teacher-forced logit check, and interleaved timing.

arvis does not contain or vendor any reference code: the scripts import it from a checkout the user
points them at. Run the scripts from the repository root (``python eval/compare_….py``); this module
is found beside them.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch


def checked_reference_repo(repo: Path, required: tuple[str, ...], what: str) -> Path:
    """``repo`` resolved, after checking it holds every file of ``required`` (relative paths).

    Raises:
        ValueError: naming ``--reference-repo``, the folder and the first missing file.
    """
    repo = Path(repo).expanduser().resolve()
    if not repo.is_dir():
        raise ValueError(f"--reference-repo: {repo} is not a folder (expected a checkout of {what})")
    for rel in required:
        if not (repo / rel).is_file():
            raise ValueError(f"--reference-repo: {repo} has no {rel} (expected a checkout of {what})")
    return repo


def add_to_path(repo: Path) -> None:
    """Make the checkout importable (first on ``sys.path``; once)."""
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))


def exported_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s weights as LlamaGen's training scripts save them: written with
    :func:`arvis.models.checkpoint.export_llamagen_checkpoint` to a temporary ``.pt`` and read back
    (so the comparison exercises the export a user would hand to the reference code)."""
    from arvis.models.checkpoint import export_llamagen_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "model.pt"
        export_llamagen_checkpoint(model, ckpt)
        return torch.load(ckpt, map_location="cpu", weights_only=False)["model"]  # our own file


def reference_transformer(gpt_module: ModuleType, model: torch.nn.Module) -> torch.nn.Module:
    """The reference ``gpt_module.Transformer`` (LlamaGen's ``autoregressive/models/gpt.py`` or a copy
    of it with the same ``ModelArgs``) built with ``model``'s configuration, every dropout at 0, loaded
    from the official-layout export with ``strict=True``; fp32, eval mode."""
    cfg = model.config
    ref = gpt_module.Transformer(gpt_module.ModelArgs(
        dim=cfg.dim, n_layer=cfg.n_layer, n_head=cfg.n_head, n_kv_head=cfg.n_kv_head,
        multiple_of=cfg.multiple_of,
        ffn_dim_multiplier=cfg.ffn_dim_multiplier, rope_base=cfg.rope_base, norm_eps=cfg.norm_eps,
        num_classes=cfg.num_classes, class_dropout_prob=cfg.class_dropout_prob, model_type=cfg.model_type,
        vocab_size=cfg.vocab_size, cls_token_num=cfg.cls_token_num, block_size=cfg.block_size,
        token_dropout_p=0.0, resid_dropout_p=0.0, ffn_dropout_p=0.0))
    ref.load_state_dict(exported_state_dict(model), strict=True)
    return ref.float().eval()


def teacher_forced_max_diff(model: torch.nn.Module, ref: torch.nn.Module, batch: int, seed: int = 0) -> float:
    """max |Δ logits| between arvis and the reference ``Transformer`` on random class labels and token
    sequences (teacher-forced, every position; fp32).

    The reference computes teacher-forced logits only in training mode; with every dropout at 0 and
    label dropout switched off on this object, that path is deterministic. ``ref`` is left in eval mode.
    """
    from arvis.models.protocol import Condition

    cfg = model.config
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, cfg.num_classes, (batch,), generator=g)
    tokens = torch.randint(0, cfg.vocab_size, (batch, model.layout.num_tokens), generator=g)
    ref.train()
    ref.cls_embedding.dropout_prob = 0.0
    try:
        with torch.no_grad():
            ours = model(tokens, Condition(class_labels=labels))
            theirs, _ = ref(idx=tokens[:, :-1], cond_idx=labels)
    finally:
        ref.eval()
    return float((ours - theirs).abs().max())


def interleaved_times(runs: dict[str, Callable[[int], Any]], repeats: int, warmup: int = 1
                      ) -> tuple[dict[str, list[float]], dict[str, list[Any]]]:
    """Wall times of ``runs`` called in turn, ``repeats`` rounds, after ``warmup`` untimed rounds.

    Each run is called with the round's index (its seed); round ``i`` calls every run with ``i`` before
    round ``i + 1`` starts, so a load change on the machine hits all of them alike.

    Returns:
        ``(times, results)``: per run name, the ``repeats`` wall times in seconds and return values.
    """
    for i in range(warmup):
        for fn in runs.values():
            fn(repeats + i)  # seeds no timed round uses
    times: dict[str, list[float]] = {name: [] for name in runs}
    results: dict[str, list[Any]] = {name: [] for name in runs}
    for i in range(repeats):
        for name, fn in runs.items():
            t = time.perf_counter()
            out = fn(i)
            times[name].append(time.perf_counter() - t)
            results[name].append(out)
    return times, results


def write_record(result: dict[str, Any], path: str | None) -> None:
    """Print ``result`` as JSON and, with ``path``, write it there atomically."""
    from arvis.utils.files import atomic_path

    text = json.dumps(result, indent=2)
    print(text)
    if path:
        with atomic_path(path) as tmp:
            tmp.write_text(text + "\n")
