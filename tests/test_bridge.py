"""evlog.bridge: torchelastic's events API as a drop-in; every recorded event also an OTel event.

Each test runs a small program under evlog-instrument (or evlog.configure) against the real OTLP
receiver, and checks what it printed and what arrived.
"""
from __future__ import annotations

import textwrap

from helpers import PYTHON, evlog_env, run_instrumented

# The seed's three examples (torchelastic-events.txt), unchanged but for the imports and a call of
# execute(): torchelastic's `event` module is evlog.bridge.
SEED_RECORD_EVENT = """
from evlog.bridge import Event, record_event
import evlog.bridge as event

event.configure(event.NullEventHandler()) # uses event_type = "torchelastic"
event.configure(event.ConsoleEventHandler(), event_type = "foo")

def execute():
  event = Event(name="test_event", event_type="foo")
  # The code below will be processed by the ConsoleEventHandler
  record_event(event)

execute()
"""

SEED_RECORD = """
from evlog.bridge import record

def execute():
  metadata = {'key':'value'}
  record(event_name="test", event_type="console", metadata=metadata)

execute()
"""

SEED_CUSTOM_HANDLER = """
from evlog.bridge import EventHandler, record
import evlog.bridge as event

class StdoutEventHandler(EventHandler):
   def record(self, event):
       print(f"[{event.event_type}]: event_name: {event.name}")

event.configure(StdoutEventHandler(), event_type="stdout_events")
record("test_event", "stdout_events")
"""


def _run(code: str, receiver, **env) -> str:
    proc = run_instrumented(code, env=evlog_env({**receiver.env("grpc"), "EVLOG_CAPTURE": "off", **env}),
                            timeout=120, check=True)
    return proc.stdout.decode()


def _events(receiver, name: str, n: int = 1) -> list[dict]:
    return receiver.wait_for(lambda: (rows := [r for r in receiver.logs() if r["event_name"] == name])
                             and len(rows) >= n and rows, timeout=30)


def test_seed_record_event_example_prints_on_console_and_emits_event(otlp_receiver):
    out = _run(SEED_RECORD_EVENT, otlp_receiver)
    assert out == "[foo] test_event\n"
    (ev,) = _events(otlp_receiver, "test_event")
    assert ev["attributes"]["evlog.event_type"] == "foo"
    assert ev["body"] == {}


def test_seed_record_example_sends_metadata_as_body(otlp_receiver):
    out = _run(SEED_RECORD, otlp_receiver)
    assert out == '[console] test {"key": "value"}\n'  # type "console" goes to the console by default
    (ev,) = _events(otlp_receiver, "test")
    assert ev["body"] == {"key": "value"}
    assert ev["attributes"]["evlog.event_type"] == "console"


def test_seed_custom_handler_prints_its_line_and_emits_event(otlp_receiver):
    out = _run(SEED_CUSTOM_HANDLER, otlp_receiver)
    assert out == "[stdout_events]: event_name: test_event\n"
    (ev,) = _events(otlp_receiver, "test_event")
    assert ev["attributes"]["evlog.event_type"] == "stdout_events"


def test_null_handler_silences_only_its_local_destination(otlp_receiver):
    out = _run("""
        from evlog.bridge import NullEventHandler, configure, record
        configure(NullEventHandler(), event_type="console")
        record("quiet", event_type="console", metadata={"n": 1})
        record("default type")
        """, otlp_receiver)
    assert out == ""
    (ev,) = _events(otlp_receiver, "quiet")
    assert ev["body"] == {"n": 1}
    (ev,) = _events(otlp_receiver, "default type")
    assert ev["attributes"]["evlog.event_type"] == "torchelastic"


def test_event_is_in_the_current_span_with_its_own_timestamp(otlp_receiver):
    _run("""
        from opentelemetry import trace
        from evlog.bridge import Event, record_event
        with trace.get_tracer("t").start_as_current_span("outer"):
            record_event(Event("stamped", type="t", metadata={"a": 1}, timestamp=1700000000123))
        """, otlp_receiver)
    (ev,) = _events(otlp_receiver, "stamped")
    (span,) = otlp_receiver.wait_for(lambda: [s for s in otlp_receiver.spans() if s["name"] == "outer"])
    assert (ev["trace_id"], ev["span_id"]) == (span["trace_id"], span["span_id"])
    assert ev["time"] == 1700000000123 * 1_000_000


