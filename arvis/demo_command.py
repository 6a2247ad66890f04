"""``arvis demo``: launch the Gradio demo (``apps/demo.py``), registered on the ``arvis`` CLI at import.

Examples::

    arvis demo                                   # shipped models (or the untrained tiny model), 127.0.0.1:7860
    arvis demo --model c2i --port 7861
    arvis demo --model tiny-random --host 0.0.0.0 --max-queue 32     # reachable from the network: think first

This module imports neither Gradio nor the app at import time: both are imported by :func:`run_demo`,
so ``arvis --help`` works without the ``demo`` extra. The app lives in the source tree's ``apps/``
package (next to ``arvis/``); it is found there even when the working directory is elsewhere.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import ipaddress
import sys
from pathlib import Path
from typing import Any

from arvis.cli import command

LOOPBACK_NAMES = ("localhost",)


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", action="append", default=None, metavar="MODEL",
                   help="shipped alias (c2i, t2i), a pipeline folder, or tiny-random; repeatable "
                        "(default: every shipped model present, else tiny-random with an 'untrained' banner)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 serves the network)")
    p.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    p.add_argument("--share", type=_bool, default=False, metavar="{true,false}",
                   help="create a public gradio.live link (default false)")
    p.add_argument("--concurrency", type=_positive, default=1,
                   help="requests decoded at the same time (default 1: keeps the timings meaningful on a CPU)")
    p.add_argument("--max-queue", type=int, default=16, help="requests allowed to wait (default 16); more get "
                                                              "'queue full'")
    p.add_argument("--max-images", type=_positive, default=4, help="largest images-per-request (default 4)")
    p.add_argument("--max-window", type=_positive, default=64, help="largest method window (default 64)")
    p.add_argument("--no-warmup", action="store_true", help="skip the one warm-up generation per model at start")
    p.add_argument("--threads", type=_positive, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32", help="model dtype")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def import_app() -> Any:
    """``apps.demo``, from the ``apps/`` folder beside the ``arvis`` package (clear error when absent)."""
    try:
        import gradio  # noqa: F401
    except ModuleNotFoundError:
        raise ValueError("the demo needs Gradio: pip install 'arvis[demo]'") from None
    root = Path(__file__).resolve().parent.parent
    init = root / "apps" / "__init__.py"
    loaded = sys.modules.get("apps")
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() != init.resolve():
            raise ValueError(f"another package named 'apps' is already imported ({loaded!r}); "
                             f"the arvis demo lives in {init.parent}")
    else:
        if not init.is_file():
            raise ValueError(f"the demo app is not at {init.parent}: it ships with the arvis source tree; "
                             "run `arvis demo` from an (editable) install of a checkout")
        spec = importlib.util.spec_from_file_location("apps", init, submodule_search_locations=[str(init.parent)])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["apps"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop("apps", None)
            raise
    return importlib.import_module("apps.demo")


def default_models() -> list[str]:
    from arvis.hub import SHIPPED_PIPELINES, TINY_RANDOM, shipped_path

    present = [alias for alias in SHIPPED_PIPELINES if (shipped_path(alias) / "model_index.json").is_file()]
    return present or [TINY_RANDOM]


def load_models(names: list[str], dtype: Any, device: str) -> dict[str, Any]:
    """Load every model named on the command line, as ``DemoModel`` entries keyed by display name."""
    from apps.demo_core import DemoModel
    from arvis.cli import load_pipeline
    from arvis.hub import SHIPPED_PIPELINES, TINY_RANDOM

    models: dict[str, Any] = {}
    for name in names:
        pipe, defaults, path = load_pipeline(name, dtype, device)
        untrained = name == TINY_RANDOM
        key = name if name in SHIPPED_PIPELINES or untrained else Path(str(path)).name
        base, k = key, 2
        while key in models:
            key, k = f"{base}-{k}", k + 1
        description = "untrained tiny model (random weights)" if untrained else f"`{Path(str(path)).name}`"
        models[key] = DemoModel(pipeline=pipe, defaults=dict(defaults), untrained=untrained, description=description)
    return models


@command("demo", "launch the Gradio demo: plain AR and a parallel method side by side, live", _demo_arguments)
def run_demo(args: argparse.Namespace) -> int:
    import torch

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in [0, 65535], got {args.port}")
    if args.max_queue < 0:
        raise ValueError(f"--max-queue must be >= 0, got {args.max_queue}")
    app = import_app()
    from apps.demo_core import DemoLimits, warm_up

    limits = DemoLimits(max_images=args.max_images, window=(1, args.max_window), concurrency_limit=args.concurrency,
                        max_queue=args.max_queue)
    torch.set_num_threads(args.threads)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    models = load_models(args.model or default_models(), dtype, args.device)
    if not args.no_warmup:
        for name, entry in models.items():
            print(f"warming up {name}…", file=sys.stderr)
            warm_up(entry.get())
    if not is_loopback(args.host):
        print(f"*** serving on {args.host}: anyone who can reach this machine can use the demo ***", file=sys.stderr)
    demo = app.build_demo(models, limits)
    app.launch(demo, host=args.host, port=args.port, share=args.share)
    return 0
