"""Shared fixtures: a real OTLP receiver on loopback (gRPC and HTTP), see tests/receiver.py; a headless
chromium page (tests/helpers.py's Browser); every test runs in a temporary folder."""
from __future__ import annotations

import os

import pytest
from receiver import CollectingReceiver


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
