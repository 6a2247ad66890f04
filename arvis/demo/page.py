"""The arvis Gradio demo: plain AR and a parallel decoding method side by side, live.

Launch with ``arvis demo`` (see ``arvis demo --help``), or from Python::

    from arvis.demo.page import build_demo, launch
    from arvis.hub import tiny_random_pipeline
    demo = build_demo({"tiny-random": tiny_random_pipeline()})
    launch(demo)                      # http://127.0.0.1:7860

Pick a model, a class (or a prompt), a method and its options, a seed; the page runs plain AR and
the method on the same seed, streams partial images as tokens commit (grey cells are not committed
yet), then shows the statistics table, the accepted-per-forward histogram and the decode-order heat
map (both from :mod:`arvis.eval.plots`). What is measured and how: :mod:`arvis.demo.core`.

A newcomer's first screen (1280x800): the first model, one of its recognisable classes (or an example prompt,
with the words a text model knows) and the method it lands on — MC-SJD with Gumbel coupling on token models,
lossless and token for token AR's own images — with Generate above the fold (:mod:`arvis.demo.examples` holds
these choices). The method choice holds only the methods that run on the selected model (its capabilities), and
a request is checked against them before anything loads or runs. With ``warm_up=True`` the page is served
first and the models load and warm up in the background, the page showing the progress; requests go first (a
warm-up decode stops at its next forward, a model load is waited for: :class:`~arvis.demo.core.WarmUp`).

Hardening: the server binds 127.0.0.1 unless told otherwise; one queue with a concurrency limit and a
maximum size (beyond it callers get Gradio's "queue full" error); ``api_open=False`` so the REST
routes cannot skip the queue; every input is checked against :class:`~arvis.demo.core.DemoLimits` and
rejected with a message naming it (and one log line, no traceback); no input ever becomes a file path;
the upload route is closed (the page has no upload widget) and no extra paths are served; the result
images Gradio caches live in a temporary folder of the server's own, removed when it shuts down.

With video models among the models (:class:`~arvis.pipelines.VideoPipeline`), the page has two tabs: Images
(below) and Video (:func:`video_tab`: AR and a method on the same clips, film strips filling live, then each
side's clips as an animated GIF and the same statistics; endpoint ``/generate_video``).

The API (``gradio_client``): endpoint ``/generate`` with parameters ``model, class_label, prompt,
method, seed, num_images, guidance_scale, top_k, top_p, temperature, live_preview, timing_rounds`` and
one ``opt_<name>`` per method option (``opt_window``, ``opt_init``, ``opt_acceptance``…; ``None`` = what the
page fills in for the chosen method: its declared default, or the demo's landing option such as MC-SJD's
``coupling=gumbel``; sampling inputs left ``None`` take the model's defaults; options the chosen method (or its
acceptance rule) does not use are ignored, since the page sends every option widget). It returns
``(ar_image, method_image, status, stats_markdown, stats_json, histogram_image, decode_order_image)``.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import shutil
import threading
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import gradio as gr

from arvis.demo.core import (
    DemoInputError,
    DemoLimits,
    DemoModel,
    ModelSet,
    OptionSpec,
    Progress,
    RunCancelled,
    RunResult,
    WarmUp,
    all_option_specs,
    check_choice,
    comparison,
    done_message,
    landing_condition,
    landing_method,
    method_option_specs,
    method_promise,
    model_info,
    parse_options_text,
    placeholder,
    preferred_options,
    side_by_side,
    spec_label,
    stats_markdown,
    stats_plots,
    tile_images,
    validate_request,
    write_clips_gif,
)
from arvis.methods.catalog import method_info, method_names

log = logging.getLogger("arvis.demo")

OPTION_PREFIX = "opt_"
UNTRAINED_BANNER = ("⚠️ **Untrained model (random weights).** Its images are noise; only the decode statistics "
                    "mean anything. Train or install the shipped models to see real pictures.")
CSS = """
.arvis-banner {background: #fff3cd; border: 1px solid #e0c36a; border-radius: 6px; padding: 4px 10px;}
.arvis-stats table {font-size: 0.95em;}
"""


class DemoBlocks(gr.Blocks):
    """``gr.Blocks`` that removes, when it closes, every file it cached (result images, previews, plots).

    Gradio writes each image it serves into its temporary folder (``GRADIO_TEMP_DIR``), in one sub-folder
    per file named by the file's content hash, and only forgets some of them at shutdown. Pages open at the
    same time share that folder (the same image is the same path for all of them), so what appeared there
    since the first of them opened is removed when the last of them closes — a page closing never pulls an
    image from under another page still serving it. ``arvis demo`` also gives each server a folder of its own.
    """

    # cache folder -> (its open pages, the entries it held before the first of them opened)
    _open: ClassVar[dict[Path, tuple[weakref.WeakSet, set[Path]]]] = {}

    def __init__(self, *args: Any, **kwargs: Any):
        from gradio.utils import get_upload_folder

        self.cache_folder = Path(get_upload_folder()).resolve()
        pages, _ = DemoBlocks._open.get(self.cache_folder, (None, None))
        if not pages:
            before = set(self.cache_folder.iterdir()) if self.cache_folder.is_dir() else set()
            DemoBlocks._open[self.cache_folder] = (weakref.WeakSet(), before)
        super().__init__(*args, **kwargs)
        DemoBlocks._open[self.cache_folder][0].add(self)
        self.arvis_warmup: WarmUp | None = None  # build_demo(warm_up=True); launch() starts it

    def close(self, verbose: bool = True) -> None:
        if self.arvis_warmup is not None:
            self.arvis_warmup.stop()
        super().close(verbose)
        pages, before = DemoBlocks._open.get(self.cache_folder, (weakref.WeakSet(), set()))
        pages.discard(self)
        if pages:
            return  # another page on this folder is still serving
        DemoBlocks._open.pop(self.cache_folder, None)
        if self.cache_folder.is_dir():
            for entry in set(self.cache_folder.iterdir()) - before:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)


def _option_widget(spec, limits: DemoLimits, visible: bool) -> gr.components.Component:
    label = spec.name.replace("_", " ")
    if spec.kind == "bool":
        return gr.Dropdown(choices=[("true", True), ("false", False)], value=None, label=label, visible=visible)
    if spec.kind == "int" and spec.words:  # a number, or a word it also takes (window: "auto")
        lo, hi = limits.window if spec.name == "window" else limits.int_option
        return gr.Dropdown(choices=list(spec.words), value=None, label=f"{label} ({lo}–{hi} or {'/'.join(spec.words)})",
                           allow_custom_value=True, visible=visible)
    if spec.kind == "int":
        lo, hi = limits.window if spec.name == "window" else limits.int_option
        return gr.Number(value=None, label=f"{label} ({lo}–{hi})", step=1, precision=None, visible=visible)
    if spec.kind == "float":
        lo, hi = limits.float_option
        return gr.Number(value=None, label=f"{label} ({lo:g}–{hi:g})", precision=None, visible=visible)
    if spec.kind == "choice":
        return gr.Dropdown(choices=list(spec.choices), value=None, label=label, allow_custom_value=True,
                           visible=visible)
    return gr.Textbox(value=None, label=label, max_lines=1, max_length=limits.text_option_chars, visible=visible)


def method_note(method: str, kind: str, options: Mapping[str, Any]) -> str:
    """The line under the method choice: what the method does and what it promises next to plain AR."""
    return (f"<small>**{method}**: {method_info(method, kind).summary}. "
            f"{method_promise(method, kind, options).note}</small>")


def prompt_hint(info: Mapping[str, Any]) -> str:
    """The line under the prompt of a text model: the words it knows (a closed vocabulary), else that any text goes."""
    words = info["vocabulary"]
    if not words:
        return "<small>Any text; start from an example below.</small>"
    return f"<small>This model knows {len(words)} words, no others: {', '.join(words)}.</small>"


def _about(entry: DemoModel, info: Mapping[str, Any]) -> str:
    what = (f"class-conditional ({info['num_classes']} classes)" if info["class_conditional"] else
            "text-conditional")
    clips = ", video clips" if info["video"] else ""
    return (f"<small>{entry.description + ' — ' if entry.description else ''}{info['family']}, {what}{clips}, "
            f"{info['kind']} decoding; {len(info['methods'])} methods run on it.</small>")


def build_demo(models: Mapping[str, Any] | ModelSet, limits: DemoLimits | None = None, *,
               title: str = "arvis — parallel decoding, side by side", default_method: str | None = None,
               methods: list[str] | None = None, warm_up: bool = False) -> gr.Blocks:
    """The demo page, queue configured (concurrency limit, maximum size, no queue-skipping REST routes).

    The page is built from what each model is (its capabilities, from its folder's metadata when the
    :class:`~arvis.demo.core.DemoModel` carries them): no weights need to be loaded to serve it.

    Args:
        models: name → :class:`~arvis.demo.core.DemoModel`, a pipeline, or a zero-argument loader.
            The first is selected initially.
        limits: request and queue limits (default :class:`~arvis.demo.core.DemoLimits`).
        title: page title.
        default_method: the method selected initially (default: the one the first model lands on,
            :func:`~arvis.demo.core.landing_method`: MC-SJD with Gumbel coupling on token models).
        methods: methods offered (default: every declared method, ``arvis.methods.catalog.method_names()``); each
            model offers those of them that run on it.
        warm_up: load and warm up the models in the background once :func:`launch` serves the page, showing the
            progress on the page (:class:`~arvis.demo.core.WarmUp`).

    Returns:
        A ``gr.Blocks``; start it with :func:`launch`.
    """
    limits = limits or DemoLimits()
    model_set = models if isinstance(models, ModelSet) else ModelSet(models)
    methods = list(methods or method_names())
    unknown = [m for m in methods if m not in method_names()]
    if unknown:
        raise ValueError(f"methods: {unknown} are not declared methods ({', '.join(method_names())})")
    video_names = [n for n in model_set.names if model_set.info(n)["video"]]
    image_names = [n for n in model_set.names if n not in video_names]
    first = (image_names or video_names)[0]
    if default_method is not None and default_method not in methods:
        raise ValueError(f"default_method: {default_method!r} is not among the offered methods {methods}")
    warmup = WarmUp(model_set, methods) if warm_up else None
    specs = all_option_specs(methods)

    def offered(info: Mapping[str, Any]) -> list[str]:
        return [m for m in info["methods"] if m in methods]

    def landing(name: str, override: str | None = None) -> str:
        """The method model ``name`` lands on (``override`` when it runs on the model)."""
        entry = model_set.entry(name)
        caps = entry.caps()
        if override is not None and override in caps.methods():
            return override
        return landing_method(caps, methods, entry.examples.method)[0]

    def filled_options(name: Any, method: str) -> tuple[str, dict[str, OptionSpec], dict[str, Any]]:
        """``(kind, option specs, values the page fills in)`` of ``method`` on model ``name``: the declared
        defaults, with the model's landing options (:func:`~arvis.demo.core.preferred_options`)."""
        entry = model_set.entry(name)
        kind = str(entry.caps().kind)
        own = {s.name: s for s in method_option_specs(method, kind)}
        filled = {**{s.name: s.default for s in own.values()},
                  **preferred_options(method, kind, entry.examples.method)}
        return kind, own, filled

    def option_updates(name: Any, method: str, values: Mapping[str, Any], reset: bool) -> list[Any]:
        """Show the options ``method`` has on model ``name`` and that apply to the chosen acceptance rule
        (``reset``: to the values the page fills in)."""
        _, own, filled = filled_options(name, method)
        updates = []
        for option in option_widgets:
            spec = own.get(option)
            if spec is None:
                updates.append(gr.update(visible=False, value=None))
            elif not reset:
                updates.append(gr.update(visible=spec.applies(values, filled)))
            elif spec.kind == "choice":
                updates.append(gr.update(visible=spec.applies({}, filled), value=filled[option],
                                         choices=list(spec.choices)))
            else:
                updates.append(gr.update(visible=spec.applies({}, filled), value=filled[option]))
        return updates

    def page_options(name: Any, method: Any, values: Mapping[str, Any]) -> dict[str, Any]:
        """A request's options: those given, and for the ones left ``None`` the values the page fills in (so a
        click that beats the page's first fill, or an API call, runs what the page shows)."""
        given = {k: v for k, v in values.items() if v is not None}
        try:
            entry = model_set.entry(name)
            kind = str(entry.caps().kind)
            own = {s.name for s in method_option_specs(method, kind)}
            preferred = preferred_options(method, kind, entry.examples.method)
        except (DemoInputError, ValueError, TypeError):  # an unknown model or method: check_choice says so
            return given
        return {**{k: v for k, v in preferred.items() if k in own}, **given}

    def method_view(name: Any, method: Any) -> list[Any]:
        """Option widgets, the method note and the method image's label for ``method`` on model ``name``."""
        try:
            info = model_set.info(name)
        except DemoInputError as err:
            raise gr.Error(str(err), print_exception=False) from None
        if method not in offered(info):
            raise gr.Error(f"method: {method!r} does not run on model {name!r}; choose one of "
                           f"{', '.join(offered(info))}", print_exception=False)
        kind, _, filled = filled_options(name, method)
        return [*option_updates(name, method, {}, reset=True), gr.update(value=method_note(method, kind, filled)),
                gr.update(label=f"method: {spec_label(method, filled, kind)}")]

    def model_view(name: Any, method_override: str | None = None) -> dict[str, Any]:
        try:
            entry = model_set.entry(name)
            info = model_set.info(name)
        except DemoInputError as err:
            raise gr.Error(str(err)) from None
        label, text = landing_condition(entry)
        method = landing(name, method_override)
        sampling = entry.sampling()
        prompts = [[p] for p in entry.examples.prompts]
        return {
            "banner": gr.update(visible=entry.untrained),
            "about": _about(entry, info),
            "class": gr.update(choices=info["class_choices"], value=label, visible=info["class_conditional"]),
            "prompt": gr.update(value=text, visible=not info["class_conditional"]),
            "hint": gr.update(value=prompt_hint(info), visible=not info["class_conditional"]),
            "examples": gr.update(samples=prompts or [[""]], visible=bool(prompts)),
            "method": gr.update(choices=offered(info), value=method),
            "guidance": gr.update(value=None, placeholder=f"model default: {sampling['guidance_scale']:g}"),
            "top_k": gr.update(value=None, placeholder=f"model default: {sampling['top_k']}"),
            "top_p": gr.update(value=None, placeholder=f"model default: {sampling['top_p']:g}"),
            "temperature": gr.update(value=None, placeholder=f"model default: {sampling['temperature']:g}"),
        }

    with DemoBlocks(title=title, analytics_enabled=False, delete_cache=(1800, 3600)) as demo:
        demo.arvis_warmup = warmup
        gr.Markdown(f"## {title}\nPlain autoregressive decoding (one token per forward) next to a parallel method, "
                    "on the same model and seed. Grey cells: tokens not committed yet.", elem_id="arvis-intro")
        if warmup is not None:
            progress = gr.Markdown("Warming up in the background: loading the models…", elem_id="arvis-warmup",
                                   elem_classes="arvis-banner")
            timer = gr.Timer(1.0)

            def on_tick():
                if warmup.finished:
                    return gr.update(value=warmup.status(), visible=False), gr.Timer(active=False)
                return gr.update(value=warmup.status(), visible=True), gr.Timer(active=True)

            timer.tick(on_tick, outputs=[progress, timer], api_visibility="private", show_progress="hidden",
                       concurrency_limit=None)
            demo.load(on_tick, outputs=[progress, timer], api_visibility="private", show_progress="hidden",
                      concurrency_limit=None)
        if image_names:  # with video models too, images and clips get a tab each
            with gr.Tab("Images") if video_names else contextlib.nullcontext():
                view0 = model_view(first, default_method)
                method0 = view0["method"]["value"]
                info0 = model_set.info(first)
                kind0, own0, filled0 = filled_options(first, method0)
                banner = gr.Markdown(UNTRAINED_BANNER, visible=model_set.entry(first).untrained,
                                     elem_classes="arvis-banner", elem_id="arvis-banner")
                with gr.Row():
                    with gr.Column(scale=1, min_width=280):
                        model = gr.Dropdown(choices=image_names, value=first, label="model", allow_custom_value=True,
                                            elem_id="arvis-model")
                        about = gr.Markdown(view0["about"], elem_id="arvis-about")
                        class_label = gr.Dropdown(choices=info0["class_choices"], label="class",
                                                  value=view0["class"]["value"], visible=info0["class_conditional"],
                                                  allow_custom_value=True, elem_id="arvis-class")
                        prompt = gr.Textbox(value=view0["prompt"]["value"], label=f"prompt (≤ {limits.prompt_chars} "
                                            "characters)", max_lines=2, max_length=limits.prompt_chars,
                                            visible=not info0["class_conditional"], elem_id="arvis-prompt")
                        hint = gr.Markdown(prompt_hint(info0), visible=not info0["class_conditional"],
                                           elem_id="arvis-prompt-hint")
                        examples = gr.Dataset(components=[prompt], samples=view0["examples"]["samples"],
                                              label="example prompts", visible=view0["examples"]["visible"],
                                              elem_id="arvis-examples")
                        method = gr.Dropdown(choices=view0["method"]["choices"], value=method0, label="method",
                                             allow_custom_value=True, elem_id="arvis-method")
                        note = gr.Markdown(method_note(method0, kind0, filled0), elem_id="arvis-method-note")
                        run = gr.Button("Generate", variant="primary", elem_id="arvis-generate")
                        with gr.Accordion("method options", open=False):
                            # One widget per option name across methods. Their server-side value is None ("what
                            # the page fills in for the chosen method", page_options: API callers never inherit
                            # another method's value); the page fills in the shown method's values when it loads
                            # and when the model or the method changes.
                            option_widgets = {name: _option_widget(own0.get(name, spec), limits,
                                                                   visible=name in own0 and own0[name].applies({}, filled0))
                                              for name, spec in specs.items()}
                        with gr.Row():
                            seed = gr.Number(value=0, label=f"seed (0–{limits.seed_max})", step=1, precision=None)
                            num_images = gr.Number(value=1, label=f"images (1–{limits.max_images})", step=1, precision=None)
                        with gr.Accordion("sampling (empty: the model's defaults)", open=False):
                            g0, g1 = limits.guidance_scale
                            guidance = gr.Number(value=None, placeholder=view0["guidance"]["placeholder"],
                                                 label=f"guidance scale ({g0:g}–{g1:g}; 1 = off)", step=0.5, precision=None)
                            top_k = gr.Number(value=None, placeholder=view0["top_k"]["placeholder"], step=1,
                                              precision=None, label="top-k (0 = off)")
                            top_p = gr.Number(value=None, placeholder=view0["top_p"]["placeholder"],
                                              label=f"top-p (0–{limits.top_p_max:g}]", step=0.05, precision=None)
                            t0, t1 = limits.temperature
                            temperature = gr.Number(value=None, placeholder=view0["temperature"]["placeholder"], step=0.1,
                                                    precision=None, label=f"temperature ({t0:g}–{t1:g}; 0 = greedy)")
                            r0, r1 = limits.timing_rounds
                            timing_rounds = gr.Number(value=r0, step=1, precision=0,
                                                      label=f"timing rounds ({r0}–{r1}): interleaved decodes per side, "
                                                            "median shown")
                        live_preview = gr.Checkbox(value=True, label="live preview (its rendering time is measured and "
                                                                     "excluded from the latency)")
                    with gr.Column(scale=2):
                        status = gr.Markdown("Ready.", label="status", elem_id="arvis-status")
                        with gr.Row():
                            ar_image = gr.Image(label="plain AR", type="pil", format="png", interactive=False, height=300,
                                                elem_id="arvis-ar-image", value=placeholder(limits.display_size))
                            method_image = gr.Image(label=f"method: {spec_label(method0, filled0, kind0)}",
                                                    type="pil", format="png", interactive=False,
                                                    height=300, elem_id="arvis-method-image",
                                                    value=placeholder(limits.display_size))
                        stats_md = gr.Markdown(label="statistics", elem_classes="arvis-stats", elem_id="arvis-stats")
                        with gr.Row():
                            histogram = gr.Image(label="accepted per forward", type="pil", format="png", interactive=False,
                                                 height=260, elem_id="arvis-histogram")
                            decode_order = gr.Image(label="decode order (sample 0)", type="pil", format="png",
                                                    interactive=False, height=260, elem_id="arvis-decode-order")
                        with gr.Accordion("raw statistics (JSON)", open=False):
                            stats_json = gr.JSON(label="statistics_json")

                outputs = [ar_image, method_image, status, stats_md, stats_json, histogram, decode_order]

                def generate(model: Any, class_label: Any, prompt: Any, method: Any, seed: Any, num_images: Any,
                             guidance_scale: Any, top_k: Any, top_p: Any, temperature: Any, live_preview: Any,
                             timing_rounds: Any = None, **options: Any) -> Iterator[tuple]:
                    """Plain AR and the chosen method on the same seed: streams previews, then the statistics."""
                    skip = gr.skip()
                    values = page_options(model, method, {k.removeprefix(OPTION_PREFIX): v for k, v in options.items()})
                    try:  # the model's metadata answers first: nothing loads or runs for a refused request
                        check_choice(model_set, limits, model=model, class_label=class_label, prompt=prompt,
                                     method=method, options=values, video=False)
                    except DemoInputError as err:
                        log.warning("invalid input: %s", err)  # one line; the message goes back to the caller
                        raise gr.Error(str(err), title="Invalid input", print_exception=False) from None
                    entry = model_set.entry(model)
                    busy = warmup.busy() if warmup is not None else None
                    if busy or not entry.loaded:
                        why = f"the warm-up is {busy}" if busy else f"loading {model} (its first use)"
                        yield (skip, skip, f"Waiting: {why}; your request runs next…", skip, skip, skip, skip)
                    with warmup.request() if warmup is not None else contextlib.nullcontext():
                        yield from _generate(model, class_label, prompt, method, seed, num_images, guidance_scale,
                                             top_k, top_p, temperature, live_preview, timing_rounds, values)

                def _generate(model: Any, class_label: Any, prompt: Any, method: Any, seed: Any, num_images: Any,
                              guidance_scale: Any, top_k: Any, top_p: Any, temperature: Any, live_preview: Any,
                              timing_rounds: Any, values: Mapping[str, Any]) -> Iterator[tuple]:
                    try:
                        request = validate_request(
                            model_set, limits, model=model, class_label=class_label, prompt=prompt, method=method, seed=seed,
                            num_images=num_images, guidance_scale=guidance_scale, top_k=top_k, top_p=top_p,
                            temperature=temperature, live_preview=live_preview, timing_rounds=timing_rounds, video=False,
                            options=values)
                    except DemoInputError as err:
                        log.warning("invalid input: %s", err)
                        raise gr.Error(str(err), title="Invalid input", print_exception=False) from None
                    skip = gr.skip()
                    blank = placeholder(limits.display_size)
                    yield blank, blank, "Running plain AR…", "", None, None, None
                    cancel = threading.Event()
                    results: dict[str, RunResult] = {}
                    entry = model_set.entry(request.model)
                    kind = str(entry.caps().kind)
                    label = spec_label(request.method, dict(request.options), kind)
                    stream = side_by_side(model_set, request, limits, cancel)
                    try:
                        for item in stream:
                            name = "plain AR" if item.side == "ar" else label
                            if isinstance(item, Progress) and item.committed < 0:
                                text = f"Timing {name} (a decode without previews)…"
                                yield (skip, skip, text, skip, skip, skip, skip)
                            elif isinstance(item, Progress):
                                text = f"Running {name}… {item.committed}/{item.total} tokens committed"
                                image = item.image if item.image is not None else skip
                                yield ((image, skip) if item.side == "ar" else (skip, image)) + (text, skip, skip, skip, skip)
                            else:
                                results[item.side] = item
                                final = tile_images(item.images, limits.display_size)
                                text = f"Running {label}…" if item.side == "ar" else "Timing…"
                                shown = final if item.side == "ar" else gr.update(value=final, label=f"method: {label}")
                                yield ((shown, skip) if item.side == "ar" else (skip, shown)) + (text, skip, skip, skip, skip)
                    except RunCancelled:
                        return
                    except ValueError as err:  # arvis reports bad settings as ValueError naming the argument
                        log.warning("invalid settings: %s", err)
                        raise gr.Error(str(err), title="Invalid settings", print_exception=False) from None
                    except Exception:
                        log.exception("demo generation failed")
                        raise gr.Error("Generation failed (internal error; see the server log).") from None
                    finally:
                        stream.close()
                    stats = comparison(request, results["ar"], results["method"], entry.untrained)
                    hist, order = stats_plots(results["ar"], results["method"], model_info(entry.get())["grid"], request.model)
                    final_ar = tile_images(results["ar"].images, limits.display_size)
                    final_method = tile_images(results["method"].images, limits.display_size)
                    yield final_ar, final_method, done_message(stats), stats_markdown(stats), stats, hist, order

                # An explicit signature so the API lists every input as optional, the option inputs by name
                # (``opt_window``…) with None = "what the page fills in for the chosen method" (page_options).
                generate.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
                    [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
                     for p in list(inspect.signature(generate).parameters.values())[:-1]]
                    + [inspect.Parameter(OPTION_PREFIX + name, inspect.Parameter.KEYWORD_ONLY, default=None)
                       for name in option_widgets])
                run.click(generate, inputs=[model, class_label, prompt, method, seed, num_images, guidance, top_k, top_p,
                                            temperature, live_preview, timing_rounds],
                          inputs_kwargs={OPTION_PREFIX + name: w for name, w in option_widgets.items()},
                          outputs=outputs, api_name="generate", concurrency_limit=limits.concurrency_limit,
                          concurrency_id="generate")

                # --------------------------------------------------------------- page-only helpers (not in the API)
                method_outputs = [*option_widgets.values(), note, method_image]

                def on_model(name: Any):
                    view = model_view(name)
                    return [view["banner"], view["about"], view["class"], view["prompt"], view["hint"], view["examples"],
                            view["method"], view["guidance"], view["top_k"], view["top_p"], view["temperature"],
                            *method_view(name, view["method"]["value"])]

                model.change(on_model, inputs=model,
                             outputs=[banner, about, class_label, prompt, hint, examples, method, guidance, top_k, top_p,
                                      temperature, *method_outputs],
                             api_visibility="private", show_progress="hidden", concurrency_limit=None)

                def on_example(sample: Any):
                    return sample[0] if isinstance(sample, list | tuple) and sample else gr.skip()

                examples.click(on_example, inputs=examples, outputs=prompt, api_visibility="private",
                               show_progress="hidden", concurrency_limit=None)
                method.change(method_view, inputs=[model, method], outputs=method_outputs,
                              api_visibility="private", show_progress="hidden", concurrency_limit=None)
                demo.load(method_view, inputs=[model, method], outputs=method_outputs,
                          api_visibility="private", show_progress="hidden", concurrency_limit=None)
                # The acceptance rule decides which of k, delta, lam apply; it and the coupling decide what the
                # method promises (the note).
                watched = [n for n in ("acceptance", "coupling") if n in option_widgets]

                def on_option(name: Any, chosen: Any, *values: Any):
                    try:
                        kind, own, _ = filled_options(name, chosen)
                    except (DemoInputError, ValueError):  # a model or method the page is switching away from
                        return [gr.skip()] * (len(option_widgets) + 1)
                    given = {k: v for k, v in zip(watched, values, strict=True) if v is not None and k in own}
                    return [*option_updates(name, chosen, given, reset=False),
                            gr.update(value=method_note(chosen, kind, given))]

                for option in watched:
                    option_widgets[option].change(
                        on_option, inputs=[model, method, *(option_widgets[w] for w in watched)],
                        outputs=[*option_widgets.values(), note],
                        api_visibility="private", show_progress="hidden", concurrency_limit=None)
        if video_names:
            with gr.Tab("Video"):
                video_tab(demo, model_set, video_names, limits, methods, warmup)

    # One queue for everything; beyond max_size callers get "queue full". api_open=False: the REST
    # routes refuse queued events, so nobody can skip the queue.
    demo.queue(default_concurrency_limit=limits.concurrency_limit, max_size=limits.max_queue, api_open=False)
    demo.arvis_limits = limits  # type: ignore[attr-defined]  (read by launch and the tests)
    return demo


