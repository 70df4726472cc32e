"""cmc package."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("henon-cmc")
except PackageNotFoundError:  # not installed (run from a source tree)
    __version__ = "0.1.0"
