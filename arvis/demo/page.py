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
one ``opt_<name>`` per method option (``opt_window``, ``opt_init``, ``opt_acceptance``…; ``None`` = the
chosen method's default, and sampling inputs left ``None`` take the model's defaults; options the chosen
method (or its acceptance rule) does not use are ignored, since the page sends every option widget). It returns ``(ar_image, method_image, status, stats_markdown, stats_json,
histogram_image, decode_order_image)``.
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
    ModelSet,
    Progress,
    RunCancelled,
    RunResult,
    all_option_specs,
    comparison,
    is_video,
    method_option_specs,
    model_info,
    model_sampling_defaults,
    parse_options_text,
    placeholder,
    side_by_side,
    spec_label,
    stats_markdown,
    stats_plots,
    tile_images,
    validate_request,
    write_clips_gif,
)
from arvis.methods.catalog import method_names

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

    def close(self, verbose: bool = True) -> None:
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


def _default_method(methods: list[str]) -> str:
    for name in ("mc-sjd", "sjd"):
        if name in methods:
            return name
    return next((m for m in methods if m != "ar"), methods[0])


def _option_widget(spec, limits: DemoLimits, visible: bool) -> gr.components.Component:
    label = spec.name.replace("_", " ")
    if spec.kind == "bool":
        return gr.Dropdown(choices=[("true", True), ("false", False)], value=None, label=label, visible=visible)
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


