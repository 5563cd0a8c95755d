"""evlog/builders/profiles.py: profile records -> ``evlog.profile`` log records with a pprof body, no profiler
thread. Records are written as the profiler's shipping thread writes them (Sampler._convert in
evlog/observed/profiler.py: ints for the kinds, per evlog/wire/profile_records.py). The bodies are judged by
protobuf's own parser (tests/pprof_proto.py). tests/test_profile.py covers one Dask interval with Dask's
frames cut; here: pool tasks, the frame table across feeds, its restart and gaps, the attributes."""
from __future__ import annotations

import base64
import gzip

import pprof_proto
from opentelemetry.sdk.resources import Resource

from evlog import __version__
from evlog.builders.profiles import ProfileLogs
from evlog.wire.profile_records import Rec, Task

RES = Resource({"service.name": "app", "process.pid": 4545})
FRAMES, INTERVAL, SAMPLES = Rec.FRAMES.value, Rec.INTERVAL.value, Rec.SAMPLES.value
DASK, POOL = Task.DASK.value, Task.POOL.value
TRACE, SPAN = 0x0AF7651916CD43DD8448EB211C80319C, 0x00F067AA0BA902B7


def builder(interval=0.02):
    got = []
    return ProfileLogs({"interval": interval}, lambda: RES, add=got.extend), got


def parsed(record):
    return pprof_proto.parse(gzip.decompress(base64.b64decode(record.log_record.body)))


def test_a_pool_functions_samples_are_one_record_with_every_frame_kept():
    b, got = builder()
    frames = (("square", "/app/work.py", 3), ("Task.__call__", "/site-packages/distributed/x.py", 1))
    out = b.feed([(FRAMES, 0, frames), (INTERVAL, 2_000_000_000, 2_500_000_000, 25, 4, 1, 300_000),
                  (SAMPLES, POOL, "app.square", TRACE, SPAN, 77, (((0, 1), 3, 60_000_000), ((0,), 1, 20_000_000)))],
                 50.0)
    assert out == [] and len(got) == 1
    [rec] = got
    lr = rec.log_record
    assert lr.event_name == "evlog.profile" and lr.timestamp == 2_500_000_000
    assert dict(lr.attributes) == {"code.function.name": "app.square", "evlog.profile.samples": 4,
                                   "evlog.profile.tasks": 1, "evlog.profile.interval": 0.02,
                                   "profiling.data.format": "pprof-gzip-base64", "profiling.data.type": "cpu",
                                   "com.splunk.sourcetype": "otel.profiling"}
    assert rec.resource is RES
    assert (rec.instrumentation_scope.name, rec.instrumentation_scope.version) == ("evlog.profile", __version__)
    prof = parsed(rec)
    assert (prof.period, prof.time_nanos, prof.duration_nanos) == (20_000_000, 2_000_000_000, 500_000_000)
    s = prof.string_table
    assert [(s[t.type], s[t.unit]) for t in prof.sample_type] == [("samples", "count"), ("wall", "nanoseconds")]
    labels = {"trace_id": f"{TRACE:032x}", "span_id": f"{SPAN:016x}", "thread.id": 77}
    assert pprof_proto.samples(prof) == [(["square", "Task.__call__"], [3, 60_000_000], labels),  # pool: nothing cut
                                         (["square"], [1, 20_000_000], labels)]


def test_prefixes_and_functions_are_records_of_their_own():
    b, got = builder()
    b.feed([(FRAMES, 0, (("f", "/app/a.py", 1),)), (INTERVAL, 1, 2, 1, 3, 0, 0),
            (SAMPLES, DASK, "inc", 1, 2, 5, (((0,), 1, 10),)), (SAMPLES, POOL, "app.f", 1, 3, 5, (((0,), 1, 10),)),
            (SAMPLES, DASK, "inc", 1, 4, 6, (((0,), 1, 10),))], 50.0)
    labels = [(r.log_record.attributes.get("dask.task.prefix"), r.log_record.attributes.get("code.function.name"),
               r.log_record.attributes["evlog.profile.tasks"], r.log_record.attributes["evlog.profile.samples"])
              for r in got]
    assert len(labels) == 2 and set(labels) == {(None, "app.f", 1, 1), ("inc", None, 2, 2)}


def test_the_frame_table_lasts_across_feeds_and_starts_anew_at_zero():
    b, got = builder()
    b.feed([(FRAMES, 0, (("a", "/app/m.py", 1), ("b", "/app/m.py", 5))), (INTERVAL, 1, 2, 1, 0, 0, 0)], 50.0)
    assert got == []  # no samples: no record
    b.feed([(FRAMES, 2, (("c", "/app/m.py", 9),)), (INTERVAL, 2, 3, 1, 1, 0, 0),
            (SAMPLES, POOL, "app.c", 1, 2, 5, (((2, 1, 0), 1, 10),))], 51.0)
    assert pprof_proto.samples(parsed(got[-1]))[0][0] == ["c", "b", "a"]
    b.feed([(FRAMES, 0, (("z", "/app/n.py", 1),)), (INTERVAL, 3, 4, 1, 1, 0, 0),  # the table starts anew
            (SAMPLES, POOL, "app.z", 1, 2, 5, (((0,), 1, 10),))], 52.0)
    assert pprof_proto.samples(parsed(got[-1]))[0][0] == ["z"]


def test_frames_lost_on_the_way_are_unknown_and_never_break_a_record():
    b, got = builder()
    b.feed([(FRAMES, 0, (("a", "/app/m.py", 1),)),
            (FRAMES, 3, (("d", "/app/m.py", 4),)),  # entries 1 and 2 were dropped on the way
            (INTERVAL, 1, 2, 1, 1, 0, 0), (SAMPLES, POOL, "app.d", 1, 2, 5, (((3, 1, 0, 9), 1, 10),))], 50.0)
    assert pprof_proto.samples(parsed(got[0]))[0][0] == ["d", "?", "a", "?"]  # 9: past the table's end


def test_dasks_frames_are_cut_only_below_the_tasks_function():
    b, got = builder()
    frames = (("work", "/app/t.py", 1), ("Task.__call__", "/site-packages/dask/_task_spec.py", 700),
              ("_run_task", "/site-packages/distributed/worker.py", 2900), ("helper", "/site-packages/dask/utils.py", 5))
    b.feed([(FRAMES, 0, frames), (INTERVAL, 1, 2, 1, 2, 0, 0),
            (SAMPLES, DASK, "work", 1, 2, 5, (((0, 1, 2), 1, 10), ((3, 0, 1, 2), 1, 10)))], 50.0)
    assert [st for st, _v, _lb in pprof_proto.samples(parsed(got[0]))] == [["work"], ["helper", "work"]]
