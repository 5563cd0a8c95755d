"""Shared fixtures: a real OTLP receiver on loopback (gRPC and HTTP), see tests/receiver.py; a headless
chromium page (tests/helpers.py's Browser); every test runs in a temporary folder."""
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


@pytest.fixture
def browser():
    """A headless chromium page (helpers.Browser), closed afterwards; a browser test's module is marked
    with helpers.NEEDS_CHROMIUM."""
    from helpers import Browser

    b = Browser()
    try:
        yield b
    finally:
        b.close()


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
