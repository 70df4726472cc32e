"""Run the command-line interface: ``python -m cmc ...``."""

from cmc.cli import entry

entry()
