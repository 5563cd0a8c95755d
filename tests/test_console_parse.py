"""The console line parser (pure: bytes in, records out), the redactor, and the relay's marker
splitter, including hypothesis properties over arbitrary byte streams and command lines."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evlog.builders import console_parse as cp
from evlog.builders.redact import MASK, Redactor
from evlog.wire.console import KIND_CONTEXT, KIND_EXIT, MarkerSplitter, encode_marker, marker_prefix


def feed(parser, data, stream="stdout", chunk=None):
    out = []
    step = chunk or max(1, len(data))
    for i in range(0, len(data), step):
        out += parser.feed(stream, data[i:i + step])
    return out + parser.close(stream)


def texts(records, kind=cp.TEXT):
    return [r.body for r in records if r.kind == kind]


# -- rendering ------------------------------------------------------------------------------------

def test_carriage_return_progress_bar_keeps_only_its_final_state():
    assert cp.render(" 10%|#   |\r 50%|##  |\r100%|####|") == "100%|####|"
    assert cp.render("Downloading...\rDone") == "Doneloading..."  # as a console shows it
    assert cp.render("done\r") == "done"


def test_backspace_escape_sequences_and_erase_render_as_on_a_console():
    assert cp.render("\x1b[1;32mok\x1b[0m") == "ok"
    assert cp.render("spin |\b/\b-") == "spin -"
    assert cp.render("long old text\r\x1b[Knew") == "new"
    assert cp.render("\x1b]0;title\x07visible") == "visible"


# -- lines, modes, commands -----------------------------------------------------------------------

def test_enabled_mode_emits_lines_metadata_and_redacts():
    p = cp.ConsoleParser("enabled")
    recs = feed(p, b'hello\n{"epoch": 2, "loss": 0.25}\npassword=hunter2 ok\n')
    assert texts(recs) == ["hello", f"password={MASK} ok"]
    assert texts(recs, cp.METADATA) == [{"epoch": 2, "loss": 0.25}]


def test_metadata_is_exactly_one_json_object_on_the_line():
    p = cp.ConsoleParser("metadata")
    lines = [b'{"a": 1}', b' {"a": 2}', b'{"a": 3} ', b"{'a': 4}", b"[1, 2]", b'{"a": 5}{"b": 6}', b'{"a": {"b": 7}}']
    recs = feed(p, b"\n".join(lines) + b"\n")
    assert texts(recs, cp.METADATA) == [{"a": 1}, {"a": {"b": 7}}]
    assert texts(recs) == []  # metadata mode: no text


def test_metadata_values_otlp_cannot_carry_are_converted_and_secret_keys_masked():
    p = cp.ConsoleParser("metadata")
    recs = feed(p, b'{"big": 123456789012345678901234567890, "api_key": "abc", "n": {"token": 5}}\n')
    (body,) = texts(recs, cp.METADATA)
    assert body["big"] == float(123456789012345678901234567890)
    assert body["api_key"] == MASK and body["n"] == {"token": MASK}


def test_numeric_items_flatten_nested_objects_and_skip_booleans():
    assert dict(cp.numeric_items({"loss": 0.5, "ok": True, "name": "x", "val": {"acc": 1, "deep": {"f1": 2.5}}})) == {
        "loss": 0.5, "val.acc": 1, "val.deep.f1": 2.5}


def test_a_command_on_one_stream_changes_the_mode_for_both():
    p = cp.ConsoleParser("enabled")
    out = p.feed("stdout", b"before\n")
    out += p.feed("stderr", b'/LOGCOMMAND {"mode":"disabled"}\n')
    out += p.feed("stdout", b'hidden\n{"x": 1}\n')
    out += p.feed("stdout", b'/LOGCOMMAND {"mode": "metadata"}\n{"x": 2}\nstill hidden\n')
    out += p.feed("stderr", b'/LOGCOMMAND   {"mode":"ENABLED"}\nafter\n')
    assert [(r.kind, r.stream, r.body) for r in out] == [
        (cp.TEXT, "stdout", "before"),
        (cp.COMMAND, "stderr", {"mode": "disabled"}),
        (cp.COMMAND, "stdout", {"mode": "metadata"}),
        (cp.METADATA, "stdout", {"x": 2}),
        (cp.COMMAND, "stderr", {"mode": "enabled"}),
        (cp.TEXT, "stderr", "after"),
    ]


def test_a_malformed_command_warns_and_is_an_ordinary_line():
    p = cp.ConsoleParser("enabled")
    for line in ["/LOGCOMMAND {nope", "/LOGCOMMAND", '/LOGCOMMAND ["mode"]', '/LOGCOMMAND {"mode": "off"}',
                 '/LOGCOMMAND {"colour": 1}']:
        recs = feed(p, line.encode() + b"\n")
        assert [r.kind for r in recs] == [cp.WARNING, cp.TEXT], line
        assert recs[1].body == line
        assert p.mode == "enabled"
    assert texts(feed(p, b"/LOGCOMMANDS {}\n  /LOGCOMMAND {}\n")) == ["/LOGCOMMANDS {}", "  /LOGCOMMAND {}"]


def test_repeats_collapse_into_a_notice_and_empty_runs_into_one_line():
    p = cp.ConsoleParser("enabled")
    recs = feed(p, b"same\n" * 100 + b"next\n\n\n\n\nlast\nlast\n")
    assert [(r.kind, r.body, r.lines) for r in recs] == [
        (cp.TEXT, "same", 0),
        (cp.REPEATED, "[evlog: previous line repeated 99 more times]", 99),
        (cp.TEXT, "next", 0),
        (cp.TEXT, "", 0),
        (cp.TEXT, "last", 0),
        (cp.REPEATED, "[evlog: previous line repeated 1 more time]", 1),
    ]


def test_pending_repeats_are_reported_when_the_stream_goes_idle():
    p = cp.ConsoleParser("enabled")
    assert texts(p.feed("stdout", b"tick\ntick\ntick\n")) == ["tick"]
    assert [r.lines for r in p.flush()] == [2]
    assert p.flush() == []


def test_long_lines_are_truncated_with_a_marker_and_memory_stays_bounded():
    p = cp.ConsoleParser("enabled", max_line=100)
    out = []
    for _ in range(1000):  # a 1 MB line arriving in 1 kB pieces
        out += p.feed("stdout", b"x" * 1000)
        assert len(p._streams["stdout"].buf) <= 4 * 100
    out += p.feed("stdout", b"\nnext\n")
    assert texts(out) == ["x" * 100 + " [evlog: line truncated, 999900 more bytes]", "next"]


def test_a_long_running_progress_bar_keeps_its_latest_state():
    p = cp.ConsoleParser("enabled", max_line=50)
    out = []
    for i in range(2000):
        out += p.feed("stdout", f"\rstep {i:5d}/2000".encode())
    out += p.feed("stdout", b"\n")
    assert texts(out) == ["step  1999/2000"]


def test_invalid_utf8_nul_and_no_trailing_newline():
    p = cp.ConsoleParser("enabled")
    assert texts(feed(p, b"bad \xff\xfe end\nnul \x00 here\nno newline")) == [
        "bad \ufffd\ufffd end", "nul \x00 here", "no newline"]


def test_private_key_blocks_never_leave():
    p = cp.ConsoleParser("enabled")
    block = b"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1\nZZZZsecretbase64\n-----END RSA PRIVATE KEY-----\n"
    recs = feed(p, b"before\n" + block + b"after\n")
    assert texts(recs) == ["before", MASK, "after"]


def test_discarded_bytes_count_whole_lines_once():
    p = cp.ConsoleParser("enabled")
    out = p.feed("stdout", b"a1\na2\npart")
    p.discard("stdout", 3, True)  # "ial\nb1\nb2\nbro" was dropped
    out += p.feed("stdout", b"ken\nc1\n")
    assert [(r.kind, r.body if r.kind == cp.TEXT else r.lines) for r in out] == [
        (cp.TEXT, "a1"), (cp.TEXT, "a2"), (cp.DROPPED, 4), (cp.TEXT, "c1")]


# -- redaction ------------------------------------------------------------------------------------

def test_builtin_redaction_patterns_and_extra_ones():
    r = Redactor([r"employee-\d+"])
    cases = {
        "password=hunter2 user=bob": f"password={MASK} user=bob",
        'db_password: "s3 cr3t"': f'db_password: "{MASK}"',
        "Authorization: Bearer abc.def-ghi_jkl": f"Authorization: Bearer {MASK}",
        "url https://bob:pw@host/x": f"url https://{MASK}@host/x",
        "key AKIAIOSFODNN7EXAMPLE": f"key {MASK}",
        "ghp_" + "a" * 36: MASK,
        "sk-proj-" + "b" * 30: MASK,
        "hf_" + "c" * 34: MASK,
        "xoxb-1234567890-abcdef": MASK,
        "id employee-42 done": f"id {MASK} done",
        "num_tokens=512 tokens/s=30 keyboard: ok": "num_tokens=512 tokens/s=30 keyboard: ok",
        "epoch 3 loss=0.5": "epoch 3 loss=0.5",
    }
    for text, expected in cases.items():
        assert r(text) == expected, text


# -- properties -----------------------------------------------------------------------------------

_console_bytes = st.one_of(
    st.binary(max_size=3000),
    st.lists(st.sampled_from([b"a", b"bb", b"\xe2\x82\xac", b"\xff", b"\r", b"\n", b"\r\n", b"\x1b[2K", b"\x08",
                              b"{", b"}", b'{"k": 1}', b"/LOGCOMMAND ", b'{"mode":"enabled"}', b" ", b"\x00"]),
             max_size=400).map(b"".join),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_console_bytes, cuts=st.lists(st.integers(0, 3000), max_size=20),
       mode=st.sampled_from(cp.MODES), max_line=st.sampled_from([8, 64, cp.MAX_LINE]))
def test_any_bytes_any_chunking_give_the_same_records(data, cuts, mode, max_line):
    whole = cp.ConsoleParser(mode, max_line=max_line)
    expected = whole.feed("stdout", data) + whole.close("stdout")
    chunked = cp.ConsoleParser(mode, max_line=max_line)
    got, last = [], 0
    for cut in sorted(set(cuts)) + [len(data)]:
        got += chunked.feed("stdout", data[last:cut])
        last = max(last, cut)
    got += chunked.close("stdout")
    assert got == expected
    assert chunked.mode in cp.MODES
    for r in got:
        assert r.kind in (cp.TEXT, cp.METADATA, cp.COMMAND, cp.REPEATED, cp.WARNING)
        if r.kind == cp.TEXT:
            assert "\n" not in r.body and len(r.body) <= max_line + 60
            json.dumps(r.body)
        if r.kind == cp.METADATA:
            json.dumps(r.body)


_json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                            max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(payload=st.one_of(st.text(max_size=60), _json_values.map(json.dumps),
                         st.dictionaries(st.sampled_from(["mode", "MODE", "x"]),
                                         st.sampled_from(["enabled", "metadata", "disabled", "off", 1, None]),
                                         max_size=2).map(json.dumps)),
       sep=st.sampled_from([" ", "\t", "  "]))
def test_any_command_line_is_applied_or_warned_about_never_crashes(payload, sep):
    line = f"/LOGCOMMAND{sep}{payload}".replace("\n", " ").replace("\r", " ")
    p = cp.ConsoleParser("enabled")
    recs = p.feed("stderr", line.encode() + b"\n")
    kinds = [r.kind for r in recs]
    shown = cp.render(line)  # what a terminal draws: a backspace or an escape can overwrite the separator
    if not (shown.startswith(cp.COMMAND_PREFIX) and (len(shown) == 11 or shown[11].isspace())):
        assert cp.COMMAND not in kinds and cp.WARNING not in kinds and p.mode == "enabled"  # an ordinary line
        return
    if kinds == [cp.COMMAND]:
        cmd = recs[0].body
        assert set(cmd) <= {"mode"} and p.mode == cmd.get("mode", "enabled")
    else:
        assert kinds[0] == cp.WARNING and p.mode == "enabled"
        assert cp.TEXT in kinds or cp.METADATA in kinds or line.strip() != line


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 200), chunk=st.integers(1, 64), drops=st.sets(st.integers(0, 400), max_size=40))
def test_every_line_is_exported_or_counted_as_dropped(n, chunk, drops):
    lines = [f"line {i} {'x' * (i % 7)}" for i in range(n)]
    data = "".join(line + "\n" for line in lines).encode()
    p = cp.ConsoleParser("enabled")
    out = []
    for k, i in enumerate(range(0, len(data), chunk)):
        piece = data[i:i + chunk]
        if k in drops:
            p.discard("stdout", piece.count(b"\n"), not piece.endswith(b"\n"))
        else:
            out += p.feed("stdout", piece)
    out += p.close("stdout")
    got = [r.body for r in out if r.kind == cp.TEXT]
    dropped = sum(r.lines for r in out if r.kind == cp.DROPPED)
    assert len(got) + dropped == n
    it = iter(lines)
    assert all(any(g == x for x in it) for g in got), "exported lines are whole, in order"


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.one_of(st.binary(max_size=40), st.sampled_from([b"\x1b", b"\x1b_evlog:", b"\x1b\\"]),
                                st.tuples(st.sampled_from([b"c", b"n", b"x"]), st.integers(0, 2**64))),
                      max_size=20),
       cuts=st.lists(st.integers(0, 2000), max_size=10))
def test_marker_splitter_strips_exactly_the_markers(parts, cuts):
    prefix = marker_prefix("0123456789abcdef")
    stream, data, markers = b"", b"", []
    for part in parts:
        if isinstance(part, tuple):
            m = encode_marker(prefix, part[0], part[1], part[1] & 0xFFFF, 1)
            stream += m
            markers.append(m[len(prefix):len(prefix) + 1])
        else:
            stream += part
            data += part
    sp = MarkerSplitter(prefix)
    got_data, got_markers, last = b"", [], 0
    for cut in sorted(set(c for c in cuts if c < len(stream))) + [len(stream)]:
        for item in sp.feed(stream[last:cut]):
            if isinstance(item, bytes):
                got_data += item
            else:
                got_markers.append(item[0])
        last = max(last, cut)
    got_data += sp.release()
    assert got_markers == markers
    assert got_data == data


def test_marker_payloads_carry_the_span_context():
    prefix = marker_prefix("feedfacefeedface")
    m = encode_marker(prefix, KIND_CONTEXT, 0x1234, 0x56, 1)
    (kind, payload), = MarkerSplitter(prefix).feed(m)
    assert kind == KIND_CONTEXT and int(payload[:32], 16) == 0x1234 and int(payload[32:48], 16) == 0x56
    assert MarkerSplitter(prefix).feed(b"a" + encode_marker(prefix, KIND_EXIT) + b"b")[1][0] == KIND_EXIT
