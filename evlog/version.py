"""evlog's version and distribution name: a module of its own, so that any layer can name it without importing the package's
public API (evlog/__init__.py imports the observed side)."""
__version__ = "0.1.0"
DISTRIBUTION = "evlog-otel"  # what pip installs (pyproject.toml's name); the package imports as evlog
