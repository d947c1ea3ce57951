"""engine/sealing.py: sealed values and texts open under any given key, never once changed, never without
their key; the first key seals (rotation)."""

from __future__ import annotations

import base64
import os

import msgpack
import pytest

from queue_max_django.engine import codec
from queue_max_django.engine.sealing import (
    SEALED_EXT,
    KeyProblem,
    SealBroken,
    Sealer,
    UnknownKey,
    default_kid,
    is_sealed,
    is_sealed_text,
    key_id_of,
    parse_keys,
)

pytest.importorskip("cryptography")

KEY_A = bytes(range(32))
KEY_B = bytes(range(32, 64))


def _b64(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


def test_value_round_trip_and_is_not_clear() -> None:
    sealer = Sealer([("a", KEY_A)])
    value = {"args": ["secret-4242", 1], "kwargs": {"to": "x@example.com"}}
    sealed = sealer.seal_value(codec.pack_value(value, what="payload", limit=1 << 20), "payload")
    assert is_sealed(sealed) and sealed.code == SEALED_EXT
    stored = msgpack.packb(sealed)  # what a store keeps
    assert b"secret-4242" not in stored and b"example.com" not in stored
    back = codec.unpack_value(stored)
    assert is_sealed(back) and key_id_of(back) == "a"
    assert sealer.open_value(back, "payload") == value


def test_text_round_trip() -> None:
    sealer = Sealer([("a", KEY_A)])
    text = sealer.seal_text("ValueError: secret-4242 \udce9", "error")
    assert is_sealed_text(text) and text.startswith("qm-sealed:1:a:") and "secret" not in text
    assert key_id_of(text) == "a"
    assert sealer.open_text(text, "error") == "ValueError: secret-4242 \udce9"


def test_each_seal_has_its_own_nonce() -> None:
    sealer = Sealer([("a", KEY_A)])
    assert sealer.seal(b"same", "payload") != sealer.seal(b"same", "payload")


@pytest.mark.parametrize("position", [-1, -20, 20])
def test_tampered_value_raises(position: int) -> None:
    sealer = Sealer([("a", KEY_A)])
    blob = bytearray(sealer.seal(b"secret", "payload"))
    blob[position] ^= 1
    with pytest.raises(SealBroken):
        sealer.open(bytes(blob), "payload")


def test_tampered_text_raises() -> None:
    sealer = Sealer([("a", KEY_A)])
    text = sealer.seal_text("secret", "traceback")
    body = text[-10:]
    changed = text[:-10] + ("A" if body[0] != "A" else "B") + body[1:]
    with pytest.raises(SealBroken):
        sealer.open_text(changed, "traceback")


def test_what_is_authenticated() -> None:
    sealer = Sealer([("a", KEY_A)])
    blob = sealer.seal(b"a result", "result")
    with pytest.raises(SealBroken):
        sealer.open(blob, "payload")


def test_key_id_is_authenticated() -> None:
    sealer = Sealer([("a", KEY_A), ("b", KEY_A)])  # same key under two ids: only the id differs
    blob = sealer.seal(b"x", "payload")
    swapped = blob[:2] + b"b" + blob[3:]
    with pytest.raises(SealBroken):
        sealer.open(swapped, "payload")


def test_unknown_key_id_raises() -> None:
    sealed = Sealer([("old", KEY_A)]).seal_text("secret", "error")
    with pytest.raises(UnknownKey, match="'old'"):
        Sealer([("new", KEY_B)]).open_text(sealed, "error")
    blob = Sealer([("old", KEY_A)]).seal(b"secret", "payload")
    with pytest.raises(UnknownKey):
        Sealer([("new", KEY_B)]).open(blob, "payload")


def test_wrong_key_under_same_id_raises() -> None:
    blob = Sealer([("k", KEY_A)]).seal(b"secret", "payload")
    with pytest.raises(SealBroken, match="does not verify"):
        Sealer([("k", KEY_B)]).open(blob, "payload")


def test_rotation_first_key_seals_all_open() -> None:
    old = Sealer([("k1", KEY_A)])
    sealed_old = old.seal_value(codec.pack_value([1, "x"], what="payload", limit=100), "payload")
    rotated = Sealer([("k2", KEY_B), ("k1", KEY_A)])
    assert rotated.kid == "k2"
    assert rotated.open_value(sealed_old, "payload") == [1, "x"]
    new = rotated.reseal(sealed_old, "payload")
    assert key_id_of(new) == "k2" and rotated.open_value(new, "payload") == [1, "x"]
    assert rotated.reseal(new, "payload") is new  # already under the newest key
    text = old.seal_text("tb", "traceback")
    assert key_id_of(rotated.reseal(text, "traceback")) == "k2"
    with pytest.raises(UnknownKey):
        old.open_value(new, "payload")  # a process without the new key cannot read it


def test_parse_keys_list_and_dict() -> None:
    assert parse_keys([_b64(KEY_A), base64.b64encode(KEY_B).decode().rstrip("=")]) == [
        (default_kid(KEY_A), KEY_A),
        (default_kid(KEY_B), KEY_B),
    ]
    assert parse_keys({"2026-12": _b64(KEY_B), "2026-01": _b64(KEY_A)}) == [
        ("2026-12", KEY_B),
        ("2026-01", KEY_A),
    ]


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ([], "empty"),
        ("abc", "must be a list"),
        (["not base64!"], r"key \[0\]: a key is not valid base64"),
        ([_b64(os.urandom(16))], "must be 32 bytes"),
        ({"bad id!": _b64(KEY_A)}, "key id 'bad id!'"),
        ({"a": _b64(KEY_A), "b": 7}, "key 'b': a key must be a base64 str"),
    ],
)
def test_parse_keys_refuses(given: object, match: str) -> None:
    with pytest.raises(KeyProblem, match=match):
        parse_keys(given)


def test_a_key_given_alone_is_not_shown_in_the_error() -> None:
    key = _b64(KEY_A)
    with pytest.raises(KeyProblem, match="not a str") as refused:
        parse_keys(key)  # a key where a list of them belongs: the message must not carry it
    assert key[:8] not in str(refused.value)
