#!/usr/bin/env python
"""The arvis Gradio demo as a script: ``python apps/demo.py [arvis demo flags]`` = ``arvis demo``.

The demo lives in the package (:mod:`arvis.demo.page`, its Gradio-free logic in :mod:`arvis.demo.core`),
so ``arvis demo`` works from any installation; this page is a thin entry point beside the other apps.
"""

from __future__ import annotations

import sys

from arvis.cli import main

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))
