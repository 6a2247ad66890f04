#!/usr/bin/env python
"""`arvis fid` as a script: `python eval/fid.py --help` (same arguments, same outputs)."""

from __future__ import annotations

import sys

from arvis.cli import main

if __name__ == "__main__":
    sys.exit(main(["fid", *sys.argv[1:]]))
