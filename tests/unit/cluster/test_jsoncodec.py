"""jsoncodec (orjson) keeps the standard library's answers where they matter: keys, big integers, the
report's layout and its encoding."""

from __future__ import annotations

import io
import json

import pytest

from gitops_sync import jsoncodec
from gitops_sync.plan.changeset import ChangeSet
from gitops_sync.report import write


def test_same_document_as_the_standard_library() -> None:
    doc = {"a": [1, 2.5, None, True], "b": {"c": "é"}, 3: "int key"}
    assert json.loads(jsoncodec.dumps(doc)) == json.loads(json.dumps(doc))
    assert json.loads(jsoncodec.dumps(doc, indent=True)) == json.loads(json.dumps(doc))
    assert jsoncodec.dumps({"a": [1]}, indent=True).decode() == json.dumps({"a": [1]}, indent=2)


def test_integers_beyond_64_bits_fall_back_to_the_standard_library() -> None:
    assert jsoncodec.dumps({"n": 2**70}) == b'{"n": 1180591620717411303424}'


def test_loads_rejects_what_is_not_json() -> None:
    with pytest.raises(ValueError):
        jsoncodec.loads(b"<html>")


def test_report_in_utf8_and_on_an_ascii_stream() -> None:
    cs = ChangeSet(revision="r", source="é")
    out = io.StringIO()
    write(cs, "json", out)
    assert json.loads(out.getvalue())["source"] == "é" and "é" in out.getvalue()
    raw = io.BytesIO()
    ascii_out = io.TextIOWrapper(raw, encoding="ascii")
    write(cs, "json", ascii_out)
    ascii_out.flush()
    assert json.loads(raw.getvalue())["source"] == "é"  # \u00e9 escapes: no UnicodeEncodeError


def test_intern_strings_shares_short_values_of_documents_decoded_apart_and_changes_nothing_else() -> None:
    long = "x" * 65
    raw = b'{"a":"Apply","b":["TCP",{"c":"TCP","d":1,"e":null}],"f":"%s","g":{}}' % long.encode()
    one, two = jsoncodec.loads(raw), jsoncodec.loads(raw)
    assert one["a"] is not two["a"], "each decode has its own strings"
    jsoncodec.intern_strings(one)
    jsoncodec.intern_strings(two)
    assert one == two == jsoncodec.loads(raw)
    assert one["a"] is two["a"] and one["b"][0] is two["b"][0] and one["b"][1]["c"] is two["b"][1]["c"]
    assert one["f"] is not two["f"], "longer strings (data, messages) are left alone"


def test_sort_keys_spells_equal_documents_alike_whatever_their_key_order_big_integers_too() -> None:
    # what the daemon's digests of a desired state and fingerprints of a live object hash
    one = {"b": 1, "a": {"y": [1, {"q": 2, "p": 3}], "x": None}}
    two = {"a": {"x": None, "y": [1, {"p": 3, "q": 2}]}, "b": 1}
    assert (
        jsoncodec.dumps(one, sort_keys=True)
        == jsoncodec.dumps(two, sort_keys=True)
        == (b'{"a":{"x":null,"y":[1,{"p":3,"q":2}]},"b":1}')
    )
    assert jsoncodec.dumps(one) != jsoncodec.dumps(two)
    big = {"b": 2**70, "a": 1}  # beyond orjson's 64 bits: the json fallback sorts as well
    assert jsoncodec.dumps(big, sort_keys=True) == b'{"a": 1, "b": 1180591620717411303424}'
