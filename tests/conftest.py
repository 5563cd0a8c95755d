"""Shared fixtures: a real OTLP receiver on loopback (gRPC and HTTP), see tests/receiver.py; a headless
chromium page (tests/helpers.py's Browser) of one chromium shared by the session; every test runs in a
temporary folder."""
from __future__ import annotations

import os

import pytest
from receiver import CollectingReceiver


@pytest.fixture(scope="module")
def synthetic_dask_run(tmp_path_factory) -> str:
    """A synthetic run folder (tests/synthetic_run.py) of 60 Dask tasks on 2 workers x 2 threads, without
    errors: what `evlog report --what-if` replays."""
    from synthetic_run import make_run

    path = str(tmp_path_factory.mktemp("whatif") / "run")
    make_run(path, n_tasks=60, n_workers=2, threads=2, errors=0)
    return path


@pytest.fixture
def otlp_receiver():
    """A started CollectingReceiver (gRPC and HTTP on free loopback ports), stopped afterwards."""
    r = CollectingReceiver().start()
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture(scope="session")
def _chromium():
    """Headless chromiums for the session's browser tests, one per time zone (TZ as a test sets it, as a
    chromium reads it once, at its start), each started when the first test asks: a chromium takes about a
    second to start, a page in a fresh browser context of it a fifth of that."""
    from helpers import Chromium

    shared: dict = {}

    def get():
        tz = os.environ.get("TZ")
        if tz not in shared or not shared[tz].alive():  # one that crashed is replaced, not reused
            if tz in shared:
                shared[tz].close()
            shared[tz] = Chromium()
        return shared[tz]

    try:
        yield get
    finally:
        for c in shared.values():
            c.close()


@pytest.fixture
def browser(_chromium):
    """A headless chromium page (helpers.Browser) in a browser context of its own (its own cookies,
    storage and cache), closed afterwards; a browser test's module is marked with helpers.NEEDS_CHROMIUM."""
    from helpers import Browser

    b = Browser(chromium=_chromium())
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="session")
def report_app_run(tmp_path_factory):
    """helpers.REPORT_APP run once under evlog-instrument for the session (`evlog report`'s tests and the
    dashboard's report panel only read it): (its process, its run folder)."""
    from helpers import REPORT_APP, run_app

    return run_app(tmp_path_factory.mktemp("report-app"), REPORT_APP)


@pytest.fixture(scope="session", autouse=True)
def _outside_the_checkout(tmp_path_factory):
    """The whole session, and every process a test starts, runs in a temporary folder, so a run folder
    made by default (./evlog-runs, by programs run without EVLOG_RUN_DIR) never lands in the checkout."""
    old = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    try:
        yield
    finally:
        os.chdir(old)
