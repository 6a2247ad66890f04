"""The demo's logic without Gradio: limits, input validation, side-by-side runs, previews, statistics.

:mod:`arvis.demo.page` puts a Gradio page on top of this module; everything here is plain Python so
that it can be tested (and reused) without a browser or a server. Nothing here imports Gradio.

A request runs plain AR and the chosen method on the same model, condition, sampling settings and
per-image generators (image ``i`` uses ``seed_for(seed, i)``, arvis's one per-image seed rule), one
after the other on the same machine. Both runs stream progress from the pipeline's
``callback_on_step_end``; the callback only copies the token grid (a few times a second), and the
previews are rendered outside the decode.

Timing, fairly: the latencies shown come from ``timing_rounds`` interleaved rounds (AR, method, AR,
method…) decoded without any callback, and are the medians of the pipeline's own ``stats.latency_s``
(decode wall time). With "live preview" off, the visible runs (whose callback only counts tokens) are
the first round. It is still a few runs on a shared machine, and the table says how many:
``arvis bench`` gives medians over more repeats.

Nothing a user types ever becomes a file path: models are looked up by name in the mapping the
operator built the demo with, and the plots go to files whose names the demo makes up.

Every pipeline is asked only through its interface (:class:`arvis.pipelines.interface.ArvisPipeline`): what it
is, which methods run on it, and the resources they need all come from there.

Video pipelines (:class:`~arvis.pipelines.VideoPipeline`) run through the same
request, validation, streaming and timing: an "image" is then a clip. Previews are film strips (one row per
clip, its frames left to right, grey cells not committed yet), so the frames fill live; a finished side's
clips become one animated GIF (:func:`write_clips_gif`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import queue
import statistics
import tempfile
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import PIL.Image

from arvis.families import Capabilities
from arvis.methods.catalog import (
    APPLIES_WHEN,
    CAPABILITIES,
    RULE_PARAMETERS,
    DecoderKind,
    method_info,
    method_names,
)

if TYPE_CHECKING:  # torch and the pipelines load with the first model, after the page is served
    import torch

    from arvis.pipelines.interface import ArvisPipeline

SIDES = ("ar", "method")
PREVIEW_GREY = 0.5  # colour of not-yet-committed token cells in the previews


class DemoInputError(ValueError):
    """A request input outside the demo's stated limits (the message names the input and the range)."""


class RunCancelled(Exception):
    """Raised inside the decode callback when the request was abandoned (client gone, server closing)."""


