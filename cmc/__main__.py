"""Run the command-line interface: ``python -m cmc ...``."""

import sys

from cmc.cli import main

sys.exit(main())
