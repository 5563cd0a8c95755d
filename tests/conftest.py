"""Shared fixtures: a real OTLP receiver on loopback (gRPC and HTTP), see tests/receiver.py."""
from __future__ import annotations

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