def build_demo(models: Mapping[str, Any] | ModelSet, limits: DemoLimits | None = None, *,
               title: str = "arvis — parallel decoding, side by side", default_method: str | None = None,
               methods: list[str] | None = None) -> gr.Blocks:
    """The demo page, queue configured (concurrency limit, maximum size, no queue-skipping REST routes).

    Args:
        models: name → :class:`~arvis.demo.core.DemoModel`, a pipeline, or a zero-argument loader.
            The first is selected initially.
        limits: request and queue limits (default :class:`~arvis.demo.core.DemoLimits`).
        title: page title.
        default_method: the method selected initially (default MC-SJD when available).
        methods: methods offered (default: every declared method, ``arvis.methods.catalog.method_names()``); each
            model runs the ones that apply to it.

    Returns:
        A ``gr.Blocks``; start it with :func:`launch`.
    """
    limits = limits or DemoLimits()
    model_set = models if isinstance(models, ModelSet) else ModelSet(models)
    methods = list(methods or method_names())
    unknown = [m for m in methods if m not in method_names()]
    if unknown:
        raise ValueError(f"methods: {unknown} are not declared methods ({', '.join(method_names())})")
    method0 = default_method or _default_method(methods)
    if method0 not in methods:
        raise ValueError(f"default_method: {method0!r} is not among the offered methods {methods}")
    video_names = [n for n in model_set.names if is_video(model_set.pipeline(n))]
    image_names = [n for n in model_set.names if n not in video_names]
    first = (image_names or video_names)[0]
    info0 = model_info(model_set.pipeline(first))
    specs = all_option_specs(methods)
    own0 = {s.name: s for s in method_option_specs(method0)}
    defaults0 = {s.name: s.default for s in own0.values()}
    sampling0 = model_sampling_defaults(model_set.pipeline(first))

    def model_view(name: str, info: Mapping[str, Any]) -> dict[str, Any]:
        entry = model_set.entry(name)
        defaults = model_sampling_defaults(entry.get())  # the model folder decides
        return {
            "banner": gr.update(visible=entry.untrained),
            "class": gr.update(choices=info["class_choices"], value=info["class_choices"][0][1] if info["num_classes"] else None,
                               visible=info["class_conditional"]),
            "prompt": gr.update(visible=not info["class_conditional"]),
            "guidance": gr.update(value=float(defaults["guidance_scale"])),
            "top_k": gr.update(value=int(defaults["top_k"]),
                               label=f"top-k (0 = off, ≤ {min(limits.top_k_max, info['vocab_size'])})"),
            "about": (f"{entry.description + ' — ' if entry.description else ''}"
                      f"{'class' if info['class_conditional'] else 'text'}-conditional, "
                      f"{'×'.join(map(str, info['grid']))} tokens, vocabulary {info['vocab_size']}"),
        }

    view0 = model_view(first, info0)
    with DemoBlocks(title=title, analytics_enabled=False, delete_cache=(1800, 3600)) as demo:
        gr.Markdown(f"## {title}\nPlain autoregressive decoding (one token per forward) and a parallel method, "
                    "on the same model and seed. Grey cells: tokens not committed yet.")
        if image_names:  # with video models too, images and clips get a tab each
            with gr.Tab("Images") if video_names else contextlib.nullcontext():
                banner = gr.Markdown(UNTRAINED_BANNER, visible=model_set.entry(first).untrained, elem_classes="arvis-banner",
                                     elem_id="arvis-banner")
                with gr.Row():
                    with gr.Column(scale=1, min_width=280):
                        model = gr.Dropdown(choices=image_names, value=first, label="model", allow_custom_value=True)
                        about = gr.Markdown(view0["about"])
                        class_label = gr.Dropdown(choices=info0["class_choices"], label="class",
                                                  value=info0["class_choices"][0][1] if info0["num_classes"] else None,
                                                  visible=info0["class_conditional"], allow_custom_value=True)
                        prompt = gr.Textbox(value="", label=f"prompt (≤ {limits.prompt_chars} characters)", max_lines=2,
                                            max_length=limits.prompt_chars, visible=not info0["class_conditional"])
                        method = gr.Dropdown(choices=methods, value=method0, label="method", allow_custom_value=True)
                        # One widget per option name across methods. Their server-side value is None ("the
                        # chosen method's default", so API callers never inherit another method's default);
                        # the page fills in the shown method's defaults when it loads and when the method changes.
                        option_widgets = {name: _option_widget(own0.get(name, spec), limits,
                                                               visible=name in own0 and own0[name].applies({}, defaults0))
                                          for name, spec in specs.items()}
                        with gr.Row():
                            seed = gr.Number(value=0, label=f"seed (0–{limits.seed_max})", step=1, precision=None)
                            num_images = gr.Number(value=1, label=f"images (1–{limits.max_images})", step=1, precision=None)
                        with gr.Accordion("sampling", open=False):
                            g0, g1 = limits.guidance_scale
                            guidance = gr.Number(value=float(sampling0["guidance_scale"]),
                                                 label=f"guidance scale ({g0:g}–{g1:g}; 1 = off)", step=0.5, precision=None)
                            top_k = gr.Number(value=int(sampling0["top_k"]), step=1,
                                              precision=None,
                                              label=f"top-k (0 = off, ≤ {min(limits.top_k_max, info0['vocab_size'])})")
                            top_p = gr.Number(value=float(sampling0["top_p"]), label=f"top-p (0–{limits.top_p_max:g}]",
                                              step=0.05, precision=None)
                            t0, t1 = limits.temperature
                            temperature = gr.Number(value=float(sampling0["temperature"]), step=0.1, precision=None,
                                                    label=f"temperature ({t0:g}–{t1:g}; 0 = greedy)")
                            r0, r1 = limits.timing_rounds
                            timing_rounds = gr.Number(value=r0, step=1, precision=0,
                                                      label=f"timing rounds ({r0}–{r1}): interleaved decodes per side, "
                                                            "median shown")
                        live_preview = gr.Checkbox(value=True, label="live preview (its rendering time is measured and "
                                                                     "excluded from the latency)")
                        run = gr.Button("Generate", variant="primary", elem_id="arvis-generate")
                    with gr.Column(scale=2):
                        status = gr.Markdown("Ready.", label="status", elem_id="arvis-status")
                        with gr.Row():
                            ar_image = gr.Image(label="plain AR", type="pil", format="png", interactive=False, height=300,
                                                elem_id="arvis-ar-image", value=placeholder(limits.display_size))
                            method_image = gr.Image(label="parallel method", type="pil", format="png", interactive=False,
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
                    try:
                        request = validate_request(
                            model_set, limits, model=model, class_label=class_label, prompt=prompt, method=method, seed=seed,
                            num_images=num_images, guidance_scale=guidance_scale, top_k=top_k, top_p=top_p,
                            temperature=temperature, live_preview=live_preview, timing_rounds=timing_rounds, video=False,
                            options={k.removeprefix(OPTION_PREFIX): v for k, v in options.items()})
                    except DemoInputError as err:
                        log.warning("invalid input: %s", err)  # one line; the message goes back to the caller
                        raise gr.Error(str(err), title="Invalid input", print_exception=False) from None
                    skip = gr.skip()
                    blank = placeholder(limits.display_size)
                    yield blank, blank, "Running plain AR…", "", None, None, None
                    cancel = threading.Event()
                    results: dict[str, RunResult] = {}
                    label = spec_label(request.method, dict(request.options))
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
                                text = f"Running {label}…" if item.side == "ar" else "Done."
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
                    entry = model_set.entry(request.model)
                    stats = comparison(request, results["ar"], results["method"], entry.untrained)
                    hist, order = stats_plots(results["ar"], results["method"], model_info(entry.get())["grid"], request.model)
                    done = (f"Done: {label} took {stats['method']['batch_target_forwards']} forwards vs "
                            f"{stats['ar']['batch_target_forwards']} for plain AR ({stats['speedup']:.2f}× faster).")
                    final_ar = tile_images(results["ar"].images, limits.display_size)
                    final_method = tile_images(results["method"].images, limits.display_size)
                    yield final_ar, final_method, done, stats_markdown(stats), stats, hist, order

                # An explicit signature so the API lists every input as optional, the option inputs by name
                # (``opt_window``…) with None = "the chosen method's default".
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
                def on_model(name: Any):
                    try:
                        view = model_view(name, model_info(model_set.pipeline(name)))
                    except DemoInputError as err:
                        raise gr.Error(str(err)) from None
                    return view["banner"], view["class"], view["prompt"], view["guidance"], view["top_k"], view["about"]

                model.change(on_model, inputs=model, outputs=[banner, class_label, prompt, guidance, top_k, about],
                             api_visibility="private", show_progress="hidden", concurrency_limit=None)

                def option_updates(name: Any, values: Mapping[str, Any], reset: bool) -> list[Any]:
                    """Show the options ``name`` has and that apply to the chosen acceptance rule (``reset``: to defaults)."""
                    if name not in methods:
                        raise gr.Error(f"method: {name!r} is not available; choose one of {', '.join(methods)}",
                                       print_exception=False)
                    own = {s.name: s for s in method_option_specs(name)}
                    defaults = {s.name: s.default for s in own.values()}
                    updates = []
                    for option in option_widgets:
                        spec = own.get(option)
                        if spec is None:
                            updates.append(gr.update(visible=False))
                        elif not reset:
                            updates.append(gr.update(visible=spec.applies(values, defaults)))
                        elif spec.kind == "choice":
                            updates.append(gr.update(visible=spec.applies({}, defaults), value=spec.default,
                                                     choices=list(spec.choices)))
                        else:
                            updates.append(gr.update(visible=spec.applies({}, defaults), value=spec.default))
                    return updates

                def on_method(name: Any):
                    return [*option_updates(name, {}, reset=True), gr.update(label=f"method: {spec_label(name, {})}")]

                method.change(on_method, inputs=method, outputs=[*option_widgets.values(), method_image],
                              api_visibility="private", show_progress="hidden", concurrency_limit=None)
                demo.load(on_method, inputs=method, outputs=[*option_widgets.values(), method_image],
                          api_visibility="private", show_progress="hidden", concurrency_limit=None)
                if "acceptance" in option_widgets:  # the acceptance rule decides which of k, delta, lam apply
                    def on_acceptance(name: Any, rule: Any):
                        return option_updates(name, {"acceptance": rule}, reset=False)

                    option_widgets["acceptance"].change(
                        on_acceptance, inputs=[method, option_widgets["acceptance"]], outputs=list(option_widgets.values()),
                        api_visibility="private", show_progress="hidden", concurrency_limit=None)
        if video_names:
            with gr.Tab("Video"):
                video_tab(demo, model_set, video_names, limits, methods, method0)

    # One queue for everything; beyond max_size callers get "queue full". api_open=False: the REST
    # routes refuse queued events, so nobody can skip the queue.
    demo.queue(default_concurrency_limit=limits.concurrency_limit, max_size=limits.max_queue, api_open=False)
    demo.arvis_limits = limits  # type: ignore[attr-defined]  (read by launch and the tests)
    return demo


def video_tab(demo: DemoBlocks, model_set: ModelSet, names: list[str], limits: DemoLimits, methods: list[str],
              method0: str) -> None:
    """The Video tab: plain AR and a method on the same clips (classes, seeds), film strips filling live, then
    each side's clips as an animated GIF and the statistics. Endpoint ``/generate_video`` with parameters
    ``model, class_label, method, options, seed, num_clips, guidance_scale, live_preview, timing_rounds``
    (``options``: ``key=value,…`` as in ``arvis generate --method``); it returns ``(ar_clips, method_clips,
    status, stats_markdown, stats_json)``."""
    info0 = model_info(model_set.pipeline(names[0]))
    defaults0 = model_sampling_defaults(model_set.pipeline(names[0]))
    with gr.Row():
        with gr.Column(scale=1, min_width=280):
            banner = gr.Markdown(UNTRAINED_BANNER, visible=model_set.entry(names[0]).untrained,
                                 elem_classes="arvis-banner")
            model = gr.Dropdown(choices=names, value=names[0], label="video model", allow_custom_value=True)
            class_label = gr.Dropdown(choices=info0["class_choices"], value=info0["class_choices"][0][1],
                                      label="class", allow_custom_value=True)
            method = gr.Dropdown(choices=methods, value=method0, label="method", allow_custom_value=True)
            options = gr.Textbox(value="window=64,coupling=gumbel,init=previous_frame_distribution", max_lines=1,
                                 label="options (key=value,… as in `arvis generate --method`; empty = defaults)",
                                 max_length=limits.text_option_chars * 4)
            with gr.Row():
                seed = gr.Number(value=0, label=f"seed (0–{limits.seed_max})", step=1, precision=None)
                num_clips = gr.Number(value=1, label=f"clips (1–{limits.max_images})", step=1, precision=None)
            g0, g1 = limits.guidance_scale
            guidance = gr.Number(value=float(defaults0["guidance_scale"]), step=0.5, precision=None,
                                 label=f"guidance scale ({g0:g}–{g1:g}; 1 = off)")
            r0, r1 = limits.timing_rounds
            timing_rounds = gr.Number(value=r0, step=1, precision=0, label=f"timing rounds ({r0}–{r1})")
            live_preview = gr.Checkbox(value=True, label="live preview (frames filling as tokens commit)")
            run = gr.Button("Generate clips", variant="primary", elem_id="arvis-generate-video")
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
            request = validate_request(
                model_set, limits, model=model, class_label=class_label, prompt=None, method=method,
                seed=0 if seed is None else seed, num_images=1 if num_clips is None else num_clips,
                guidance_scale=guidance_scale, top_k=None, top_p=None, temperature=None,
                live_preview=True if live_preview is None else live_preview, timing_rounds=timing_rounds,
                options=parse_options_text(method, options, limits), video=True)
        except DemoInputError as err:
            log.warning("invalid input: %s", err)
            raise gr.Error(str(err), title="Invalid input", print_exception=False) from None
        skip, blank = gr.skip(), placeholder(limits.display_size)
        yield blank, blank, "Running plain AR…", "", None
        label = spec_label(request.method, dict(request.options))
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
        done = (f"Done: {label} took {stats['method']['batch_target_forwards']} forwards vs "
                f"{stats['ar']['batch_target_forwards']} for plain AR ({stats['speedup']:.2f}× faster).")
        yield clips["ar"], clips["method"], done, stats_markdown(stats), stats

    run.click(generate_video, inputs=[model, class_label, method, options, seed, num_clips, guidance, live_preview,
                                      timing_rounds],
              outputs=[ar_clips, method_clips, status, stats_md, stats_json], api_name="generate_video",
              concurrency_limit=limits.concurrency_limit, concurrency_id="generate")

    def on_model(name: Any):
        try:
            info = model_info(model_set.pipeline(name))
        except DemoInputError as err:
            raise gr.Error(str(err)) from None
        defaults = model_sampling_defaults(model_set.pipeline(name))
        return (gr.update(visible=model_set.entry(name).untrained),
                gr.update(choices=info["class_choices"], value=info["class_choices"][0][1]),
                gr.update(value=float(defaults["guidance_scale"])))

    model.change(on_model, inputs=model, outputs=[banner, class_label, guidance], api_visibility="private",
                 show_progress="hidden", concurrency_limit=None)


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
    """Serve ``demo``: on 127.0.0.1 unless ``host`` says otherwise; uploads closed; no extra paths served."""
    from starlette.middleware import Middleware

    return demo.launch(
        server_name=host, server_port=port, share=share, prevent_thread_lock=prevent_thread_lock, quiet=quiet,
        show_error=False,  # gr.Error messages reach the page; other exceptions' text stays in the server log
        max_file_size="1mb", allowed_paths=[], ssr_mode=False, mcp_server=False, enable_monitoring=False,
        run_history=False, footer_links=["api"], inbrowser=False, css=CSS,
        app_kwargs={"middleware": [Middleware(CloseRoutes)]},
    )
