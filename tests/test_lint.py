"""The lint and the type check, run as a developer runs them: ruff with pyproject.toml's [tool.ruff] rules
on the whole tree, and mypy with its [tool.mypy] settings on the packages it names there (the records on
the wire, the builders, the report)."""
from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_mypy_finds_no_type_errors():
    p = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"mypy exited with {p.returncode}:\n{p.stdout[-8000:]}{p.stderr[-2000:]}"
    assert "Success: no issues found" in p.stdout, p.stdout


def test_ruff_finds_nothing_to_mend():
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "evlog", "tests", "benchmarks", "examples", "docs"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"ruff exited with {p.returncode}:\n{p.stdout[-8000:]}{p.stderr[-2000:]}"
