"""Side by side with the SJD authors' own scheduler on the same weights: logits, wall time, step compression.

arvis does not contain or vendor the authors' code. Point this script at a checkout of
tyshiwo1/Accelerating-T2I-AR-with-SJD (``--reference-repo``, the folder holding ``llamagen/`` and
``scheduler/``). Their LlamaGen path is driven the way their ``test_llamagen.py`` /
``model_wrappers/model_loader.py`` wire it: their copy of LlamaGen's GPT (``llamagen/llamagen.py``)
loaded with an arvis model exported in the official layout, wrapped by ``renew_llamagen`` (a
transformers ``GenerationMixin``) and ``renew_sampler`` (their Jacobi ``_sample`` with the speculative
Jacobi sampler), run by ``LlamaGenSolver.generate``. The script checks:

1. weight compatibility — their ``Transformer`` accepts the export with ``load_state_dict(strict=True)``
   and its teacher-forced logits equal arvis's (max |Δ| printed; fp32);
2. speed — their scheduler against arvis SJD (``method="sjd"``, random initial drafts) with the same
   weights, class labels, window, CFG scale, top-k and temperature 1: interleaved repeats (one seed per
   round, the same for both), median wall time of a whole ``generate`` call;
3. step compression of each — ``N / forwards``, with ``forwards`` the target forwards per image (a CFG
   pair counts once, the prefill counts) averaged over the rounds. Their forwards are their own count
   (``gen loop num (NFE)``, printed by their ``_sample``) plus their prefill forward; with ``--batch`` > 1
   their batch advances in lockstep, so every image takes the batch's forwards (arvis: ragged).

Their settings, as in their scripts: ``prefix_token_sampler_scheme="speculative_jacobi"``,
``multi_token_init_scheme="random"`` (for LlamaGen their ``"repeat_horizon"`` falls back to random: it
needs a row width only Lumina-mGPT's logits processor provides), ``jacobi_loop_interval_l=1``,
``jacobi_loop_interval_r=N - window - 2`` (their formula ``latent_size**2 - max_num_new_tokens - 2``:
their windows shrink to end near token index ``N - window - 1`` and every token after the last window
is decoded one per forward, so that no window runs past their static KV cache; their first two loop
iterations decode one token each). arvis SJD drafts everywhere (its default); ``--arvis-interval
reference`` instead restricts arvis's drafting to token indices ``[3, N - window - 1)`` — their drafted
span depends on the acceptance history, so this fixed one is the nearest, and only an approximation.
No top-k (``--top-k 0``) is given to them as ``image_top_k = vocabulary size`` (their solver always
applies transformers' ``TopKLogitsWarper``, which then keeps every token), top-p 1.

Compatibility shim (their code targets transformers 4.47; this machine has transformers 5.x). Every
item below is applied only to their modules or their model object, at run time, and none changes
their algorithm; arvis and Hugging Face modules are never modified:

- import: their ``llamagen_solver.py`` and ``logit_processor_3dim.py`` import
  ``transformers.generation.logits_process.LogitsWarper`` (removed in transformers 5). While their
  modules are imported, ``sys.modules`` maps that module name to a copy of it that adds the old
  abstract ``LogitsWarper`` base class (nothing in their LlamaGen path instantiates it); the real module
  is put back as soon as their imports finish.
- cache: their wrapper stores keys/values in ``DynamicCache().key_cache`` / ``.value_cache`` lists
  (transformers 5's ``DynamicCache`` has neither). The name ``transformers`` inside their
  ``llamagen_solver`` module is bound to a namespace whose ``DynamicCache`` is
  :class:`LegacyDynamicCache` (the 4.47 surface they use: the two lists, ``get_seq_length``,
  ``len``); every other attribute is transformers' own.
- generation helpers: two ``GenerationMixin`` methods their ``_sample`` calls changed: on their model
  object, ``_has_unfinished_sequences`` accepts the ``cur_len`` / ``max_length`` arguments 4.47 took
  (and ignored) and ``_extract_past_from_model_output`` (removed in 5) returns
  ``("past_key_values", outputs.past_key_values)`` as 4.47 did for their output class.
- CUDA timing: their ``_sample`` always times itself with ``torch.cuda.Event`` and
  ``torch.cuda.synchronize()``, which raise on a machine without a GPU. The name ``torch`` inside their
  scheduler module is bound to a copy of the ``torch`` module whose ``cuda.Event`` records
  ``time.perf_counter()`` and whose ``cuda.synchronize`` does nothing; every other attribute is torch's.
- their Jacobi sampler draws random initial drafts from ``self.img_vocab``, which for LlamaGen they
  take from the Chameleon tokenizer file (``use_chameleon_tokenizer=True``, a Lumina-mGPT vocabulary).
  Here ``use_chameleon_tokenizer=False`` and ``img_vocab`` is every token id of the model
  (``arange(vocab_size)``), as arvis's random init uses.
- their code imports ``absl`` (``pip install absl-py``) and prints its timing lines to stdout;
  those are captured (and the forward count read from them) while their ``generate`` runs.

Example::

    python eval/compare_sjd_reference.py --reference-repo /tmp/sjd-ref --model c2i --threads 1 --repeats 5
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

import torch
from reference_common import (
    add_to_path,
    checked_reference_repo,
    interleaved_times,
    reference_transformer,
    teacher_forced_max_diff,
    write_record,
)

REPOSITORY = "tyshiwo1/Accelerating-T2I-AR-with-SJD"
REQUIRED_FILES = ("llamagen/llamagen.py", "llamagen/llamagen_solver.py",
                  "scheduler/jacobi_iteration_lumina_mgpt.py",
                  "scheduler/logit_processor_3dim.py")
NFE_LINE = re.compile(r"gen loop num \(NFE\):\s*(\d+)")


class ReferenceIncompatible(RuntimeError):
    """The reference code does not run here (names the incompatibility)."""


# ---------------------------------------------------------------------------------------------------
# Compatibility shim (see the module docstring). Applied to the reference's modules / objects only.
# ---------------------------------------------------------------------------------------------------
def _legacy_cache_class() -> type:
    from transformers.cache_utils import Cache

    class LegacyDynamicCache(Cache):
        """transformers 4.47's ``DynamicCache`` as their wrapper uses it: per-layer ``key_cache`` /
        ``value_cache`` lists, ``get_seq_length`` and ``len``. A ``Cache`` subclass because their
        ``_get_initial_cache_position`` tests ``isinstance(cache, Cache)``."""

        def __init__(self) -> None:  # noqa: D107 - no transformers 5 layer objects
            self.key_cache: list[torch.Tensor] = []
            self.value_cache: list[torch.Tensor] = []

        def get_seq_length(self, layer_idx: int = 0) -> int:
            if len(self.key_cache) <= layer_idx or self.key_cache[layer_idx].numel() == 0:
                return 0
            return self.key_cache[layer_idx].shape[-2]

        def __len__(self) -> int:
            return len(self.key_cache)

    return LegacyDynamicCache


class _WallClockEvent:
    """Stands in for ``torch.cuda.Event(enable_timing=True)`` on a CPU-only machine."""

    def __init__(self, enable_timing: bool = False, **_: Any) -> None:
        self.t = 0.0

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: _WallClockEvent) -> float:
        return 1e3 * (end.t - self.t)


def _module_copy(module: types.ModuleType, **overrides: Any) -> types.ModuleType:
    """A new module object with ``module``'s attributes (lookups as fast as the original's) plus
    ``overrides``; attributes ``module`` creates lazily are still found through it."""
    copy = types.ModuleType(module.__name__)
    copy.__dict__.update(module.__dict__)
    copy.__dict__.update(overrides)
    copy.__getattr__ = lambda name: getattr(module, name)  # module-level __getattr__ (PEP 562)
    return copy


def import_reference(repo: Path) -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
    """Import their GPT, solver and Jacobi scheduler modules from ``repo`` with the shim applied.

    Raises:
        ReferenceIncompatible: an import fails (message names the module and the error).
    """
    import transformers
    import transformers.generation.logits_process as hf_logits_process

    class LogitsWarper:
        """transformers 4.47's abstract base of logits warpers (removed in transformers 5)."""

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            raise NotImplementedError(f"{self.__class__} is an abstract class")

    add_to_path(repo)
    name = hf_logits_process.__name__
    with_warper = _module_copy(hf_logits_process, LogitsWarper=LogitsWarper)
    sys.modules[name] = with_warper
    try:
        from llamagen import llamagen as ref_gpt  # noqa: PLC0415
        from llamagen import llamagen_solver as ref_solver  # noqa: PLC0415
        from scheduler import jacobi_iteration_lumina_mgpt as ref_jacobi  # noqa: PLC0415
    except ImportError as e:
        raise ReferenceIncompatible(
            f"the SJD reference code ({REPOSITORY}) does not import with transformers "
            f"{transformers.__version__} and torch {torch.__version__} even with this script's shim: "
            f"{type(e).__name__}: {e}"
            + (" (pip install absl-py)" if "absl" in str(e) else "")) from e
    finally:
        sys.modules[name] = hf_logits_process
    ref_solver.transformers = _module_copy(transformers, DynamicCache=_legacy_cache_class())
    cuda = _module_copy(torch.cuda, Event=_WallClockEvent, synchronize=lambda device=None: None)
    ref_jacobi.torch = _module_copy(torch, cuda=cuda)
    return ref_gpt, ref_solver, ref_jacobi


