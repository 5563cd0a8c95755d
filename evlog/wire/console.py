"""The console's wire: the markers the program writes into its own byte streams for the relay (span
changes, its exit, a logged record's lines), and the records the relay sends (kind ``console``).

The program marks its span changes and its exit in the byte streams themselves (APC escape sequences
carrying a per-run token, see ``encode_marker``), so each line gets the trace context that was current
when it was written; the relay strips them. Standard library only: the relay imports this under ``python -S``.

Records of kind ``console`` (tuples of atoms; ``stream`` indexes ``meta["streams"]``; ``offset`` and
``lines`` are the stream's bytes and newlines before, dropped ones included, so the builder sees gaps):
    ("d", stream, context, time_ns, data, offset, lines, at_line_start)   output (context: 50 hex or None)
    ("e", stream, offset, lines, at_line_start)                          the stream's end
    ("x",)                                                               the program's exit
    ("l", stream, payload)                       the lines that follow were logged (console.logged)
"""
KIND = "console"  # the records' kind
CONTROL_S = 5.0  # how long the reader waits to hand over the output at the program's exit, and at the end
KIND_CONTEXT, KIND_NONE, KIND_EXIT, KIND_LOGGED = b"c", b"n", b"x", b"l"
_KINDS = (KIND_CONTEXT, KIND_NONE, KIND_EXIT, KIND_LOGGED)
# Attribute names of console records (docs/conventions.md); tests, benchmarks and readers import them.
ATTR_IOSTREAM = "log.iostream"  # "stdout" or "stderr": OpenTelemetry's semantic convention
ATTR_REPEATED = "evlog.console.repeated"
ATTR_DROPPED = "evlog.console.dropped"
_PAYLOAD = 50
_END = b"\x1b\\"


# -- markers: the program -> relay protocol inside the byte streams --------------------------------

def marker_prefix(token: str) -> bytes:
    return b"\x1b_evlog:" + token.encode("ascii") + b":"


def encode_marker(prefix: bytes, kind: bytes, trace_id: int = 0, span_id: int = 0, flags: int = 0) -> bytes:
    """One marker: a fixed-length APC sequence (terminals ignore APC, and the relay removes it)."""
    payload = f"{trace_id:032x}{span_id:016x}{flags:02x}" if kind == KIND_CONTEXT else "0" * _PAYLOAD
    return prefix + kind + payload.encode("ascii") + _END


def encode_logged(prefix: bytes, first_crc: int, lines: int) -> bytes:
    """The marker before a logging record's text: the CRC-32 of its first line (as the parser renders
    it) and its number of lines; the console's builder drops those lines (the record is exported)."""
    return prefix + KIND_LOGGED + f"{first_crc & 0xFFFFFFFF:08x}{min(lines, 0xFFFF):04x}".ljust(_PAYLOAD, "0").encode() + _END


def decode_logged(payload: bytes) -> tuple[int, int]:
    return int(payload[:8], 16), int(payload[8:12], 16)


class MarkerSplitter:
    """Bytes in; data pieces (bytes) and markers ((kind, payload)) out, in order.

    A marker is written in one write(), so a read can end inside one only if more is already
    readable; a tail that could begin a marker is held back (``held``) until the caller has
    checked that, then either completed by the next read or given back by ``release()``.
    """

    def __init__(self, prefix: bytes):
        self.prefix = prefix
        self.size = len(prefix) + 1 + _PAYLOAD + len(_END)
        self.held = b""

    def feed(self, data: bytes) -> list:
        buf = self.held + data if self.held else data
        self.held = b""
        out: list = []
        pos = 0
        prefix, size = self.prefix, self.size
        while True:
            i = buf.find(prefix, pos)
            if i < 0:
                break
            if i + size > len(buf):
                if i > pos:
                    out.append(buf[pos:i])
                self.held = buf[i:]
                return out
            kind = buf[i + len(prefix): i + len(prefix) + 1]
            if buf[i + size - len(_END): i + size] != _END or kind not in _KINDS:
                if i + 1 > pos:
                    out.append(buf[pos:i + 1])
                pos = i + 1
                continue
            if i > pos:
                out.append(buf[pos:i])
            out.append((kind, buf[i + len(prefix) + 1: i + size - len(_END)]))
            pos = i + size
        tail = len(buf) - pos
        j = buf.rfind(b"\x1b", max(pos, len(buf) - len(prefix) + 1))
        if j >= 0 and prefix.startswith(buf[j:]):
            if j > pos:
                out.append(buf[pos:j])
            self.held = buf[j:]
        elif tail:
            out.append(buf[pos:] if pos else buf)
        return out

    def release(self) -> bytes:
        held, self.held = self.held, b""
        return held
