"""The code's layout is the process diagram (docs/internals.md): its rules, checked.

- import-linter's contracts in pyproject.toml (observed never imports builders, the exporter process or
  the read side; wire only the standard library; no cycles);
- the wire's constants are defined in evlog/wire only (the frame header);
- the console relay's reader, run as the program runs it (``python -S``, its file executed), imports
  nothing of evlog but evlog.wire's modules.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
EVLOG = ROOT / "evlog"


def test_import_contracts_are_kept():
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    p = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "BROKEN" not in p.stdout and "KEPT" in p.stdout


def test_the_frame_header_is_defined_in_wire_only():
    found = [str(f.relative_to(ROOT)) for f in EVLOG.rglob("*.py")
             if "<II" in f.read_text() and f.parent.name != "wire"]
    assert found == []


def test_the_relay_reader_imports_only_the_wire():
    relay = EVLOG / "relay" / "console_relay.py"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); f = sys.argv[2]; "
            "exec(compile(open(f).read(), f, 'exec'), {'__name__': 'evlog_console_relay'}); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('evlog'))))")
    p = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT), str(relay)], capture_output=True, text=True,
                       timeout=60, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert p.returncode == 0, p.stderr
    mods = p.stdout.split()
    assert "evlog.wire.console" in mods and "evlog.wire.frames" in mods
    assert [m for m in mods if m not in ("evlog", "evlog.version") and not m.startswith("evlog.wire")] == []
