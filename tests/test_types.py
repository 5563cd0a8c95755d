"""The type check: mypy with pyproject.toml's [tool.mypy] settings on the packages it names there (the
records on the wire, the builders, the report), run as a developer runs it (``python -m mypy``)."""
from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_mypy_finds_no_type_errors():
    p = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"mypy exited with {p.returncode}:\n{p.stdout[-8000:]}{p.stderr[-2000:]}"
    assert "Success: no issues found" in p.stdout, p.stdout
