"""The README's two commands stay true: CI runs its test command, and the quickstart runs under evlog
and prints what the README shows."""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import tomllib
from helpers import PYTHON, evlog_env, read_run_folder, run_instrumented
from packaging.requirements import Requirement

from evlog import config

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block and text.index("```bash") < 20, "the README starts with the two set-up commands"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def _cells(row: str) -> tuple[str, ...]:
    return tuple(cell.strip() for cell in row.strip().strip("|").split("|"))


def test_the_readmes_configuration_table_is_the_settings_declarations():
    """Each EVLOG_* row of the README (variable, YAML key, meaning, default) is its declaration in
    evlog.config.SETTINGS, in the same order; `python docs/config_table.py` writes them."""
    shown = [_cells(line) for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `EVLOG_")]
    declared = [_cells(line) for line in config.readme_rows()[2:]]
    fix = "python docs/config_table.py writes the README's table from the declarations"
    assert [row[0] for row in shown] == [row[0] for row in declared], fix
    for got, want in zip(shown, declared):
        for column, a, b in zip(("variable", "YAML key", "meaning", "default"), got, want):
            assert a == b, f"{got[0]}'s {column}: the README says {a!r}, evlog.config.SETTINGS {b!r}; {fix}"


def test_ci_runs_the_readmes_test_command():
    install_and_run, test = _readme_commands()
    assert "evlog-instrument python examples/quickstart.py" in install_and_run
    ci = (ROOT / ".ci" / "run").read_text()
    assert test in [line.strip() for line in ci.splitlines()], f"{test!r} must be a line of .ci/run"


def test_ci_pins_every_lower_bound_of_pyproject_for_its_lowest_versions_pass():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    requirements += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    out = subprocess.run([PYTHON, str(ROOT / ".ci" / "lowest_constraints.py")], capture_output=True, check=True,
                         timeout=60).stdout.decode()
    pins = dict(line.split("==") for line in out.split())
    for req in requirements:
        if req.name == project["name"]:
            continue
        lows = [s.version for s in req.specifier if s.operator in (">=", "==")]
        if lows:  # pinned at its own lower bound (or at a higher one that another mention of it asks for)
            assert req.specifier.contains(pins[req.name], prereleases=True), (str(req), pins[req.name])
            assert pins[req.name] in lows or req.name in [r.name for r in requirements if r is not req], str(req)
        else:
            assert req.name not in pins, str(req)


def test_quickstart_runs_under_evlog_instrument(tmp_path):
    proc = run_instrumented([PYTHON, str(ROOT / "examples" / "quickstart.py")], env=evlog_env(), cwd=tmp_path,
                            check=True)
    assert b"done: 8 thread tasks, 6 process tasks" in proc.stdout
    (run_dir,) = (tmp_path / "evlog-runs").iterdir()
    assert run_dir.name.endswith("-quickstart")
    assert f"evlog view evlog-runs/{run_dir.name}" in proc.stderr.decode()
    data = read_run_folder(str(run_dir))
    names = {s["name"] for s in data["spans"]}
    assert "quickstart" in names
    assert len({s["resource"]["process.pid"] for s in data["spans"]}) >= 1
    # the summary counts what the run folder holds: spans, events and logs, and the program's processes
    m = re.search(r"evlog: ([\d,]+) spans, ([\d,]+) events and logs, [\d,]+ metric points from (\d+) processes",
                  proc.stderr.decode())
    assert m, proc.stderr.decode()
    records = sum(1 for s in ("events", "logs") for _ in data.get(s, ()))
    assert int(m.group(1)) == len(data["spans"]) and int(m.group(2)) == records, (m.group(0), len(data["spans"]), records)
    pids = {r["resource"]["process.pid"] for s in ("spans", "events", "logs", "metrics") for r in data.get(s, ())
            if r["resource"].get("evlog.process.role") != "exporter"}  # its host samples: not the program's
    assert int(m.group(3)) == len(pids), (m.group(0), pids)


def _readme_example() -> list[str]:
    """The lines of the README's example run of the quickstart ("What you get"), after the command."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## What you get\n"):]
    block = re.search(r"```console\n\$ evlog-instrument python examples/quickstart\.py\n(.*?)```", section, re.S)
    assert block, "the README's example starts with the README's own command"
    return block.group(1).splitlines()


def _stable(line: str) -> str:
    """A line of output without what changes from run to run, which the README's example may show as it
    was once: the counts of events and logs (the task profiler's samples of the quickstart's short tasks:
    0 to 2 of them) and of metric points (gauges read each second: the run's length), the run folder's
    place (the user's working folder) and its time stamp. Everything else, spans and processes too,
    is word for word."""
    line = re.sub(r"\b\d[\d,]* (events and logs|metric points)\b", r"<n> \1", line)
    line = re.sub(r"-> /\S*/evlog-runs/", "-> <cwd>/evlog-runs/", line)
    return re.sub(r"evlog-runs/\d{8}T\d{6}Z-quickstart\b", "evlog-runs/<UTC time>-quickstart", line)


def test_the_readmes_example_is_what_the_quickstart_prints(tmp_path):
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "quickstart.py", tmp_path / "examples")
    # As the README's first command runs it: `python` from PATH, in a venv with evlog alone, so the summary's
    # hint installs the view extra (hidden from the launcher, which writes the hint, as it is missing there).
    launcher = "import sys; sys.modules['aiohttp'] = None; from evlog.launcher import main; sys.exit(main())"
    env = evlog_env(PATH=os.pathsep.join([os.path.dirname(PYTHON), os.environ.get("PATH", "")]))
    proc = subprocess.run([PYTHON, "-c", launcher, "python", "examples/quickstart.py"], env=env, cwd=tmp_path,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    shown = _readme_example()
    printed = proc.stdout.decode().splitlines() + proc.stderr.decode().splitlines()  # a terminal shows both
    assert [_stable(line) for line in printed] == [_stable(line) for line in shown], (printed, shown)