def video_tab(demo: DemoBlocks, model_set: ModelSet, names: list[str], limits: DemoLimits, methods: list[str],
              warmup: WarmUp | None = None) -> None:
    """The Video tab: plain AR and a method on the same clips (classes, seeds), film strips filling live, then
    each side's clips as an animated GIF and the statistics. Endpoint ``/generate_video`` with parameters
    ``model, class_label, method, options, seed, num_clips, guidance_scale, live_preview, timing_rounds``
    (``options``: ``key=value,…`` as in ``arvis generate --method``); it returns ``(ar_clips, method_clips,
    status, stats_markdown, stats_json)``."""

    def view(name: Any) -> tuple[dict[str, Any], int | None, str, str]:
        try:
            entry, info = model_set.entry(name), model_set.info(name)
        except DemoInputError as err:
            raise gr.Error(str(err)) from None
        method, options = landing_method(entry.caps(), methods, entry.examples.method)
        return info, landing_condition(entry)[0], method, ",".join(f"{k}={v}" for k, v in options.items())

    info0, class0, method0, options0 = view(names[0])
    with gr.Row():
        with gr.Column(scale=1, min_width=280):
            banner = gr.Markdown(UNTRAINED_BANNER, visible=model_set.entry(names[0]).untrained,
                                 elem_classes="arvis-banner")
            model = gr.Dropdown(choices=names, value=names[0], label="video model", allow_custom_value=True)
            class_label = gr.Dropdown(choices=info0["class_choices"], value=class0, label="class",
                                      allow_custom_value=True)
            method = gr.Dropdown(choices=[m for m in info0["methods"] if m in methods], value=method0, label="method",
                                 allow_custom_value=True)
            options = gr.Textbox(value=options0, max_lines=1,
                                 label="options (key=value,… as in `arvis generate --method`; empty = defaults)",
                                 max_length=limits.text_option_chars * 4)
            run = gr.Button("Generate clips", variant="primary", elem_id="arvis-generate-video")
            with gr.Row():
                seed = gr.Number(value=0, label=f"seed (0–{limits.seed_max})", step=1, precision=None)
                num_clips = gr.Number(value=1, label=f"clips (1–{limits.max_images})", step=1, precision=None)
            g0, g1 = limits.guidance_scale
            guidance = gr.Number(value=None, step=0.5, precision=None, label=f"guidance scale ({g0:g}–{g1:g}; 1 = off; "
                                 "empty: the model's default)")
            r0, r1 = limits.timing_rounds
            timing_rounds = gr.Number(value=r0, step=1, precision=0, label=f"timing rounds ({r0}–{r1})")
            live_preview = gr.Checkbox(value=True, label="live preview (frames filling as tokens commit)")
        with gr.Column(scale=2):
            status = gr.Markdown("Ready.", elem_id="arvis-video-status")
            with gr.Row():
                ar_clips = gr.Image(label="plain AR", type="pil", format="png", interactive=False, height=300,
                                    elem_id="arvis-ar-clips", value=placeholder(limits.display_size))
                method_clips = gr.Image(label="parallel method", type="pil", format="png", interactive=False,
                                        height=300, elem_id="arvis-method-clips", value=placeholder(limits.display_size))
            stats_md = gr.Markdown(elem_classes="arvis-stats", elem_id="arvis-video-stats")
            with gr.Accordion("raw statistics (JSON)", open=False):
                stats_json = gr.JSON(label="statistics_json")

    def generate_video(model: Any = None, class_label: Any = None, method: Any = None, options: Any = None,
                       seed: Any = None, num_clips: Any = None, guidance_scale: Any = None, live_preview: Any = None,
                       timing_rounds: Any = None) -> Iterator[tuple]:
        """Plain AR and the chosen method on the same clips: streams film strips, then GIFs and the statistics."""
        try:
            values = parse_options_text(method, options, limits)
            check_choice(model_set, limits, model=model, class_label=class_label, prompt=None, method=method,
                         options=values, video=True)
        except DemoInputError as err:
            log.warning("invalid input: %s", err)
            raise gr.Error(str(err), title="Invalid input", print_exception=False) from None
        skip = gr.skip()
        busy = warmup.busy() if warmup is not None else None
        if busy or not model_set.entry(model).loaded:
            why = f"the warm-up is {busy}" if busy else f"loading {model} (its first use)"
            yield skip, skip, f"Waiting: {why}; your request runs next…", skip, skip
        with warmup.request() if warmup is not None else contextlib.nullcontext():
            yield from _generate_video(model, class_label, method, values, seed, num_clips, guidance_scale,
                                       live_preview, timing_rounds)

    def _generate_video(model: Any, class_label: Any, method: Any, values: Mapping[str, Any], seed: Any,
                        num_clips: Any, guidance_scale: Any, live_preview: Any, timing_rounds: Any) -> Iterator[tuple]:
        try:
            request = validate_request(
                model_set, limits, model=model, class_label=class_label, prompt=None, method=method,
                seed=0 if seed is None else seed, num_images=1 if num_clips is None else num_clips,
                guidance_scale=guidance_scale, top_k=None, top_p=None, temperature=None,
                live_preview=True if live_preview is None else live_preview, timing_rounds=timing_rounds,
                options=values, video=True)
        except DemoInputError as err:
            log.warning("invalid input: %s", err)
            raise gr.Error(str(err), title="Invalid input", print_exception=False) from None
        skip, blank = gr.skip(), placeholder(limits.display_size)
        yield blank, blank, "Running plain AR…", "", None
        kind = str(model_set.entry(request.model).caps().kind)
        label = spec_label(request.method, dict(request.options), kind)
        results: dict[str, RunResult] = {}
        clips: dict[str, str] = {}
        folder = demo.cache_folder  # removed when the server shuts down (DemoBlocks)
        folder.mkdir(parents=True, exist_ok=True)
        stream = side_by_side(model_set, request, limits, threading.Event())
        try:
            for item in stream:
                name = "plain AR" if item.side == "ar" else label
                if isinstance(item, Progress):
                    text = (f"Timing {name}…" if item.committed < 0 else
                            f"Running {name}… {item.committed}/{item.total} tokens committed")
                    image = item.image if item.image is not None else skip
                    yield ((image, skip) if item.side == "ar" else (skip, image)) + (text, skip, skip)
                else:
                    results[item.side] = item
                    clips[item.side] = str(write_clips_gif(item.images, folder, limits.display_size))
                    shown = clips[item.side]
                    yield ((shown, skip) if item.side == "ar" else (skip, shown)) + (f"Finished {name}.", skip, skip)
        except RunCancelled:
            return
        except ValueError as err:
            log.warning("invalid settings: %s", err)
            raise gr.Error(str(err), title="Invalid settings", print_exception=False) from None
        except Exception:
            log.exception("demo video generation failed")
            raise gr.Error("Generation failed (internal error; see the server log).") from None
        finally:
            stream.close()
        stats = comparison(request, results["ar"], results["method"], model_set.entry(request.model).untrained)
        yield clips["ar"], clips["method"], done_message(stats), stats_markdown(stats), stats

    run.click(generate_video, inputs=[model, class_label, method, options, seed, num_clips, guidance, live_preview,
                                      timing_rounds],
              outputs=[ar_clips, method_clips, status, stats_md, stats_json], api_name="generate_video",
              concurrency_limit=limits.concurrency_limit, concurrency_id="generate")

    def on_model(name: Any):
        info, label, method, text = view(name)
        return (gr.update(visible=model_set.entry(name).untrained),
                gr.update(choices=info["class_choices"], value=label),
                gr.update(choices=[m for m in info["methods"] if m in methods], value=method),
                gr.update(value=text), gr.update(value=None))

    model.change(on_model, inputs=model, outputs=[banner, class_label, method, options, guidance],
                 api_visibility="private", show_progress="hidden", concurrency_limit=None)