def test_metadata_of_any_type_is_converted_never_dropped_or_raised(otlp_receiver):
    out = _run("""
        import enum
        import numpy as np
        from evlog.bridge import Event, record, record_event

        class Color(str, enum.Enum):
            RED = "red"

        class Opaque:
            def __str__(self):
                return "opaque!"

        class Broken:
            def __str__(self):
                raise RuntimeError("no str")
            __repr__ = __str__

        cyclic = {"name": "loop"}
        cyclic["self"] = cyclic
        record("odd", event_type="odd", metadata={
            "none": None, "nested": {"a": [1, (2, 3)], "b": {"c": None}}, "tuple": (1, "x"),
            "set": {7}, "enum": Color.RED, "huge": 2 ** 70, 5: "int key", "obj": Opaque(),
            "broken": Broken(), "np_int": np.int64(3), "np_float": np.float32(0.5), "bytes": b"\\x00\\x01",
            "cyclic": cyclic,
        })
        record_event(Event("bad timestamp", metadata={"x": 1}, timestamp="yesterday"))
        record_event(Event(Color.RED, type=Color.RED, metadata=["not", "a", "dict"]))
        print("program went on")
        """, otlp_receiver)
    assert out == "program went on\n"
    (ev,) = _events(otlp_receiver, "odd")
    body = ev["body"]
    assert body["none"] is None
    assert body["nested"] == {"a": [1, [2, 3]], "b": {"c": None}}
    assert body["tuple"] == [1, "x"] and body["set"] == [7]
    assert body["enum"] == "red"
    assert body["huge"] == str(2 ** 70)
    assert body["5"] == "int key"
    assert body["obj"] == "opaque!"
    assert body["broken"] == "<Broken>"
    assert body["np_int"] == 3 and body["np_float"] == 0.5
    assert body["bytes"] in (b"\x00\x01", "AAE=")  # bytes, or their base64 in a JSON view
    assert body["cyclic"]["name"] == "loop" and "cyclic" in body and body["cyclic"]["self"]
    (late,) = _events(otlp_receiver, "bad timestamp")
    assert late["body"] == {"x": 1}
    (red,) = _events(otlp_receiver, "red")
    assert red["attributes"]["evlog.event_type"] == "red" and red["body"] == ["not", "a", "dict"]


def test_evlog_configure_in_code_sends_events(otlp_receiver):
    import subprocess

    code = textwrap.dedent("""
        import evlog
        evlog.configure()
        from evlog.bridge import record
        record("configured", event_type="code", metadata={"ok": True})
        """)
    proc = subprocess.run([PYTHON, "-c", code], env=evlog_env(otlp_receiver.env("grpc")), capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    (ev,) = _events(otlp_receiver, "configured")
    assert ev["body"] == {"ok": True} and ev["attributes"]["evlog.event_type"] == "code"


def test_otel_event_handler_sends_through_the_programs_own_provider_without_evlog(otlp_receiver):
    import subprocess

    code = textwrap.dedent(f"""
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
        from evlog.bridge import OTelEventHandler, configure, record

        provider = LoggerProvider()
        provider.add_log_record_processor(SimpleLogRecordProcessor(
            OTLPLogExporter(endpoint="{otlp_receiver.grpc_endpoint}", insecure=True)))
        configure(OTelEventHandler(provider), event_type="mine")
        record("own provider", event_type="mine", metadata={{"k": "v"}})
        record("not mine", event_type="other")
        provider.shutdown()
        """)
    proc = subprocess.run([PYTHON, "-c", code], env=evlog_env(), capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    (ev,) = _events(otlp_receiver, "own provider")
    assert ev["body"] == {"k": "v"} and ev["attributes"]["evlog.event_type"] == "mine"
    assert not [r for r in otlp_receiver.logs() if r["event_name"] == "not mine"]


def test_otel_event_handler_under_evlog_sends_each_event_once(otlp_receiver):
    _run("""
        from evlog.bridge import OTelEventHandler, configure, record
        configure(OTelEventHandler(), event_type="otel")
        record("once", event_type="otel")
        record("sentinel", event_type="otel")
        """, otlp_receiver)
    _events(otlp_receiver, "sentinel")
    assert len([r for r in otlp_receiver.logs() if r["event_name"] == "once"]) == 1
