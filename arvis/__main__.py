"""``python -m arvis`` = the ``arvis`` command."""

import sys

from arvis.cli import main

sys.exit(main())