class CloseRoutes:
    """ASGI middleware answering 404 for routes the page never uses: file uploads (the page has no upload
    widget, so an open ``/gradio_api/upload`` would only let anyone store files on the server)."""

    def __init__(self, app: Any, suffixes: tuple[str, ...] = ("/upload", "/upload_progress")):
        self.app = app
        self.suffixes = suffixes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path", "").rstrip("/").endswith(self.suffixes):
            from starlette.responses import PlainTextResponse

            await PlainTextResponse("Not Found: this demo takes no uploads", status_code=404)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def launch(demo: gr.Blocks, *, host: str = "127.0.0.1", port: int | None = 7860, share: bool = False,
           prevent_thread_lock: bool = False, quiet: bool = False) -> Any:
    """Serve ``demo``: on 127.0.0.1 unless ``host`` says otherwise; uploads closed; no extra paths served. Once the
    page answers, the models' warm-up starts in the background (``build_demo(warm_up=True)``)."""
    from starlette.middleware import Middleware

    # Gradio's own banner says "set share=True in launch()", which is wrong advice for `arvis demo` users (--share):
    # it stays quiet and this function says what to do instead.
    app = demo.launch(
        server_name=host, server_port=port, share=share, prevent_thread_lock=True, quiet=True,
        show_error=False,  # gr.Error messages reach the page; other exceptions' text stays in the server log
        max_file_size="1mb", allowed_paths=[], ssr_mode=False, mcp_server=False, enable_monitoring=False,
        run_history=False, footer_links=["api"], inbrowser=False, css=CSS,
        app_kwargs={"middleware": [Middleware(CloseRoutes)]},
    )
    warmup = demo.arvis_warmup if isinstance(demo, DemoBlocks) else None
    if warmup is not None:
        warmup.start()
    if not quiet:
        print(f"* Serving the demo on {demo.local_url}" + (f" and {demo.share_url}" if demo.share_url else ""),
              flush=True)
        if warmup is not None:
            print("* Loading and warming up the models in the background; the page shows the progress.", flush=True)
        if not share:
            print("* For a public gradio.live link: `arvis demo --share` (from Python: launch(demo, share=True)).",
                  flush=True)
    if not prevent_thread_lock:
        demo.block_thread()
    return app
