"""pprof's Profile message (github.com/google/pprof proto/profile.proto) as a real protobuf class, built
from its field numbers with the protobuf package, so tests judge evlog's hand-written pprof by protobuf's
own parser rather than by evlog's decoder. Only the fields evlog writes are declared; protobuf keeps the
others as unknown fields.

    profile = parse(gzip.decompress(base64.b64decode(body)))
"""
from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_T = descriptor_pb2.FieldDescriptorProto
_MESSAGES = {  # name -> [(field, number, type, label, message type)]
    "ValueType": [("type", 1, _T.TYPE_INT64, 1, None), ("unit", 2, _T.TYPE_INT64, 1, None)],
    "Label": [("key", 1, _T.TYPE_INT64, 1, None), ("str", 2, _T.TYPE_INT64, 1, None),
              ("num", 3, _T.TYPE_INT64, 1, None), ("num_unit", 4, _T.TYPE_INT64, 1, None)],
    "Sample": [("location_id", 1, _T.TYPE_UINT64, 3, None), ("value", 2, _T.TYPE_INT64, 3, None),
               ("label", 3, _T.TYPE_MESSAGE, 3, "Label")],
    "Line": [("function_id", 1, _T.TYPE_UINT64, 1, None), ("line", 2, _T.TYPE_INT64, 1, None)],
    "Location": [("id", 1, _T.TYPE_UINT64, 1, None), ("mapping_id", 2, _T.TYPE_UINT64, 1, None),
                 ("address", 3, _T.TYPE_UINT64, 1, None), ("line", 4, _T.TYPE_MESSAGE, 3, "Line")],
    "Function": [("id", 1, _T.TYPE_UINT64, 1, None), ("name", 2, _T.TYPE_INT64, 1, None),
                 ("system_name", 3, _T.TYPE_INT64, 1, None), ("filename", 4, _T.TYPE_INT64, 1, None),
                 ("start_line", 5, _T.TYPE_INT64, 1, None)],
    "Profile": [("sample_type", 1, _T.TYPE_MESSAGE, 3, "ValueType"), ("sample", 2, _T.TYPE_MESSAGE, 3, "Sample"),
                ("location", 4, _T.TYPE_MESSAGE, 3, "Location"), ("function", 5, _T.TYPE_MESSAGE, 3, "Function"),
                ("string_table", 6, _T.TYPE_STRING, 3, None), ("time_nanos", 9, _T.TYPE_INT64, 1, None),
                ("duration_nanos", 10, _T.TYPE_INT64, 1, None), ("period_type", 11, _T.TYPE_MESSAGE, 1, "ValueType"),
                ("period", 12, _T.TYPE_INT64, 1, None)],
}


def _profile_class():
    f = descriptor_pb2.FileDescriptorProto(name="evlog_tests/pprof_profile.proto", package="perftools.profiles",
                                           syntax="proto3")
    for name, fields in _MESSAGES.items():
        m = f.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            fd = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                fd.type_name = f".perftools.profiles.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("perftools.profiles.Profile"))


Profile = _profile_class()


def parse(data: bytes):
    return Profile.FromString(data)


def samples(profile) -> list[tuple[list[str], list[int], dict]]:
    """[(function names leaf first, values, labels)] of a parsed Profile."""
    s = profile.string_table
    names = {fn.id: s[fn.name] for fn in profile.function}
    locs = {loc.id: [names[ln.function_id] for ln in loc.line] for loc in profile.location}
    out = []
    for sm in profile.sample:
        stack = [name for i in sm.location_id for name in locs[i]]
        labels = {s[lb.key]: (s[lb.str] if lb.str else lb.num) for lb in sm.label}
        out.append((stack, list(sm.value), labels))
    return out
