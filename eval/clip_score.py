#!/usr/bin/env python
"""`arvis clip-score` as a script: `python eval/clip_score.py --help` (same arguments, same outputs)."""

from __future__ import annotations

import sys

from arvis.cli import main

if __name__ == "__main__":
    sys.exit(main(["clip-score", *sys.argv[1:]]))
