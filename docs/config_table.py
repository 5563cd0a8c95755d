"""Write the README's table of evlog's variables from their declarations (evlog.config.SETTINGS).

    python docs/config_table.py        # rewrites the table in README.md in place

tests/test_readme.py fails while the README's table and the declarations differ.
"""
from __future__ import annotations

import pathlib
import sys

from evlog import config

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def replace_table(text: str) -> str:
    """``text`` with the lines of its configuration table (from its header row to the first line that is
    not a table row) replaced by ``config.readme_rows()``."""
    lines = text.split("\n")
    header = config.readme_rows()[0]
    start = lines.index(header)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[:start] + config.readme_rows() + lines[end:])


if __name__ == "__main__":
    old = README.read_text()
    new = replace_table(old)
    README.write_text(new)
    sys.stdout.write("README.md: the configuration table " + ("is unchanged\n" if new == old else "rewritten\n"))
