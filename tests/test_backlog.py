"""The exporter process's backlog: frames in arrival order through memory and a real spool file."""
from __future__ import annotations

import os

from evlog.exporter.backlog import Backlog


def test_frames_come_out_in_order_through_memory_and_the_spool_file_which_leaves_nothing_behind(tmp_path):
    b = Backlog(str(tmp_path), memory=1000, spool=1 << 20)
    sent = []
    for i in range(200):  # 100 bytes each: the first ten fit in memory, the rest go to the spool file
        data = bytes([i % 256]) * 100
        b.put(i % 3, 2, data)
        sent.append((i % 3, 2, data))
        if i == 150:
            b.end(1)
            sent.append((1, 0, None))
    assert b.spooled_bytes() > 0 and b.held() == 400
    assert os.listdir(tmp_path) == []  # the spool file is unlinked from the start
    got = []
    while (entry := b.get(0)) is not None:
        got.append(entry)
    assert got == sent and b.held() == 0 and b.spooled_bytes() == 0 and b.dropped == 0
    b.put(5, 1, b"again")  # the spool emptied: memory again
    assert b.get(0) == (5, 1, b"again") and b.spooled_bytes() == 0
    b.close()


def test_past_the_spool_limit_frames_are_dropped_and_their_records_counted(tmp_path):
    b = Backlog(str(tmp_path), memory=100, spool=1000)
    for _i in range(30):
        b.put(1, 7, b"x" * 90)
    kept = []
    while (entry := b.get(0)) is not None:
        kept.append(entry)
    assert 10 <= len(kept) < 30
    assert b.dropped == 7 * (30 - len(kept))
    b.close()