# ----------------------------------------------------------------------------- limits
@dataclass(frozen=True)
class DemoLimits:
    """What a request may ask for, and how the server queues requests.

    Attributes:
        max_images: images per request (per side), ``1..max_images``.
        window: allowed range of a method's ``window`` option (drafts per forward).
        int_option: allowed range of any other integer method option.
        float_option: allowed range of any float method option.
        text_option_chars: longest free-text method option.
        guidance_scale: allowed classifier-free guidance range.
        temperature: allowed temperature range (0 = greedy).
        top_p_max: ``top_p`` must lie in ``(0, top_p_max]``.
        top_k_max: largest ``top_k`` (0 = off); also capped by the model's vocabulary.
        seed_max: seeds are ``0..seed_max`` (image ``i`` of a request uses ``seed_for(seed, i)``).
        timing_rounds: allowed range of the interleaved timing rounds per request.
        prompt_chars: longest prompt (text-conditional models).
        concurrency_limit: requests decoded at the same time (1 keeps the timings meaningful on a CPU).
        max_queue: requests waiting beyond those running; more get Gradio's "queue full" error.
        preview_interval_s: at most one preview (or progress update) per side this often.
        display_size: previews and results are scaled up (nearest neighbour) to at least this many pixels.
    """

    max_images: int = 4
    window: tuple[int, int] = (1, 64)
    int_option: tuple[int, int] = (0, 1024)
    float_option: tuple[float, float] = (0.0, 1000.0)
    text_option_chars: int = 64
    guidance_scale: tuple[float, float] = (0.0, 20.0)
    temperature: tuple[float, float] = (0.0, 5.0)
    top_p_max: float = 1.0
    top_k_max: int = 100_000
    seed_max: int = 2**31 - 1
    timing_rounds: tuple[int, int] = (1, 5)
    prompt_chars: int = 200
    concurrency_limit: int = 1
    max_queue: int = 16
    preview_interval_s: float = 0.3
    display_size: int = 256

    def __post_init__(self) -> None:
        for name in ("max_images", "text_option_chars", "prompt_chars", "concurrency_limit", "display_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"DemoLimits.{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.max_queue, int) or self.max_queue < 0:
            raise ValueError(f"DemoLimits.max_queue must be an integer >= 0, got {self.max_queue!r}")
        for name in ("window", "int_option", "float_option", "guidance_scale", "temperature"):
            lo, hi = getattr(self, name)
            if not lo <= hi:
                raise ValueError(f"DemoLimits.{name} must be (low, high) with low <= high, got {(lo, hi)}")
        if not 1 <= self.timing_rounds[0] <= self.timing_rounds[1]:
            raise ValueError(f"DemoLimits.timing_rounds must be (low, high) with 1 <= low <= high, got {self.timing_rounds}")
        if self.window[0] < 1:
            raise ValueError(f"DemoLimits.window must start at >= 1, got {self.window}")
        if not 0 < self.top_p_max <= 1:
            raise ValueError(f"DemoLimits.top_p_max must be in (0, 1], got {self.top_p_max}")
        if not 0 <= self.seed_max < 2**63:
            raise ValueError(f"DemoLimits.seed_max must be in [0, 2**63), got {self.seed_max}")
        if self.preview_interval_s <= 0:
            raise ValueError(f"DemoLimits.preview_interval_s must be > 0, got {self.preview_interval_s}")


# ----------------------------------------------------------------------------- models
@dataclass(frozen=True)
class ModelExamples:
    """What the page offers first for a model (:mod:`arvis.demo.examples`): recognisable ``classes`` (the first
    is selected), example ``prompts`` for a text-conditional model (the first is filled in) and the ``method`` spec
    it lands on when not its kind's (``name:key=value,…``; empty: :data:`~arvis.demo.examples.LANDING_METHODS`)."""

    classes: tuple[str, ...] = ()
    prompts: tuple[str, ...] = ()
    method: str = ""


def model_examples(folder_name: str) -> ModelExamples:
    """The examples :mod:`arvis.demo.examples` lists for a model folder's name (none for other folders)."""
    from arvis.demo.examples import MODEL_EXAMPLES

    entry = MODEL_EXAMPLES.get(folder_name, {})
    return ModelExamples(tuple(entry.get("classes", ())), tuple(entry.get("prompts", ())), entry.get("method", ""))


@dataclass
class DemoModel:
    """One model the demo offers: a pipeline (or a zero-argument loader) plus what to say about it.

    The page is built from what a model is (its :class:`~arvis.families.Capabilities`) before its weights load:
    ``arvis demo`` serves first and loads the models in the background (:class:`WarmUp`).

    Attributes:
        pipeline: a loaded :class:`~arvis.pipelines.interface.ArvisPipeline` (or ``None`` with ``loader``).
        loader: builds the pipeline on first use (then cached).
        untrained: random weights: the page shows a banner saying its images are noise.
        description: one line shown under the model choice.
        capabilities: what the model is, read from its folder's metadata (``None``: asked of the pipeline,
            loading it when only a loader is given).
        sampling_defaults: the folder's ``sampling_defaults.json`` (shown as the sampling inputs' placeholders
            before the weights load).
        examples: classes and prompts the page offers first.
    """

    pipeline: Any = None
    loader: Callable[[], Any] | None = None
    untrained: bool = False
    description: str = ""
    capabilities: Capabilities | None = None
    sampling_defaults: Mapping[str, Any] | None = None
    examples: ModelExamples = ModelExamples()
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _quiet: bool = field(default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.pipeline is None and self.loader is None:
            raise ValueError("DemoModel needs a pipeline or a loader")

    @property
    def loaded(self) -> bool:
        return self.pipeline is not None

    def get(self) -> Any:
        """The pipeline, loaded once (thread-safe); its console progress bar is switched off."""
        with self._lock:
            if self.pipeline is None:
                assert self.loader is not None
                self.pipeline = self.loader()
            if not self._quiet:
                self.pipeline.set_progress_bar_config(disable=True)  # the page shows progress instead
                self._quiet = True
            return self.pipeline

    def caps(self) -> Capabilities:
        """What the model is: the loaded pipeline's capabilities, else the folder's (loading only when neither
        is at hand)."""
        if self.pipeline is None and self.capabilities is not None:
            return self.capabilities
        return self.get().capabilities

    def sampling(self) -> dict[str, Any]:
        """The sampling settings a request gets when it leaves them out (the folder's, before the weights load)."""
        if self.pipeline is None and self.sampling_defaults is not None:
            from arvis.engine.sampling import SamplingConfig

            fields = {f.name: f.default for f in dataclasses.fields(SamplingConfig)}
            return {**fields, **{k: v for k, v in self.sampling_defaults.items() if k in fields}}
        return model_sampling_defaults(self.get())


class ModelSet:
    """The models a demo offers, by name. Names are looked up, never turned into paths."""

    def __init__(self, models: Mapping[str, Any]):
        if not models:
            raise ValueError("models: give at least one model")
        self.models: dict[str, DemoModel] = {}
        for name, m in models.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"models: names must be non-empty strings, got {name!r}")
            if isinstance(m, DemoModel):
                self.models[name] = m
            elif inspect.isroutine(m) or isinstance(m, functools.partial):  # a loader, not a pipeline (callable too)
                self.models[name] = DemoModel(loader=m)
            else:
                self.models[name] = DemoModel(pipeline=m)

    @property
    def names(self) -> list[str]:
        return list(self.models)

    def entry(self, name: Any) -> DemoModel:
        if not isinstance(name, str) or name not in self.models:
            raise DemoInputError(f"model: {_short(name)} is not one of this demo's models: {', '.join(self.models)}")
        return self.models[name]

    def pipeline(self, name: Any) -> Any:
        return self.entry(name).get()

    def info(self, name: Any) -> dict[str, Any]:
        """:func:`capabilities_info` of a model, without loading it when its folder's metadata is at hand."""
        return capabilities_info(self.entry(name).caps())


def is_video(pipe: ArvisPipeline) -> bool:
    """Whether ``pipe`` generates clips."""
    return pipe.is_video


def pipeline_layout(pipe: ArvisPipeline) -> Any:
    """The pipeline's token layout (at its default size, for pipelines whose backbone is built per call)."""
    return pipe.token_layout


def capabilities_info(caps: Capabilities) -> dict[str, Any]:
    """What the page needs to know about a model before its weights load: conditioning, classes, the words a
    text model knows, whether it makes clips, its decoder kind and the methods that run on it."""
    class_conditional = caps.conditioning == "class"
    names = caps.class_names
    n = caps.num_classes if class_conditional else 0
    return {
        "family": caps.family,
        "class_conditional": class_conditional,
        "num_classes": n,
        "class_choices": [(f"{i}: {names[i]}" if names else str(i), i) for i in range(n)],
        "has_text_encoder": not class_conditional,
        "vocabulary": list(caps.vocabulary),
        "video": caps.num_frames is not None,
        "kind": str(caps.kind),
        "methods": caps.methods(),
    }


def model_info(pipe: ArvisPipeline) -> dict[str, Any]:
    """:func:`capabilities_info` of a loaded pipeline, plus its token layout (vocabulary size, grid)."""
    layout = pipeline_layout(pipe)
    return {**capabilities_info(pipe.capabilities), "vocab_size": int(layout.vocab_size), "grid": list(layout.grid)}


def _landing_specs(kind: DecoderKind | str, model_spec: str = "") -> list[Any]:
    from arvis.demo.examples import LANDING_METHODS
    from arvis.methods.spec import parse_method_specs

    texts = ([model_spec] if model_spec else []) + list(LANDING_METHODS.get(str(DecoderKind(kind)), ()))
    return [parse_method_specs(text)[0] for text in texts]


def landing_method(caps: Capabilities, offered: list[str] | None = None, model_spec: str = ""
                   ) -> tuple[str, dict[str, Any]]:
    """The method (and its options) a model lands on: its own ``model_spec`` (:class:`ModelExamples`), else the
    first of its kind's :data:`arvis.demo.examples.LANDING_METHODS` that runs on it (and is ``offered``), else its
    first method other than ``ar``, else ``ar``."""
    methods = [m for m in caps.methods() if offered is None or m in offered]
    for spec in _landing_specs(caps.kind, model_spec):
        if spec.name in methods:
            return spec.name, spec.options_dict
    return next((m for m in methods if m != "ar"), methods[0] if methods else "ar"), {}


def preferred_options(method: str, kind: DecoderKind | str, model_spec: str = "") -> dict[str, Any]:
    """The options the page fills in for ``method`` on a model of ``kind`` beyond the declared defaults: those its
    landing spec gives it (the model's own ``model_spec``, else its kind's
    :data:`arvis.demo.examples.LANDING_METHODS`)."""
    return next((spec.options_dict for spec in _landing_specs(kind, model_spec) if spec.name == method), {})


def landing_condition(entry: DemoModel) -> tuple[int | None, str]:
    """``(class id, prompt)`` a model lands on: its first example class (else class 0), or its first example
    prompt (else an empty prompt)."""
    caps = entry.caps()
    if caps.conditioning != "class":
        return None, entry.examples.prompts[0] if entry.examples.prompts else ""
    for name in entry.examples.classes:
        if name in caps.class_names:
            return caps.class_names.index(name), ""
    return (0 if caps.num_classes else None), ""


class WarmUpYielded(Exception):
    """Raised inside a warm-up decode's callback when a request arrives: the decode stops at once (the step is
    taken again once the request ends)."""


def warm_up(pipe: ArvisPipeline, methods: list[str] | list[tuple[str, dict[str, Any]]] | None = None,
            yield_to: Callable[[], bool] | None = None) -> None:
    """One generation per method (default: every method this model runs; a method may come with its options), so a
    request's first run pays no start-up costs. ``yield_to()`` true (checked after every forward) stops the decode
    with :class:`WarmUpYielded`."""
    import torch

    info = capabilities_info(pipe.capabilities)
    condition: dict[str, Any] = {"class_labels": [0]} if info["class_conditional"] else {"prompt": ["warm-up"]}
    if info["vocabulary"]:  # a closed vocabulary: a prompt of one word it knows
        condition = {"prompt": [info["vocabulary"][0]]}

    def callback(_pipe: Any, _step: int, _committed: Any, _data: Any) -> None:
        if yield_to is not None and yield_to():
            raise WarmUpYielded()

    for item in methods or info["methods"]:
        method, options = (item, {}) if isinstance(item, str) else item
        if method in info["methods"]:
            pipe(**condition, generator=torch.Generator().manual_seed(0), output_type="latent", method=method,
                 callback_on_step_end=callback if yield_to is not None else None, **options)


class WarmUp:
    """Loads the demo's models and warms each up (plain AR, then the method it lands on), one step at a time in a
    background thread, so that the page is served first; requests go first.

    :meth:`request` wraps a request: a warm-up decode running stops at its next forward (its step is taken again
    later), a model load running is waited for, and no step starts until the request ends — so a request never
    shares the CPU with the warm-up (the timings stay meaningful). :meth:`status` is the progress the page shows.
    """

    def __init__(self, models: ModelSet, offered: list[str] | None = None):
        self.models = models
        self.offered = offered
        self.steps: list[tuple[str, str, Callable[[], None]]] = []  # (model, what, do)
        for name in models.names:
            entry = models.entry(name)
            self.steps.append((name, "loading", entry.get))
            method, options = landing_method(entry.caps(), offered, entry.examples.method)
            for spec in dict.fromkeys(["ar", method]):
                warm = functools.partial(self._warm, entry, spec, options if spec == method else {})
                self.steps.append((name, f"warming up {spec} on", warm))
        self.done = 0
        self.current: str | None = None
        self.failed: list[str] = []
        self._cv = threading.Condition()
        self._requests = 0
        self._stepping = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _warm(self, entry: DemoModel, method: str, options: Mapping[str, Any]) -> None:
        warm_up(entry.get(), [(method, dict(options))], yield_to=lambda: self._requests > 0 or self._stop.is_set())

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def finished(self) -> bool:
        return self.done == len(self.steps)

    def start(self) -> None:
        """Start the background thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="arvis-demo-warmup", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 60) -> None:
        """Stop after the step running (the server is closing)."""
        self._stop.set()
        with self._cv:
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        import logging

        for name, what, do in self.steps:
            while True:  # a step a request interrupted is taken again once the request ends
                with self._cv:
                    self._cv.wait_for(lambda: self._requests == 0 or self._stop.is_set())
                    if self._stop.is_set():
                        return
                    self._stepping, self.current = True, f"{what} {name}"
                try:
                    do()
                    yielded = False
                except WarmUpYielded:
                    yielded = True
                except Exception:  # a model that fails here fails its requests too, with their own message
                    logging.getLogger("arvis.demo").exception("warm-up: %s %s failed", what, name)
                    yielded = False
                    if name not in self.failed:
                        self.failed.append(name)
                finally:
                    with self._cv:
                        self._stepping, self.current = False, None
                        self._cv.notify_all()
                if not yielded:
                    break
            with self._cv:
                self.done += 1
                self._cv.notify_all()

    def busy(self) -> str | None:
        """What the warm-up is doing right now (a request would wait for it), or ``None``."""
        with self._cv:
            return self.current if self._stepping else None

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Hold the warm-up while a request runs (waiting first for the step running to end)."""
        with self._cv:
            self._requests += 1
            try:
                self._cv.wait_for(lambda: not self._stepping)
            except BaseException:
                self._requests -= 1
                self._cv.notify_all()
                raise
        try:
            yield
        finally:
            with self._cv:
                self._requests -= 1
                self._cv.notify_all()

    def status(self) -> str:
        """One line for the page: how far the warm-up is."""
        loaded = sum(self.models.entry(n).loaded for n in self.models.names)
        total = len(self.models.names)
        if not self.started:
            return ""
        if self.finished:
            failed = f"; failed: {', '.join(self.failed)} (see the server log)" if self.failed else ""
            return f"Warm-up done: {loaded}/{total} models loaded{failed}."
        doing = self.current or "waiting for a request to finish"
        return (f"Warming up in the background — step {self.done + 1}/{len(self.steps)}: {doing} "
                f"({loaded}/{total} models loaded). You can generate now: requests go first.")


# ----------------------------------------------------------------------------- method options
@dataclass(frozen=True)
class OptionSpec:
    """A method option the page offers.

    ``kind`` is ``int``, ``float``, ``bool``, ``choice`` or ``text``; ``choices`` lists the values the
    method accepts. ``shown_when = (option, values)``: the option only applies (and is only shown) while
    ``option`` has one of ``values`` (e.g. ``delta`` only for the ``lantern`` and ``bounded`` rules). ``words``:
    strings a number option also takes (``window="auto"``).
    """

    name: str
    kind: str
    default: Any
    choices: tuple[str, ...] = ()
    shown_when: tuple[str, tuple[str, ...]] | None = None
    words: tuple[str, ...] = ()

    def applies(self, values: Mapping[str, Any], defaults: Mapping[str, Any]) -> bool:
        if self.shown_when is None:
            return True
        option, allowed = self.shown_when
        chosen = values.get(option)
        return (defaults.get(option) if chosen is None else chosen) in allowed


# Which relaxed rules read which parameter (the others ignore it; arvis.methods.catalog.RULE_PARAMETERS): the page
# shows a parameter only while a rule that reads it is chosen.


def method_option_specs(method: str, kind: DecoderKind | str | None = None) -> list[OptionSpec]:
    """The options of ``method`` (of decoder ``kind``; every kind that has the name when ``None``) the demo offers,
    read from the method's declaration (:mod:`arvis.methods.catalog`): numbers, choices and text, with when they
    apply. Intervals and fractions keep their defaults; resources (a draft model, codebook neighbourhoods) come
    from the pipeline, never from the page.
    """
    kinds = [DecoderKind(kind)] if kind is not None else [k for k in DecoderKind if method in method_names(k)]
    declared = {o.name: o for k in kinds for o in method_info(method, k).options}
    specs = []
    for option in declared.values():
        if option.kind not in ("int", "float", "choice", "text"):
            continue
        when = (("acceptance", RULE_PARAMETERS[option.name]) if option.name in RULE_PARAMETERS
                else APPLIES_WHEN.get(option.name))
        specs.append(OptionSpec(option.name, option.kind, option.default, tuple(option.choices), when,
                                tuple(option.words)))
    return specs


def all_option_specs(methods: list[str]) -> dict[str, OptionSpec]:
    """One page widget per option name across ``methods`` (the first method's spec shapes it;
    choices are the union, narrowed per method when the method changes)."""
    out: dict[str, OptionSpec] = {}
    for m in methods:
        for spec in method_option_specs(m):
            if spec.name not in out:
                out[spec.name] = spec
            elif spec.kind == "choice" == out[spec.name].kind:
                merged = out[spec.name].choices + tuple(c for c in spec.choices if c not in out[spec.name].choices)
                out[spec.name] = dataclasses.replace(out[spec.name], choices=merged)
    return out


# ----------------------------------------------------------------------------- validation
def _short(value: Any, n: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 1] + "…"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e18 else f"{x:g}"


def _number(name: str, value: Any, lo: float, hi: float, *, integer: bool = False, lo_open: bool = False) -> Any:
    """A finite number in range (``[lo, hi]``, or ``(lo, hi]`` with ``lo_open``); ints stay ints."""
    span = f"{'(' if lo_open else '['}{_fmt(lo)}, {_fmt(hi)}]"
    what = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DemoInputError(f"{name} must be {what} in {span}, got {_short(value)}")
    if not math.isfinite(value):
        raise DemoInputError(f"{name} must be {what} in {span}, got {value}")
    if integer and not float(value).is_integer():
        raise DemoInputError(f"{name} must be {what} in {span}, got {value}")
    if value < lo or value > hi or (lo_open and value == lo):
        raise DemoInputError(f"{name} must be {what} in {span}, got {_fmt(value)}")
    return int(value) if integer else float(value)


@dataclass(frozen=True)
class DemoRequest:
    """A validated request: every field within :class:`DemoLimits` and the model's own ranges."""

    model: str
    class_label: int | None
    prompt: str | None
    method: str
    options: tuple[tuple[str, Any], ...]
    seed: int
    num_images: int
    guidance_scale: float
    top_k: int
    top_p: float
    temperature: float
    live_preview: bool
    timing_rounds: int = 1

    def condition_kwargs(self) -> dict[str, Any]:
        return {"class_labels": [self.class_label]} if self.prompt is None else {"prompt": [self.prompt]}

    def sampling_kwargs(self) -> dict[str, Any]:
        return {"guidance_scale": self.guidance_scale, "top_k": self.top_k, "top_p": self.top_p,
                "temperature": self.temperature}


def validate_options(method: str, values: Mapping[str, Any], limits: DemoLimits, caps: Capabilities) -> dict[str, Any]:
    """The options of ``method`` from ``values`` (widget values by option name; missing = default).

    Options that do not apply (e.g. ``delta`` under ``acceptance="exact"``) are ignored. The model's capabilities
    then check the result (:meth:`~arvis.families.Capabilities.check`, what
    :meth:`~arvis.pipelines.interface.ArvisPipeline.check_method` asks: the method runs on this model, which
    supplies what it needs), from its metadata, before anything loads or runs.
    """
    specs = method_option_specs(method, caps.kind)
    defaults = {spec.name: spec.default for spec in specs}
    out: dict[str, Any] = {}
    for spec in specs:
        value = values.get(spec.name)
        if value is None or (spec.kind in ("int", "float") and value == "") or not spec.applies(values, defaults):
            continue  # the method's default
        label = f"{method} option {spec.name}"
        if spec.kind == "bool":
            if not isinstance(value, bool):
                raise DemoInputError(f"{label} must be true or false, got {_short(value)}")
        elif spec.kind == "int" and isinstance(value, str) and value.strip() in spec.words:
            value = value.strip()  # a word the option takes besides numbers (window="auto")
        elif spec.kind == "int":
            lo, hi = limits.window if spec.name == "window" else limits.int_option
            if spec.words and isinstance(value, str):  # typed into a box that also offers words
                try:
                    value = float(value.strip())
                except ValueError:
                    raise DemoInputError(f"{label} must be an integer in [{lo}, {hi}] or one of "
                                         f"{', '.join(spec.words)}; got {_short(value)}") from None
            value = _number(label, value, lo, hi, integer=True)
        elif spec.kind == "float":
            value = _number(label, value, *limits.float_option)
        elif spec.kind == "choice":
            if value not in spec.choices:
                raise DemoInputError(f"{label} must be one of {', '.join(spec.choices)}; got {_short(value)}")
        else:
            if not isinstance(value, str) or len(value) > limits.text_option_chars or not value.isprintable():
                raise DemoInputError(f"{label} must be printable text of at most {limits.text_option_chars} "
                                     f"characters, got {_short(value)}")
        out[spec.name] = value
    try:  # the method's own validation (cross-option rules), and whether this model can run it
        caps.check(method, out)
    except (ValueError, TypeError) as err:
        raise DemoInputError(f"{method}: {err}") from None
    return out


@dataclass(frozen=True)
class DemoChoice:
    """The part of a request checked from a model's metadata alone (:func:`check_choice`, milliseconds)."""

    model: str
    class_label: int | None
    prompt: str | None
    method: str
    options: tuple[tuple[str, Any], ...]


def check_choice(models: ModelSet, limits: DemoLimits, *, model: Any, class_label: Any, prompt: Any, method: Any,
                 options: Mapping[str, Any], video: bool | None = None) -> DemoChoice:
    """Check the model, the condition, the method and its options from the model's capabilities — before its
    weights load and before anything runs; :class:`DemoInputError` names the input and what is allowed.

    A text model with a closed vocabulary (``Capabilities.vocabulary``) takes only the words it knows: the error
    lists them. ``video`` (when given): the model must generate clips (``True``) or images (``False``) — the page's
    tabs.
    """
    entry = models.entry(model)
    caps = entry.caps()
    info = capabilities_info(caps)
    if video is not None and info["video"] != video:
        raise DemoInputError(f"model: {model!r} generates {'clips' if info['video'] else 'images'}; choose "
                             f"it in the {'Video' if info['video'] else 'Images'} tab")
    label: int | None = None
    text: str | None = None
    if info["class_conditional"]:
        label = _class_label(class_label, caps)
    else:
        if not isinstance(prompt, str) or not prompt.strip():
            raise DemoInputError(f"prompt: model {model!r} is text-conditional; write a prompt "
                                 f"(1..{limits.prompt_chars} characters)")
        text = prompt.strip()
        if len(text) > limits.prompt_chars:
            raise DemoInputError(f"prompt must be at most {limits.prompt_chars} characters, got {len(text)}")
        if any(unicodedata.category(c)[0] == "C" for c in text):
            raise DemoInputError("prompt must not contain control characters")
        unknown = unknown_words(text, caps.vocabulary)
        if unknown:
            raise DemoInputError(f"prompt: model {model!r} does not know the word(s) {', '.join(map(repr, unknown[:5]))}; "
                                 f"it knows only these {len(caps.vocabulary)}: {', '.join(caps.vocabulary)}")
    if not isinstance(method, str) or method not in info["methods"]:
        raise DemoInputError(f"method: {_short(method)} does not run on model {model!r}; choose one of "
                             f"{', '.join(info['methods'])}")
    if not isinstance(options, Mapping):
        raise DemoInputError("method options must be a mapping of option name to value")
    opts = validate_options(method, options, limits, caps)
    return DemoChoice(model, label, text, method, tuple(sorted(opts.items())))


def unknown_words(prompt: str, vocabulary: tuple[str, ...] | list[str]) -> list[str]:
    """The words of ``prompt`` outside a closed ``vocabulary`` (none when the vocabulary is open, i.e. empty),
    split as arvis's word-level text encoder splits them (lower case; commas separate like spaces)."""
    if not vocabulary:
        return []
    known = set(vocabulary)
    return [w for w in prompt.lower().replace(",", " ").split() if w not in known]


def validate_request(models: ModelSet, limits: DemoLimits, *, model: Any, class_label: Any, prompt: Any,
                     method: Any, seed: Any, num_images: Any, guidance_scale: Any, top_k: Any, top_p: Any,
                     temperature: Any, live_preview: Any, options: Mapping[str, Any],
                     timing_rounds: Any = None, video: bool | None = None) -> DemoRequest:
    """Check every input of a request; :class:`DemoInputError` names the input and its allowed range.

    First :func:`check_choice` (the model's metadata), then the numbers, against the loaded model (its vocabulary
    size bounds ``top_k``). Sampling inputs left ``None`` take the model's defaults (its
    ``sampling_defaults.json``).
    """
    choice = check_choice(models, limits, model=model, class_label=class_label, prompt=prompt, method=method,
                          options=options, video=video)
    if not isinstance(live_preview, bool):
        raise DemoInputError(f"live_preview must be true or false, got {_short(live_preview)}")
    entry = models.entry(model)
    pipe = entry.get()
    defaults = model_sampling_defaults(pipe)
    guidance_scale = defaults["guidance_scale"] if guidance_scale is None else guidance_scale
    top_k = defaults["top_k"] if top_k is None else top_k
    top_p = defaults["top_p"] if top_p is None else top_p
    temperature = defaults["temperature"] if temperature is None else temperature
    vocab_size = int(pipeline_layout(pipe).vocab_size)
    return DemoRequest(
        model=model, class_label=choice.class_label, prompt=choice.prompt, method=choice.method,
        options=choice.options,
        seed=_number("seed", seed, 0, limits.seed_max, integer=True),
        num_images=_number("num_images", num_images, 1, limits.max_images, integer=True),
        guidance_scale=_number("guidance_scale", guidance_scale, *limits.guidance_scale),
        top_k=_number("top_k (0 = off)", top_k, 0, min(limits.top_k_max, vocab_size), integer=True),
        top_p=_number("top_p", top_p, 0.0, limits.top_p_max, lo_open=True),
        temperature=_number("temperature (0 = greedy)", temperature, *limits.temperature),
        live_preview=live_preview,
        timing_rounds=_number("timing_rounds", 1 if timing_rounds is None else timing_rounds, *limits.timing_rounds,
                              integer=True),
    )


def parse_options_text(method: Any, text: Any, limits: DemoLimits) -> dict[str, Any]:
    """Method options typed as text, ``key=value,key=value`` (the CLI's method-spec grammar, e.g.
    ``window=64,coupling=gumbel``) → a mapping for :func:`validate_request`; empty text: the defaults."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}
    chars = limits.text_option_chars * 4
    if not isinstance(text, str) or len(text) > chars or not text.isprintable() or ":" in text or ";" in text:
        raise DemoInputError(f"options must be printable key=value pairs joined by commas (at most {chars} "
                             f"characters), got {_short(text)}")
    if not isinstance(method, str) or method not in method_names():
        raise DemoInputError(f"method: {_short(method)} is not available; choose one of {', '.join(method_names())}")
    from arvis.methods.spec import parse_method_specs

    try:
        spec = parse_method_specs([f"{method}:{text.strip()}"])[0]
    except (TypeError, ValueError) as err:
        raise DemoInputError(f"{method} options: {err}") from None
    offered = {o.name for o in method_option_specs(method)}
    extra = sorted(set(spec.options_dict) - offered)
    if extra:
        raise DemoInputError(f"{method} options: {', '.join(extra)} cannot be set in the demo (it offers: "
                             f"{', '.join(sorted(offered)) or 'none'})")
    return spec.options_dict


def model_sampling_defaults(pipe: ArvisPipeline) -> dict[str, Any]:
    """The sampling settings a request gets when it leaves them out: the model folder's defaults."""
    return dataclasses.asdict(pipe.sampling_config())


def _class_label(value: Any, caps: Capabilities) -> int:
    n = caps.num_classes
    names = list(caps.class_names)
    if isinstance(value, str):
        head = value.split(":", 1)[0].strip()  # "3" or "3: dog" as shown in the dropdown
        if value in names:
            return names.index(value)
        if head.isascii() and head.isdecimal() and len(head) <= 12:
            value = int(head)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < n:
        return value
    known = f" or a class name ({', '.join(names[:8])}{'…' if len(names) > 8 else ''})" if names else ""
    raise DemoInputError(f"class_label must be a class id in [0, {n - 1}]{known}; got {_short(value)}")


# ----------------------------------------------------------------------------- images
def tile_images(images: list[PIL.Image.Image], display_size: int, columns: int | None = None) -> PIL.Image.Image:
    """Images side by side (two columns when more than two, or ``columns``), scaled up by an integer factor so
    the sheet's long side is at least about ``display_size`` pixels (nearest neighbour: token cells stay crisp)."""
    cols = columns or (len(images) if len(images) <= 2 else 2)
    rows = math.ceil(len(images) / cols)
    w, h = images[0].size
    factor = max(1, math.ceil(display_size / (max(cols, rows) * max(w, h, 1))))
    gap = 4
    sheet = PIL.Image.new("RGB", (cols * w * factor + (cols - 1) * gap, rows * h * factor + (rows - 1) * gap), "white")
    for k, im in enumerate(images):
        r, c = divmod(k, cols)
        sheet.paste(im.convert("RGB").resize((w * factor, h * factor), PIL.Image.NEAREST),
                    (c * (w * factor + gap), r * (h * factor + gap)))
    return sheet


def film_strip(frames: list[PIL.Image.Image], gap: int = 2) -> PIL.Image.Image:
    """A clip's frames side by side, left to right (what a video preview shows)."""
    w, h = frames[0].size
    strip = PIL.Image.new("RGB", (len(frames) * (w + gap) - gap, h), "white")
    for t, frame in enumerate(frames):
        strip.paste(frame.convert("RGB"), (t * (w + gap), 0))
    return strip


def render_partial(pipe: Any, tokens: torch.Tensor, known: torch.Tensor) -> list[PIL.Image.Image] | None:
    """Decode a partially committed token grid ``tokens [B, N]`` (or ``[B, N, D]``) / ``known [B, N]`` (the pipeline's
    :meth:`decode_tokens`, cells not committed yet grey): one image per sample, or for clips one
    :func:`film_strip` per clip. ``None`` when the layout is not a plain ``h × w`` (or ``T × h × w``) grid."""
    grid = tuple(pipeline_layout(pipe).grid)
    B, N = tokens.shape[:2]  # continuous tokens (MAR) carry their channels last: [B, N, D]
    if len(grid) not in (2, 3) or math.prod(grid) != N or (len(grid) == 3) != is_video(pipe):
        return None
    if not pipe.partial_previews:  # no partial decoding (VAR's pyramids)
        return None
    decoded = pipe.decode_tokens(tokens.view(B, *grid, *tokens.shape[2:]), "pil", known=known.view(B, *grid))
    return [film_strip(clip) for clip in decoded] if len(grid) == 3 else decoded


def placeholder(display_size: int, text: str = "") -> PIL.Image.Image:
    del text
    return PIL.Image.new("RGB", (display_size, display_size), (236, 236, 236))


# ----------------------------------------------------------------------------- runs
@dataclass
class Progress:
    """A streaming update from one side: tokens committed so far, and a preview when rendered."""

    side: str
    committed: int
    total: int
    image: PIL.Image.Image | None = None


@dataclass
class RunResult:
    """One side's finished run; ``latencies_s`` are its timed decodes (module docstring), filled by
    :func:`side_by_side`."""

    side: str
    method: str
    options: dict[str, Any]
    images: list[PIL.Image.Image]
    tokens: torch.Tensor
    stats: Any  # arvis.engine.BatchStats
    previews: int
    lossless: bool
    latencies_s: list[float] = field(default_factory=list)
    kind: str = "token"  # the model's decoder kind (what the method's guarantee means: method_promise)

    @property
    def decode_latency_s(self) -> float:
        """Median of the timed decodes (the pipeline's ``stats.latency_s``)."""
        return statistics.median(self.latencies_s) if self.latencies_s else self.stats.latency_s


def _generators(request: DemoRequest) -> list[torch.Generator]:
    from arvis.utils.random import image_generators

    return image_generators(request.seed, range(request.num_images))


def stream_run(pipe: Any, request: DemoRequest, side: str, method: str, options: Mapping[str, Any],
               limits: DemoLimits, cancel: threading.Event, call_kwargs: Mapping[str, Any] | None = None
               ) -> Iterator[Progress | RunResult]:
    """Run one side in a worker thread; yield :class:`Progress` while it decodes, then its :class:`RunResult`.

    The decode's callback only copies the token grid (at most every ``preview_interval_s``); previews are
    rendered here, in the consumer's thread, outside the decode. Closing the iterator early (client gone)
    sets ``cancel``: the next decode callback raises :class:`RunCancelled` and the worker ends.
    """
    out: queue.Queue = queue.Queue()
    total = request.num_images * int(pipeline_layout(pipe).num_tokens)
    video = is_video(pipe)
    last = [0.0]

    def callback(_pipe: Any, _forward: int, committed: torch.Tensor, data: Mapping[str, torch.Tensor]) -> None:
        if cancel.is_set():
            raise RunCancelled()
        now = time.perf_counter()
        if now - last[0] >= limits.preview_interval_s:
            last[0] = now
            out.put(("snapshot", int(committed.sum()), data["tokens"], data["known"]))

    def work() -> None:
        try:
            # A video pipeline always hands the callback the token grid (no tensor-inputs argument).
            tensors = {} if video else {"callback_on_step_end_tensor_inputs": ["tokens", "known"]}
            result = pipe(**request.condition_kwargs(), **_count_kwargs(pipe, request.num_images),
                          generator=_generators(request), **request.sampling_kwargs(), output_type="pil",
                          callback_on_step_end=callback, method=method, **tensors, **dict(options),
                          **dict(call_kwargs or {}))
            out.put(("done", result))
        except BaseException as err:  # handed to the consumer, which re-raises it in the request's thread
            out.put(("error", err))

    worker = threading.Thread(target=work, name=f"arvis-demo-{side}", daemon=True)
    worker.start()
    finished = False
    previews = 0
    try:
        while True:
            item = out.get()
            while item[0] == "snapshot" and not out.empty():  # rendering fell behind: show the latest only
                item = out.get()
            kind = item[0]
            if kind == "error":
                finished = True
                raise item[1]
            if kind == "done":
                finished = True
                result = item[1]
                images = result.frames if video else result.images  # clips: lists of frames
                yield RunResult(side, method, dict(options), list(images), result.tokens, result.stats, previews,
                                pipe.is_lossless(method, options), kind=str(pipe.decoder_kind))
                return
            _, committed, tokens, known = item
            image = None
            if request.live_preview:
                parts = render_partial(pipe, tokens, known)
                image = tile_images(parts, limits.display_size, columns=1 if video else None) if parts else None
                previews += 1
            yield Progress(side, committed, total, image)
    finally:
        if not finished:  # abandoned mid-run: stop the decode at its next callback
            cancel.set()
        worker.join(timeout=60)


def timed_decode(pipe: Any, request: DemoRequest, method: str, options: Mapping[str, Any],
                 call_kwargs: Mapping[str, Any] | None = None) -> float:
    """One decode of the request's images without any callback: the pipeline's ``stats.latency_s``."""
    out = pipe(**request.condition_kwargs(), **_count_kwargs(pipe, request.num_images), generator=_generators(request),
               **request.sampling_kwargs(), output_type="latent", method=method, **dict(options),
               **dict(call_kwargs or {}))
    return float(out.stats.latency_s)


def _count_kwargs(pipe: Any, n: int) -> dict[str, int]:
    """Samples per condition, by the pipeline's own argument name (diffusers: images or videos per prompt)."""
    return {"num_videos_per_prompt" if is_video(pipe) else "num_images_per_prompt": n}


def write_clips_gif(clips: list[list[PIL.Image.Image]], folder: str | Path, display_size: int,
                    fps: float = 4.0) -> Path:
    """One side's clips as one animated GIF in ``folder`` (a file name the demo makes up): frame ``t`` shows
    frame ``t`` of every clip, tiled and scaled up as :func:`tile_images` does."""
    from arvis.pipelines.pipeline_video import export_frames

    frames = [tile_images([clip[t] for clip in clips], display_size) for t in range(len(clips[0]))]
    path = Path(tempfile.mkstemp(suffix=".gif", prefix="clips-", dir=folder)[1])
    return export_frames(frames, path, fps=fps)


def side_by_side(models: ModelSet, request: DemoRequest, limits: DemoLimits,
                 cancel: threading.Event | None = None) -> Iterator[Progress | RunResult]:
    """Plain AR, then the chosen method, on the same seeds: yields both sides' progress, then both results
    with their timed decodes (module docstring: the timing rounds)."""
    cancel = cancel or threading.Event()
    pipe = models.pipeline(request.model)
    results: dict[str, RunResult] = {}
    # The AR side runs the sampler the method is exact for (MAR's cspd-exact with final_std > 0 is exact for AR
    # with the same last-step std): the pipeline says which options of "ar" that takes.
    ar_options = pipe.baseline_options(request.method, dict(request.options))
    sides = (("ar", "ar", ar_options, {}), ("method", request.method, dict(request.options), {}))
    for side, method, options, kwargs in sides:
        for item in stream_run(pipe, request, side, method, options, limits, cancel, kwargs):
            if isinstance(item, RunResult):
                results[side] = item
            else:
                yield item
    if not request.live_preview:  # the visible runs only counted tokens: they are the first round
        for side in results.values():
            side.latencies_s.append(float(side.stats.latency_s))
    for _ in range(request.timing_rounds - len(results["ar"].latencies_s)):
        for side, method, options, kwargs in sides:
            if cancel.is_set():
                raise RunCancelled()
            yield Progress(side, -1, -1)  # "timing…" for the page
            results[side].latencies_s.append(timed_decode(pipe, request, method, options, kwargs))
    yield results["ar"]
    yield results["method"]


# ----------------------------------------------------------------------------- statistics
def spec_label(method: str, options: Mapping[str, Any], kind: DecoderKind | str | None = None) -> str:
    """``sjd window=16`` — the method and the options that differ from its defaults."""
    defaults = {s.name: s.default for s in method_option_specs(method, kind)}
    changed = [f"{k}={v}" for k, v in sorted(options.items()) if defaults.get(k, object()) != v]
    return " ".join([method, *changed])


@dataclass(frozen=True)
class Promise:
    """What a method promises about its output next to plain AR's on the same seed.

    Attributes:
        lossless: it samples the model's own distribution.
        identical: its tokens are expected to equal AR's, token for token (lossless with Gumbel coupling).
        label: a few words for the table's column header.
        note: one or two sentences for the page.
    """

    lossless: bool
    identical: bool
    label: str
    note: str


def method_promise(method: str, kind: DecoderKind | str, options: Mapping[str, Any]) -> Promise:
    """What ``method`` with ``options`` promises on a model of decoder ``kind`` (from its declaration in
    :mod:`arvis.methods.catalog`): lossy; lossless and token-identical to AR (Gumbel coupling, drafts from the
    target's own noise: a method that needs no other model); lossless in distribution only — with the reason its
    tokens differ from AR's."""
    info = method_info(method, kind)
    options = dict(options)
    lossless = info.is_lossless(options)
    declared = {o.name: o.default for o in info.options}
    coupling = options.get("coupling", declared.get("coupling"))
    if method == "ar":
        return Promise(True, True, "the baseline", "Plain autoregressive decoding: the baseline itself.")
    if not lossless:
        return Promise(False, False, "**lossy**", "Lossy: its images follow a different distribution from the "
                       "model's (FID measures the cost), so its tokens are not expected to equal AR's.")
    if coupling == "gumbel" and not info.needs:
        return Promise(True, True, "lossless, AR's tokens", "Lossless, and with Gumbel coupling it reproduces AR's "
                       "tokens exactly on the same seed: the same image, in fewer forwards.")
    if coupling == "gumbel":  # the drafts come from another model, whose sampling draws on the same generator
        return Promise(True, False, "lossless, other draws", f"Lossless: it samples the model's own distribution; "
                       f"its drafter ({'; '.join(CAPABILITIES[n] for n in info.needs)}) draws random numbers of "
                       "its own, so even with Gumbel coupling its tokens are not expected to equal AR's.")
    if DecoderKind(kind) == DecoderKind.CONTINUOUS:
        return Promise(True, False, "exact in distribution", f"Exact in distribution: {method} samples the very "
                       "distribution plain AR samples (the same sampler and final_std), so its identity with AR is a "
                       "distributional claim; its continuous tokens come from other random draws and are not "
                       "expected to equal AR's.")
    if coupling is not None:
        return Promise(True, False, "lossless, other draws", f"Lossless: it samples the model's own distribution, "
                       f"but with coupling={coupling} its random draws differ from AR's, so its tokens differ; "
                       "coupling=gumbel reproduces AR's tokens exactly.")
    return Promise(True, False, "lossless, other draws", "Lossless: it samples the model's own distribution, but "
                   "its random draws differ from AR's, so its tokens are not expected to equal AR's.")


def speed_words(speedup: float) -> str:
    """``1.90× faster`` / ``1.23× slower`` (never "0.81× faster") from a speedup (AR latency / method latency)."""
    if not math.isfinite(speedup) or speedup <= 0:
        return "speed not measured"
    if round(speedup, 2) == 1.0:
        return "as fast as plain AR"
    return f"{speedup:.2f}× faster" if speedup > 1 else f"{1 / speedup:.2f}× slower"


def _side_record(run: RunResult) -> dict[str, Any]:
    s = run.stats.summary()
    return {
        "method": run.method,
        "options": run.options,
        "label": spec_label(run.method, run.options, run.kind),
        "lossless": run.lossless,
        "images": s["samples"],
        "tokens_per_image": s["tokens"],
        "target_forwards_per_image": s["target_forwards"],
        "batch_target_forwards": s["batch_target_forwards"],
        "draft_forwards_per_image": s["draft_forwards"],
        "step_compression": s["step_compression"],
        "mean_accepted_per_forward": s["accepted_per_forward"],
        "previews": run.previews,
        "decode_latency_s": run.decode_latency_s,
        "latency_rounds_s": list(run.latencies_s),
        "peak_memory_mb": s["peak_memory_mb"],
    }


def comparison(request: DemoRequest, ar: RunResult, other: RunResult, untrained: bool) -> dict[str, Any]:
    """The statistics of a side-by-side request as plain JSON-able data."""
    import torch

    a, m = _side_record(ar), _side_record(other)
    promise = method_promise(other.method, other.kind, other.options)
    speedup = a["decode_latency_s"] / m["decode_latency_s"]
    return {
        "model": request.model,
        "untrained_model": untrained,
        "decoder_kind": other.kind,
        "condition": {"class_label": request.class_label} if request.prompt is None else {"prompt": request.prompt},
        "seed": request.seed,
        "num_images": request.num_images,
        "sampling": request.sampling_kwargs(),
        "live_preview": request.live_preview,
        "ar": a,
        "method": m,
        "speedup": speedup,
        "speed": speed_words(speedup),
        "forward_reduction": a["batch_target_forwards"] / max(m["batch_target_forwards"], 1),
        "tokens_identical_to_ar": bool(torch.equal(ar.tokens, other.tokens)),
        "identity_expected": promise.identical,
        "promise": promise.note,
        "timing_rounds": request.timing_rounds,
        "timing": timing_note(request),
    }


def timing_note(request: DemoRequest) -> str:
    rounds = request.timing_rounds
    how = (f"median of {rounds} interleaved decodes per side" if rounds > 1 else
           "a single decode per side (not a benchmark)")
    return (f"{how}, AR first, without previews or callbacks; latency = the pipeline's stats.latency_s (tokens "
            f"only, the VQ decoder excluded)")


def identity_words(stats: Mapping[str, Any]) -> str:
    """``yes`` / ``no`` for "tokens identical to AR", saying whether the method promised it."""
    same, expected = stats["tokens_identical_to_ar"], stats["identity_expected"]
    if same:
        return "yes"
    return "**no, though Gumbel coupling promises it**" if expected else "no (not expected)"


def done_message(stats: Mapping[str, Any]) -> str:
    """The status line of a finished request."""
    m, a = stats["method"], stats["ar"]
    return (f"Done: {m['label']} took {m['batch_target_forwards']} forwards vs {a['batch_target_forwards']} for "
            f"plain AR ({stats['speed']}); tokens identical to AR: {identity_words(stats)}.")


def stats_markdown(stats: Mapping[str, Any]) -> str:
    """A two-column Markdown table (plain AR | method) of the headline figures."""
    a, m = stats["ar"], stats["method"]
    promise = method_promise(m["method"], stats.get("decoder_kind", "token"), m["options"])
    speed = f"**{stats['speedup']:.2f}×**" + ("" if stats["speedup"] >= 1 else f" ({stats['speed']})")
    rows = [
        ("target forwards / image", f"{a['target_forwards_per_image']:.0f}", f"{m['target_forwards_per_image']:.1f}"),
        ("batch forwards", f"{a['batch_target_forwards']}", f"{m['batch_target_forwards']}"),
        ("step compression", f"{a['step_compression']:.2f}×", f"**{m['step_compression']:.2f}×**"),
        ("mean tokens / forward", f"{a['mean_accepted_per_forward']:.2f}", f"{m['mean_accepted_per_forward']:.2f}"),
        ("latency (decode)", f"{a['decode_latency_s']:.3f} s", f"{m['decode_latency_s']:.3f} s"),
        ("speedup (latency)", "1.00×", speed),
    ]
    lines = [f"| | plain AR | {m['label']} ({promise.label}) |", "|---|---:|---:|"]
    lines += [f"| {name} | {x} | {y} |" for name, x, y in rows]
    lines.append(f"| tokens identical to AR | | {identity_words(stats)} |")
    lines += ["", f"<small>{promise.note} Timing: {stats['timing']}. For medians over repeats run `arvis bench`."
                  "</small>"]
    if stats["untrained_model"]:
        lines.insert(0, "**Untrained model (random weights): the images are noise; only the statistics mean anything.**\n")
    return "\n".join(lines)


_PLOT_LOCK = threading.Lock()  # matplotlib's pyplot is not thread-safe


def stats_plots(ar: RunResult, other: RunResult, grid: list[int], model: str = "") -> tuple[PIL.Image.Image,
                                                                                          PIL.Image.Image]:
    """The accepted-per-forward histogram and the decode-order heat map (sample 0), from
    :mod:`arvis.eval.plots`, rendered into temporary files whose names the demo chooses."""
    from arvis.eval.plots import plot_accepted_histogram, plot_decode_order

    if len(grid) == 3:  # a clip: its frames stacked top to bottom
        grid = [grid[0] * grid[1], grid[2]]
    records = []
    for run, label in ((ar, "plain AR"), (other, spec_label(other.method, other.options))):
        records.append({"spec": label, "grid": grid, "model": model, **run.stats.summary(details=True)})
    with _PLOT_LOCK, tempfile.TemporaryDirectory(prefix="arvis-demo-") as tmp:
        images = []
        for fn, name in ((plot_accepted_histogram, "histogram.png"), (plot_decode_order, "decode_order.png")):
            path = fn(records, Path(tmp) / name)
            with PIL.Image.open(path) as im:
                images.append(im.convert("RGB"))
    return images[0], images[1]
