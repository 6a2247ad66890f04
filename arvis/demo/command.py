"""``arvis demo``: launch the Gradio demo (:mod:`arvis.demo.page`), registered on the ``arvis`` CLI at import.

Examples::

    arvis demo                                   # shipped models (or the untrained tiny model), 127.0.0.1:7860
    arvis demo --model c2i --port 7861
    arvis demo --model tiny-random --host 0.0.0.0 --max-queue 32     # reachable from the network: think first

This module imports neither Gradio nor the page at import time: both are imported by :func:`run_demo`,
so ``arvis --help`` works without the ``demo`` extra. The demo is part of the installed package.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from arvis import cli_args as a
from arvis.cli_args import command

LOOPBACK_NAMES = ("localhost",)


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    a.add_model(p, repeatable=True, help_extra="; repeatable (default: every shipped model present, else "
                                               "tiny-random with an 'untrained' banner)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 serves the network)")
    p.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    p.add_argument("--share", action="store_true", help="also create a public gradio.live link")
    p.add_argument("--concurrency", type=int, default=1,
                   help="requests decoded at the same time (default 1: keeps the timings meaningful on a CPU)")
    p.add_argument("--max-queue", type=int, default=16, help="requests allowed to wait (default 16); more get "
                                                              "'queue full'")
    p.add_argument("--max-images", type=int, default=4, help="largest images-per-request (default 4)")
    p.add_argument("--max-window", type=int, default=64, help="largest method window (default 64)")
    p.add_argument("--no-warmup", action="store_true", help="do not load and warm up the models in the background "
                                                             "once the page is served (each loads on first use)")
    a.add_runtime(p)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_host(host: str, port: int) -> None:
    """``ValueError`` unless ``host`` resolves to an address this machine can bind."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        raise ValueError(f"--host: cannot resolve {host!r} to an address of this machine ({err})") from None


def default_models() -> list[str]:
    from arvis.hub import TINY_RANDOM, shipped_names

    return shipped_names() or [TINY_RANDOM]


def load_models(names: list[str], dtype: Any, device: str) -> dict[str, Any]:
    """Every model named on the command line, as ``DemoModel`` entries keyed by display name (the shipped alias).

    Nothing heavy happens here: a model is described from its folder's metadata (capabilities, sampling defaults,
    the demo's examples for it) and its weights load on first use, or in the background warm-up, so the page is
    served first. The untrained tiny model is built at once (random weights, no folder to read).
    """
    from arvis.demo.core import DemoModel, model_examples
    from arvis.hub import TINY_RANDOM, load_pipeline, model_capabilities, model_ref, read_sampling_defaults

    models: dict[str, Any] = {}
    for name in names:
        ref = model_ref(name)
        if name == TINY_RANDOM:
            entry = DemoModel(pipeline=load_pipeline(name, dtype, device).pipeline, untrained=True,
                              description="untrained tiny model (random weights)")
        else:
            assert ref.path is not None
            entry = DemoModel(loader=lambda name=name: load_pipeline(name, dtype, device).pipeline,
                              description=f"`{ref.path.name}`", capabilities=model_capabilities(name),
                              sampling_defaults=read_sampling_defaults(ref.path), examples=model_examples(ref.path.name))
        key = Path(str(ref)).name
        base, k = key, 2
        while key in models:
            key, k = f"{base}-{k}", k + 1
        models[key] = entry
    return models


@command("demo", "launch the Gradio demo: plain AR and a parallel method side by side, live", _demo_arguments)
def run_demo(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in [0, 65535], got {args.port}")
    a.check_count("--max-queue", args.max_queue, 0, 10_000)
    for flag in ("concurrency", "max_images", "max_window"):
        a.check_count(f"--{flag.replace('_', '-')}", getattr(args, flag), 1, 1024)
    check_host(args.host, args.port)
    try:
        import gradio  # noqa: F401
    except ModuleNotFoundError:
        raise ValueError("the demo needs Gradio: pip install 'arvis[demo]'") from None
    dtype = a.setup_runtime(args)
    # Gradio caches every result image in its temporary folder: give this server a folder of its own
    # (set before the page's components exist: they read it when built) and remove it at shutdown.
    cache = tempfile.mkdtemp(prefix="arvis-demo-cache-")
    os.environ["GRADIO_TEMP_DIR"] = cache
    try:
        from arvis.demo.core import DemoLimits
        from arvis.demo.page import build_demo, launch

        limits = DemoLimits(max_images=args.max_images, window=(1, args.max_window),
                            concurrency_limit=args.concurrency, max_queue=args.max_queue)
        models = load_models(args.model or default_models(), dtype, args.device)
        if not is_loopback(args.host):
            print(f"*** serving on {args.host}: anyone who can reach this machine can use the demo ***",
                  file=sys.stderr)
        # Serve first: the page is built from the models' metadata; launch() then loads and warms them up in
        # the background, the page showing the progress (--no-warmup: each loads on its first request).
        demo = build_demo(models, limits, warm_up=not args.no_warmup)
        launch(demo, host=args.host, port=args.port, share=args.share)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return 0