def _has_unfinished_sequences(self: Any, this_peer_finished: bool, synced_gpus: bool, device: Any,
                              cur_len: int | None = None, max_length: int | None = None) -> bool:
    """transformers 4.47's signature (cur_len / max_length were accepted and unused); no multi-GPU here."""
    return not this_peer_finished


def _extract_past_from_model_output(self: Any, outputs: Any) -> tuple[str, Any]:
    """transformers 4.47's helper, for outputs that carry ``past_key_values`` (theirs do)."""
    return "past_key_values", getattr(outputs, "past_key_values", None)


# ---------------------------------------------------------------------------------------------------
def reference_sjd(ref_solver: types.ModuleType, ref_jacobi: types.ModuleType, gpt: torch.nn.Module,
                  num_tokens: int, window: int, guidance_scale: float, image_top_k: int) -> Any:
    """Their ``LlamaGenSolver`` around ``gpt`` renewed exactly as their ``load_llamagen`` does it."""
    params = dict(jacobi_loop_interval_l=1, jacobi_loop_interval_r=num_tokens - window - 2,
                  max_num_new_tokens=window, guidance_scale=guidance_scale, seed=0,
                  multi_token_init_scheme="random", do_cfg=True, image_top_k=image_top_k,
                  prefix_token_sampler_scheme="speculative_jacobi", use_chameleon_tokenizer=False)
    gpt.__class__ = ref_solver.renew_llamagen(gpt.__class__)
    gpt._init_new_params(**params)
    gpt.__class__ = ref_jacobi.renew_sampler(gpt.__class__)
    gpt.img_vocab = torch.arange(gpt.config.vocab_size)  # shim: every token id (see the docstring)
    gpt._init_new_params(**params)
    gpt._has_unfinished_sequences = types.MethodType(_has_unfinished_sequences, gpt)
    gpt._extract_past_from_model_output = types.MethodType(_extract_past_from_model_output, gpt)
    return ref_solver.LlamaGenSolver(model=gpt, image_top_k=image_top_k, image_top_p=1.0)


