#!/usr/bin/env python
"""`arvis bench` as a script: `python eval/bench.py --help` (same arguments, same outputs)."""

from __future__ import annotations

import sys

from arvis.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
