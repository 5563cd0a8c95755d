"""Compressed run folders (``traces|logs|metrics-<pid>.jsonl.gz``: gzip, one member per flush of the
writer) read as the plain ones do: by the reader behind `evlog view`, `report`, `summary`, `story` and
`events`; a file cut mid-member (SIGKILL, ``os._exit``) up to its last whole member; a live file one
whole member at a time; a corrupt member reported by file and byte, the rest read. Each line of such a
file is OTLP/JSON the stock protobuf JSON parser reads (what the Collector's otlpjsonfile receiver does
with ``compression: gzip``).

The files are made here from a synthetic run folder, grouping its lines into members as a writer's
flushes would, a line cut across two members included; and a real run's are read as its exporter
process wrote them."""
from __future__ import annotations

import glob
import gzip
import json
import os
import subprocess
import sys

from helpers import PYTHON, evlog_env, hex_ids_to_base64, run_instrumented
from helpers import gzip_members as _members
from helpers import gzip_run_folder as _compress_folder
from synthetic_run import make_run

from evlog.data.run_reader import RunFolder


def _rows(folder: str) -> tuple[dict, list[str]]:
    """{signal: sorted rows as JSON} of a folder read whole, and the problems said."""
    rf = RunFolder(folder)
    got: dict[str, list[str]] = {}
    for signal, rows in rf.read_all():
        got.setdefault(signal, []).extend(json.dumps(r, sort_keys=True, default=str) for r in rows)
    return {k: sorted(v) for k, v in got.items()}, rf.problems


