"""`evlog report [RUN_DIR] [--db FILE] [--format text|json|html] [-o FILE]`: load the rows, analyse,
render, write. evlog/cli.py only parses the arguments and calls ``run``.

The collector is switched off while rows are read and analysed: a 20,000-task run decodes into
millions of small objects, and the full collections they would trigger (which find nothing to
free: every row is kept to the end) cost as much again as the reading itself.
"""
from __future__ import annotations

import gc
import json
import os
import sys

from evlog.report import activity
from evlog.report.analysis import analyse_with_model
from evlog.report.whole import whole_computations


class ReportError(Exception):
    """A clear message for the user (no such folder, not a database, cannot write the output)."""


def load_folder(path: str) -> tuple[list, list, str, list]:
    """(spans, logs, folder, points) of a run folder (points: the metric points the report reads,
    activity.METRICS); its corrupt lines are reported on stderr and skipped."""
    from evlog.data import span_lines
    from evlog.data.run_reader import RunFolder, RunFolderError

    try:
        rf = RunFolder(path, span_rows=span_lines.rows)
    except RunFolderError as e:
        raise ReportError(str(e)) from None
    spans: list = []
    logs: list = []
    points: list = []
    batches = rf.read_all()
    span_lines.forget()
    for signal, rows in batches:
        if signal == "traces":
            spans.extend(rows)
        elif signal == "logs":
            logs.extend(rows)
        elif signal == "metrics":
            points.extend(r for r in rows if r["name"] in activity.METRICS)
    for p in rf.problems:
        sys.stderr.write(f"evlog: {p}\n")
    if rf.problem_count > len(rf.problems):
        sys.stderr.write(f"evlog: ... and {rf.problem_count - len(rf.problems)} more problems in {rf.path}\n")
    return spans, logs, rf.path, points


def load_db(path: str, run: str | None = None) -> tuple[list, list, str, list]:
    """(spans, logs, source, points) of one run of an `evlog serve` database (evlog.data.store.store_rows): ``run`` (an
    evlog.run.id), else the newest, as the dashboard shows it; said on stderr when it holds several."""
    from evlog.data.store import Store, StoreError, store_points, store_rows

    try:
        store = Store(path, create=False)
    except StoreError as e:
        raise ReportError(str(e)) from None
    try:
        runs = [r["run"] for r in store.runs()]
        if run is not None and run not in runs:
            known = ", ".join(repr(r) for r in runs[:10]) or "none"
            raise ReportError(f"{store.path}: no run {run!r} (evlog.run.id); it holds {known}")
        if run is None and len(runs) > 1:
            run = runs[0]
            sys.stderr.write(f"evlog report: {store.path} holds {len(runs)} runs; this is the newest, {run!r} "
                             "(--run ID for another)\n")
        scoped = store.scoped(run) if len(runs) > 1 else store
        spans, logs = store_rows(scoped)
        points = store_points(scoped, activity.METRICS)
    finally:
        store.close()
    return spans, logs, (store.path or path) + (f" (run {run})" if run is not None and len(runs) > 1 else ""), points


def build_report(run_dir: str | None = None, db: str | None = None, runs: str = "evlog-runs",
                 run: str | None = None, what_if: list | None = None, curve: bool = False) -> dict:
    """The report dict of a run folder (default: the newest under ``runs``) or a database; with
    ``what_if`` (evlog.report.whatif_run.Shape's), the predictions for those shapes (and with
    ``curve``, predicted time against workers)."""
    from evlog.data.run_reader import RunFolderError, newest_run

    enabled = gc.isenabled()
    gc.disable()
    try:
        if db:
            spans, logs, source, points = load_db(db, run)
        else:
            try:
                path = run_dir or newest_run(runs)
            except RunFolderError as e:
                raise ReportError(str(e)) from None
            spans, logs, source, points = load_folder(path)
        if not spans and not logs:
            raise ReportError(f"{source}: no spans or events to report on")
        # a run folder being written, or cut short, holds computations not whole yet: left out, and said
        spans, left, comps = whole_computations(spans)
        report, comps = analyse_with_model(spans, logs, source, comps, left)
        activity.attach(report, spans, points)  # Dask's fine performance metrics and its spans
        if what_if:  # after activity: the replay takes each prefix's CPU share from its activity_s
            from evlog.report import whatif_run  # imported only for it (17 ms)

            try:
                whatif_run.attach(report, comps, spans, what_if, curve)
            except whatif_run.WhatIfError as e:
                raise ReportError(str(e)) from None
        # A task and its computation refer to each other, and the tasks hold every row: left so, all of it is cyclic
        # garbage that the collector's first pass after this walks and frees (0.3-0.4 s on a run of 157k tasks).
        # Let go of here, it is freed by reference counts as this returns.
        for c in comps:
            c.tasks.clear()
        return report
    finally:
        if enabled:
            gc.enable()


def render(report: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(report, default=str) + "\n"
    if fmt == "html":
        from evlog.report.render_html import render_html

        return render_html(report)
    from evlog.report.render_text import render_text

    return render_text(report)


def run(run_dir: str | None, db: str | None, fmt: str, output: str | None, runs: str = "evlog-runs",
        run_id: str | None = None, what_if: list | None = None) -> int:
    if run_dir and db:
        raise ReportError("give a run folder or --db, not both")
    if run_id is not None and not db:
        raise ReportError("--run picks a run of an `evlog serve` database: give --db too")
    if fmt == "html" and not output:
        raise ReportError("--format html writes a file: give -o report.html")
    text = render(build_report(run_dir, db, runs, run_id, what_if, curve=fmt == "html"), fmt)
    if not output or output == "-":
        sys.stdout.write(text)
        return 0
    try:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise ReportError(f"cannot write {output}: {e.strerror or e}") from None
    sys.stderr.write(f"evlog report: wrote {os.path.abspath(output)}\n")
    return 0