def reference_interval(num_tokens: int, window: int) -> tuple[int, int]:
    """Token indices the reference always drafts with its settings: from index 3 (its first two loop
    iterations decode one token each) to ``N - window - 1`` (its ``jacobi_loop_interval_r`` in
    committed-token terms); it may draft a little past that end, depending on acceptance."""
    return 3, num_tokens - window - 1


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference-repo", required=True, type=Path, help=f"a checkout of {REPOSITORY}")
    p.add_argument("--model", default="c2i", help="arvis model alias or pipeline folder (class-conditional)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--window", type=int, default=16, help="drafts per forward (their max_num_new_tokens)")
    p.add_argument("--guidance-scale", type=float, default=3.0)
    p.add_argument("--top-k", type=int, default=0, help="0: no top-k")
    p.add_argument("--arvis-interval", choices=("full", "reference"), default="full",
                   help="arvis's Jacobi interval: its default (draft everywhere) or the reference's "
                        "(approximate)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: every core)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    for name in ("batch", "window", "repeats"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.top_k < 0:
        raise ValueError(f"--top-k must be >= 0 (0: no top-k), got {args.top_k}")
    repo = checked_reference_repo(args.reference_repo, REQUIRED_FILES, REPOSITORY)

    from arvis.eval.bench import available_cores

    torch.set_num_threads(args.threads or available_cores())

    from arvis.engine.sampling import SamplingConfig
    from arvis.hub import load_pipeline
    from arvis.methods import decode
    from arvis.models.protocol import Condition

    ref_gpt, ref_solver, ref_jacobi = import_reference(repo)
    pipe, _, _ = load_pipeline(args.model, torch.float32, "cpu")
    model = pipe.transformer.float().eval()
    cfg = model.config
    if cfg.model_type != "c2i":
        raise ValueError(f"--model: {args.model!r} is {cfg.model_type}; this comparison drives their class-"
                         f"conditional path (c2i models only)")
    B, N, V, W = args.batch, model.layout.num_tokens, cfg.vocab_size, args.window
    if N - W - 2 <= 3:
        raise ValueError(f"--window {W} leaves the reference no Jacobi interval on {N} tokens "
                         f"(needs N - window - 2 > 3)")
    gpt = reference_transformer(ref_gpt, model)
    max_diff = teacher_forced_max_diff(model, gpt, B)
    solver = reference_sjd(ref_solver, ref_jacobi, gpt, N, W, args.guidance_scale, args.top_k or V)

    sampling = SamplingConfig(guidance_scale=args.guidance_scale, top_k=args.top_k)
    interval = reference_interval(N, W)
    arvis_options = {"window": W, "init": "random"}
    if args.arvis_interval == "reference":
        arvis_options["jacobi_interval"] = interval

    def labels_for(seed: int) -> torch.Tensor:
        return torch.randint(0, cfg.num_classes, (B,), generator=torch.Generator().manual_seed(seed))

    def run_arvis(seed: int) -> float:
        gens = [torch.Generator().manual_seed(seed * B + b) for b in range(B)]
        condition = Condition(class_labels=labels_for(seed))
        _, stats = decode(model, condition, sampling, "sjd", gens, **arvis_options)
        return float(statistics.mean(s.target_forwards for s in stats.samples))

    def run_reference(seed: int) -> float:
        gpt.seed = seed  # their _sample seeds the global RNG and its generator from this
        torch.manual_seed(seed)  # their prefill samples from the global RNG before that
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), torch.no_grad():
            tokens = solver.generate(labels_for(seed), N, cfg_scale=args.guidance_scale, temperature=1.0,
                                     top_k=args.top_k, top_p=1.0, sample_logits=True)
        found = NFE_LINE.search(printed.getvalue())
        if found is None or tuple(tokens.shape) != (B, N):
            raise ReferenceIncompatible(f"their generate returned tokens of shape {tuple(tokens.shape)} and "
                                        f"printed {printed.getvalue()!r} (expected ({B}, {N}) and a "
                                        f"'gen loop num' line)")
        return 1.0 + int(found.group(1))  # their prefill forward + their loop's forwards

    try:
        times, forwards = interleaved_times({"arvis": run_arvis, "reference": run_reference}, args.repeats)
    except (AttributeError, TypeError) as e:
        import transformers

        raise ReferenceIncompatible(f"the SJD reference code fails at run time with transformers "
                                    f"{transformers.__version__}: {type(e).__name__}: {e}") from e
    arvis_forwards, ref_forwards = statistics.mean(forwards["arvis"]), statistics.mean(forwards["reference"])
    result = {"model": args.model, "window": W, "batch": B, "threads": torch.get_num_threads(),
              "guidance_scale": args.guidance_scale, "top_k": args.top_k, "repeats": args.repeats,
              "max_abs_logit_diff": max_diff,
              "reference_s": statistics.median(times["reference"]),
              "arvis_s": statistics.median(times["arvis"]),
              "reference_forwards": ref_forwards, "arvis_forwards": arvis_forwards,
              "reference_step_compression": N / ref_forwards, "arvis_step_compression": N / arvis_forwards,
              # Their jacobi_loop_interval_l / _r (counted from their first generated token), and arvis's
              # jacobi_interval in token indices (None: drafting everywhere).
              "reference_jacobi_loop_interval": [1, N - W - 2],
              "arvis_jacobi_interval": list(interval) if args.arvis_interval == "reference" else None}
    result["arvis_speedup_over_reference"] = result["reference_s"] / result["arvis_s"]
    write_record(result, args.json)
    return result


if __name__ == "__main__":
    try:
        main()
    except (ValueError, ReferenceIncompatible) as error:
        sys.exit(f"compare_sjd_reference: {error}")
