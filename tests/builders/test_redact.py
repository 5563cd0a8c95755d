"""evlog/builders/redact.py: secrets in console text and metadata -> ``[REDACTED]``, no process.

tests/test_console_parse.py checks the built-in patterns on single lines; here: what stays around a
secret (the key, the quotes, the scheme), the user's patterns, metadata objects (secret-named keys,
nesting, depth), the private key markers the line parser uses, and that a planted secret never survives.
"""
from __future__ import annotations

import string

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from evlog.builders.redact import KEY_BEGIN, KEY_END, MASK, Redactor

R = Redactor()


def test_the_key_the_quotes_and_the_scheme_stay_and_the_secret_goes():
    assert R('{"api_key": "abc123", "user": "bob"}') == f'{{"api_key": "{MASK}", "user": "bob"}}'
    assert R("export GITHUB_TOKEN='t0ps3cret'") == f"export GITHUB_TOKEN='{MASK}'"
    assert R("curl -H 'Authorization: Basic dXNlcjpwdw=='") == f"curl -H 'Authorization: Basic {MASK}'"
    assert R("session_id=abc&page=2") == f"session_id={MASK}&page=2"
    assert R("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4") == f"jwt {MASK}"


def test_names_that_only_contain_a_secret_word_are_not_secrets():
    for text in ("tokens=5 token_count=7", "keyboard: us", "passes=3", "author: ann", "max_tokens: 512"):
        assert R(text) == text


def test_the_users_patterns_replace_their_whole_match_even_where_no_built_in_applies():
    r = Redactor([r"employee-\d+", r"(?i)project\s+\w+"])
    assert r("employee-42 joined Project Apollo") == f"{MASK} joined {MASK}"
    assert r("password=x employee-1") == f"password={MASK} {MASK}"
    assert Redactor()("employee-42") == "employee-42"


def test_a_private_key_block_on_one_line_goes_whole_and_its_markers_are_found():
    line = "key: -----BEGIN OPENSSH PRIVATE KEY-----b3BlbnNzaC1rZXk=-----END OPENSSH PRIVATE KEY----- done"
    assert R(line) == f"key: {MASK} done"
    assert KEY_BEGIN.search("-----BEGIN RSA PRIVATE KEY-----") and KEY_END.search("-----END EC PRIVATE KEY-----")
    assert not KEY_BEGIN.search("-----BEGIN PUBLIC KEY-----")


def test_metadata_keeps_its_shape_and_loses_the_values_of_secret_named_keys():
    meta = {"epoch": 3, "db": {"password": 1234, "host": "db.local", "token": None},
            "urls": ["https://bob:pw@host/x", 7], "note": "ok", "Secret_Key": ["a", "b"]}
    assert R.value(meta) == {"epoch": 3, "db": {"password": MASK, "host": "db.local", "token": None},
                             "urls": [f"https://{MASK}@host/x", 7], "note": "ok", "Secret_Key": MASK}
    assert R.value({"password=hunter2": 1}) == {f"password={MASK}": 1}  # keys are text too
    assert R.value(True) is True and R.value(None) is None and R.value(2.5) == 2.5


def test_metadata_nested_deeper_than_the_limit_is_masked_not_walked_forever():
    deep: dict = {"leaf": "password=x"}
    for _ in range(100):
        deep = {"d": deep}
    out = R.value(deep)
    depth = 0
    while isinstance(out, dict):
        out, depth = out["d"], depth + 1
    assert out == MASK and depth == 33


_TEXT = st.text(alphabet=string.printable.replace("\n", ""), max_size=40)
_SECRET = st.text(alphabet=string.ascii_letters + string.digits, min_size=12, max_size=30)


@settings(max_examples=300, deadline=None)
@given(before=_TEXT, after=_TEXT, secret=_SECRET,
       form=st.sampled_from(["password={}", "api_key: {}", 'token="{}"', "Authorization: Bearer {}",
                             "https://user:{}@example.com/"]))
def test_a_secret_planted_in_any_text_never_survives(before, after, secret, form):
    assume(secret not in before + after)
    assert secret not in R(f"{before} {form.format(secret)} {after}")