def _cli(*args: str) -> str:
    p = subprocess.run([sys.executable, "-m", "evlog.cli", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_a_compressed_folder_reads_as_the_plain_one_in_every_command(tmp_path):
    plain, packed = str(tmp_path / "plain"), str(tmp_path / "packed")
    info = make_run(plain, n_tasks=300, batch=20)
    members = _compress_folder(plain, packed)
    assert max(len(m) for m in members.values()) >= 5  # several members per file
    assert not glob.glob(os.path.join(packed, "*.jsonl"))
    want, problems = _rows(plain)
    got, gz_problems = _rows(packed)
    assert not problems and not gz_problems, gz_problems
    assert got == want and len(got["traces"]) == info["spans"]
    # the commands on the compressed folder say what they say on the plain one
    for args in (["summary", "--json"], ["story", info["keys"][5]], ["events"], ["report", "--format", "json"]):
        a = _cli(*args, plain).replace(os.path.abspath(plain), "RUN")
        b = _cli(*args, packed).replace(os.path.abspath(packed), "RUN")
        assert a == b, args


def test_a_file_cut_mid_member_reads_up_to_its_last_whole_member(tmp_path):
    plain = str(tmp_path / "plain")
    make_run(plain, n_tasks=120, batch=10, metadata=0)
    traces = os.path.join(plain, "traces-100.jsonl")
    with open(traces, "rb") as f:
        lines = f.readlines()
    members = _members(lines, per=2, cut=False)
    assert len(members) == 6
    folder = tmp_path / "cut"
    folder.mkdir()
    path = folder / "traces-100.jsonl.gz"
    path.write_bytes(b"".join(members[:4]) + members[4][:len(members[4]) // 2])  # killed while writing the 5th
    rf = RunFolder(str(folder))
    rows = [r for _s, rs in rf.read_all() for r in rs]
    spans_per_line = [len(json.loads(x)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for x in lines]
    assert len(rows) == sum(spans_per_line[:8])  # the first four members' lines, whole
    assert rf.problems == [f"{path}: byte {sum(map(len, members[:4]))}: incomplete last gzip member "
                           f"({len(members[4]) // 2:,} bytes), skipped"]
    assert rf.bytes_read == sum(map(len, members[:4])) and rf.bytes_total == path.stat().st_size


def test_a_live_file_is_followed_one_whole_member_at_a_time(tmp_path):
    plain = str(tmp_path / "plain")
    make_run(plain, n_tasks=90, batch=10, metadata=0)
    with open(os.path.join(plain, "traces-100.jsonl"), "rb") as f:
        lines = f.readlines()
    assert len(lines) == 9
    members = _members(lines, per=3, cut=True)  # the second member ends mid-line
    folder = tmp_path / "live"
    folder.mkdir()
    path = folder / "traces-100.jsonl.gz"
    rf = RunFolder(str(folder))
    assert rf.poll() == []

    def spans(batch):
        return sum(len(rows) for _s, rows in batch)

    def per_line(i):
        return len(json.loads(lines[i])["resourceSpans"][0]["scopeSpans"][0]["spans"])

    with open(path, "ab") as f:
        f.write(members[0])
        f.write(members[1][:20])  # the writer's next flush, begun
        f.flush()
        assert spans(rf.poll()) == sum(per_line(i) for i in range(3))
        assert rf.poll() == [] and not rf.moved  # half a member: nothing yet
        f.write(members[1][20:])
        f.flush()
        assert spans(rf.poll()) == sum(per_line(i) for i in range(3, 5))  # its last line is cut: kept back
        f.write(members[2])
        f.flush()
        assert spans(rf.poll()) == sum(per_line(i) for i in range(5, 9))
    rf.finish()
    assert rf.problems == [] and rf.bytes_read == rf.bytes_total == path.stat().st_size


def test_a_corrupt_member_is_reported_by_file_and_byte_and_the_rest_is_read(tmp_path):
    plain = str(tmp_path / "plain")
    make_run(plain, n_tasks=80, batch=10, metadata=0)
    with open(os.path.join(plain, "traces-100.jsonl"), "rb") as f:
        lines = f.readlines()
    members = _members(lines, per=2, cut=False)
    bad = bytearray(members[1])
    for i in range(20, 40):
        bad[i] ^= 0x55
    folder = tmp_path / "corrupt"
    folder.mkdir()
    path = folder / "traces-100.jsonl.gz"
    path.write_bytes(members[0] + bytes(bad) + b"".join(members[2:]))
    rf = RunFolder(str(folder))
    got = sum(len(rows) for _s, rows in rf.read_all())
    per = [len(json.loads(x)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for x in lines]
    assert got == sum(per) - sum(per[2:4])  # all but the corrupt member's two lines
    [problem] = rf.problems
    assert problem.startswith(f"{path}: byte {len(members[0])}: skipped a corrupt gzip member (")


APP = r'''
from concurrent.futures import ThreadPoolExecutor
import logging

def square(x):
    logging.getLogger("app").warning("squaring %d", x)
    return x * x

with ThreadPoolExecutor(2) as ex:
    print(sum(ex.map(square, range(40))))
'''


def test_a_real_runs_compressed_lines_parse_with_the_stock_protobuf_parser(tmp_path):
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    (tmp_path / "app.py").write_text(APP)
    run = tmp_path / "run"
    p = run_instrumented([PYTHON, str(tmp_path / "app.py")], env=evlog_env(EVLOG_RUN_DIR=str(run)),
                         cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    members = glob.glob(str(run / "*.jsonl.gz"))  # as the run's exporter process writes them
    assert {os.path.basename(m).split("-")[0] for m in members} == {"traces", "logs", "metrics"}, os.listdir(run)
    plain = tmp_path / "plain"
    plain.mkdir()
    classes = {"traces": ExportTraceServiceRequest, "logs": ExportLogsServiceRequest,
               "metrics": ExportMetricsServiceRequest}
    parsed = {k: 0 for k in classes}
    spans = 0
    for path in members:
        signal = os.path.basename(path).split("-")[0]
        with gzip.open(path, "rt", encoding="utf-8") as f:  # the stdlib reads every member, as the Collector does
            lines = f.readlines()
        (plain / os.path.basename(path)[:-3]).write_text("".join(lines), encoding="utf-8")
        for line in lines:
            cls = classes[signal]
            msg = json_format.Parse(json.dumps(hex_ids_to_base64(json.loads(line), cls.DESCRIPTOR)), cls())
            parsed[signal] += 1
            if signal == "traces":
                spans += sum(len(ss.spans) for rs in msg.resource_spans for ss in rs.scope_spans)
    assert all(parsed.values()), parsed
    assert spans >= 40  # a span per pool task at least
    want, _ = _rows(str(plain))
    got, problems = _rows(str(run))
    assert got == want and not problems
