"""Sealed values: what an encrypted job carries at rest (its arguments, result, metadata, error text and
traceback), encrypted and authenticated with AES-256-GCM under one of several versioned keys.

A ``Sealer`` holds the keys, each with a short id; the first one seals, every one of them opens, so a new key
can be put first while jobs sealed under the old one are still read (``manage.py queue_rekey`` then seals
them again under the new one). What it seals:

- a msgpack value (a payload, a result) becomes ``msgpack.ExtType(SEALED_EXT, blob)``, which the store
  keeps as it keeps any msgpack value;
- a text (error text, traceback, the user's metadata as JSON) becomes ``qm-sealed:1:<key id>:<base64url>``,
  for the stores' text and JSON fields.

``blob`` is ``FORMAT | len(kid) | kid | nonce (12 bytes) | ciphertext and tag``. The format byte, the key id
and what the value is (``"payload"``, ``"result"``, ...) are authenticated with it, so a sealed result
cannot be passed off as a payload and a key id cannot be changed. A blob that does not verify (tampered, or
sealed under a key no longer given) raises ``SealBroken``.

``cryptography`` (the ``[encryption]`` extra) is imported when the first key is used, never before.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgpack

from .errors import QueueError

__all__ = [
    "FORMAT",
    "METADATA_KEY",
    "SEALED_EXT",
    "TEXT_PREFIX",
    "KeyProblem",
    "SealBroken",
    "Sealer",
    "UnknownKey",
    "is_sealed",
    "is_sealed_text",
    "key_id_of",
    "parse_keys",
]

SEALED_EXT = 81  # the msgpack ext type code of a sealed value
FORMAT = 1  # the blob's first byte: this module's layout
TEXT_PREFIX = "qm-sealed:1:"
METADATA_KEY = "_sealed"  # in an encrypted job's metadata: its user keys as one sealed JSON text
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12
MAX_KID = 32
_KID = re.compile(r"[A-Za-z0-9_.-]{1,32}\Z")


class SealBroken(QueueError):
    """A sealed value does not open: it was changed since it was sealed, or it was sealed under a key that is
    no longer in ``QUEUE_MAX["ENCRYPTION_KEYS"]``. Nothing of it can be read: a job whose payload does not
    open is a dead letter with the error type ``Corrupted``. Put the key back (after the new one) if it was
    removed too early; run ``manage.py queue_rekey`` before removing a key."""


class UnknownKey(SealBroken):
    """A sealed value names a key id that is not among the keys given: its key was removed (or never given
    to this process). Add the key back to ``QUEUE_MAX["ENCRYPTION_KEYS"]``."""


class KeyProblem(ValueError):
    """A key or key id in ``QUEUE_MAX["ENCRYPTION_KEYS"]`` is not usable (a system check reports it)."""


def decode_key(text: Any) -> bytes:
    """A key as given in the settings: 32 bytes as base64 (standard or URL-safe, padded or not), or raw
    bytes of that length. ``KeyProblem`` otherwise."""
    if isinstance(text, (bytes, bytearray)) and len(text) == KEY_BYTES:
        return bytes(text)
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("ascii", "replace")
    if not isinstance(text, str):
        raise KeyProblem(f"a key must be a base64 str of {KEY_BYTES} bytes, not {type(text).__name__}")
    cleaned = text.strip().replace("-", "+").replace("_", "/")
    try:
        raw = base64.b64decode(cleaned + "=" * (-len(cleaned) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise KeyProblem("a key is not valid base64") from None
    if len(raw) != KEY_BYTES:
        raise KeyProblem(
            f"a key must be {KEY_BYTES} bytes (AES-256) once base64-decoded, not {len(raw)}: make one with "
            f'python -c "import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())"'
        )
    return raw


def default_kid(key: bytes) -> str:
    """The id of a key given without one: the first 8 hex digits of the SHA-256 of the key (it names the key,
    it gives nothing of it away)."""
    return hashlib.sha256(key).hexdigest()[:8]


def parse_keys(given: Any) -> list[tuple[str, bytes]]:
    """``QUEUE_MAX["ENCRYPTION_KEYS"]`` as (key id, key) pairs, the sealing key first: a list of base64 keys
    (each one's id is ``default_kid``'s) or a dict of key id -> base64 key (in order). ``KeyProblem`` when
    a key, an id, or the whole is not usable."""
    if isinstance(given, Mapping):
        pairs: Iterable[tuple[Any, Any]] = given.items()
    elif isinstance(given, (list, tuple)):
        pairs = [(None, key) for key in given]
    else:
        raise KeyProblem(
            f"ENCRYPTION_KEYS must be a list of keys or a dict of key id -> key, not a "
            f"{type(given).__name__}"  # never the value: a key given alone would be shown
        )
    out: list[tuple[str, bytes]] = []
    for index, (kid, text) in enumerate(pairs):
        try:
            key = decode_key(text)
        except KeyProblem as exc:
            where = f"key {kid!r}" if kid is not None else f"key [{index}]"
            raise KeyProblem(f"{where}: {exc}") from None
        if kid is None:
            kid = default_kid(key)
        if not isinstance(kid, str) or not _KID.match(kid):
            raise KeyProblem(f"key id {kid!r}: 1 to {MAX_KID} characters of A-Z a-z 0-9 _ . -")
        if any(kid == seen for seen, _key in out):
            raise KeyProblem(f"key id {kid!r} is given twice")
        out.append((kid, key))
    if not out:
        raise KeyProblem("ENCRYPTION_KEYS is empty: give at least one key")
    return out


def is_sealed(value: Any) -> bool:
    """Whether ``value`` (a decoded payload or result) is a sealed value."""
    return type(value) is msgpack.ExtType and value.code == SEALED_EXT


def is_sealed_text(text: Any) -> bool:
    """Whether ``text`` (a stored error, traceback or metadata field) is sealed text."""
    return type(text) is str and text.startswith(TEXT_PREFIX)


def key_id_of(sealed: Any) -> str | None:
    """The id of the key a sealed value or text was sealed under; None if it is not sealed (or malformed)."""
    if is_sealed(sealed):
        data = sealed.data
        return data[2 : 2 + data[1]].decode("ascii", "replace") if len(data) > 2 else None
    if is_sealed_text(sealed):
        kid, sep, _rest = sealed[len(TEXT_PREFIX) :].partition(":")
        return kid if sep else None
    return None


class Sealer:
    """Seals with the first of ``keys`` ((key id, 32-byte key) pairs, ``parse_keys``'), opens with any."""

    __slots__ = ("_ciphers", "_keys", "kid")

    def __init__(self, keys: Iterable[tuple[str, bytes]]) -> None:
        self._keys = dict(keys)
        if not self._keys:
            raise KeyProblem("a Sealer needs at least one key")
        for kid, key in self._keys.items():
            if not _KID.match(kid) or len(key) != KEY_BYTES:
                raise KeyProblem(f"key {kid!r}: an id of A-Z a-z 0-9 _ . - and {KEY_BYTES} bytes")
        self.kid: str = next(iter(self._keys))  # the sealing key's id
        self._ciphers: dict[str, Any] = {}

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    def _cipher(self, kid: str) -> Any:
        cipher = self._ciphers.get(kid)
        if cipher is None:
            key = self._keys.get(kid)
            if key is None:
                raise UnknownKey(
                    f"sealed under key {kid!r}, which is not in QUEUE_MAX['ENCRYPTION_KEYS'] (it has "
                    f"{', '.join(map(repr, self._keys))}): add that key back"
                )
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            cipher = self._ciphers[kid] = AESGCM(key)
        return cipher

    # ------------------------------------------------------------------ bytes

    def seal(self, data: bytes, what: str) -> bytes:
        """``data`` sealed under the first key; ``what`` (``"payload"``, ``"result"``...) is authenticated."""
        kid = self.kid.encode()
        head = bytes((FORMAT, len(kid))) + kid
        nonce = os.urandom(NONCE_BYTES)
        sealed: bytes = self._cipher(self.kid).encrypt(nonce, data, head + what.encode())
        return head + nonce + sealed

    def open(self, blob: bytes, what: str) -> bytes:
        """The data ``seal(data, what)`` sealed; ``SealBroken`` (``UnknownKey``) if it does not verify."""
        if len(blob) < 2 or blob[0] != FORMAT or len(blob) < 2 + blob[1] + NONCE_BYTES + 16:
            raise SealBroken(f"the sealed {what} is malformed ({len(blob)} bytes)")
        end = 2 + blob[1]
        kid = blob[2:end].decode("ascii", "replace")
        cipher = self._cipher(kid)
        from cryptography.exceptions import InvalidTag

        try:
            data: bytes = cipher.decrypt(blob[end : end + NONCE_BYTES], blob[end + NONCE_BYTES :],
                                         blob[:end] + what.encode())  # fmt: skip
        except InvalidTag:
            raise SealBroken(
                f"the sealed {what} does not verify under key {kid!r}: it was changed since it was sealed"
            ) from None
        return data

    # ------------------------------------------------------------------ msgpack values

    def seal_value(self, data: bytes, what: str) -> msgpack.ExtType:
        """Packed msgpack ``data`` (``codec.pack_value``'s) as a sealed value, stored as an ext type."""
        return msgpack.ExtType(SEALED_EXT, self.seal(data, what))

    def open_value(self, sealed: msgpack.ExtType, what: str) -> Any:
        """The value of a sealed one (``seal_value``'s); ``SealBroken`` if it does not open."""
        data = self.open(sealed.data, what)
        try:
            return msgpack.unpackb(data, raw=False, strict_map_key=False, timestamp=0)
        except Exception as exc:  # verified, so written by us: only a bug could get here
            raise SealBroken(f"the sealed {what} opens but does not decode ({exc!r})") from exc

    # ------------------------------------------------------------------ text

    def seal_text(self, text: str, what: str) -> str:
        """``text`` as ``qm-sealed:1:<key id>:<base64url>``."""
        blob = self.seal(text.encode("utf-8", "surrogatepass"), what)
        end = 2 + blob[1]
        return f"{TEXT_PREFIX}{self.kid}:{base64.urlsafe_b64encode(blob[end:]).decode()}"

    def open_text(self, sealed: str, what: str) -> str:
        """The text of ``seal_text``'s; ``SealBroken`` if it does not open."""
        kid, sep, body = sealed[len(TEXT_PREFIX) :].partition(":")
        if not sealed.startswith(TEXT_PREFIX) or not sep or not _KID.match(kid):
            raise SealBroken(f"the sealed {what} is malformed")
        try:
            rest = base64.urlsafe_b64decode(body.encode())
        except (binascii.Error, ValueError):
            raise SealBroken(f"the sealed {what} is malformed (bad base64)") from None
        kid_bytes = kid.encode()
        return self.open(bytes((FORMAT, len(kid_bytes))) + kid_bytes + rest, what).decode(
            "utf-8", "surrogatepass"
        )

    # ------------------------------------------------------------------ either

    def reseal(self, sealed: Any, what: str) -> Any:
        """A sealed value or text sealed again under the first key (as it is if it already is, or if it is
        not sealed at all). ``SealBroken`` if it does not open."""
        if key_id_of(sealed) in (None, self.kid) and (is_sealed(sealed) or is_sealed_text(sealed)):
            return sealed
        if is_sealed(sealed):
            return msgpack.ExtType(SEALED_EXT, self.seal(self.open(sealed.data, what), what))
        if is_sealed_text(sealed):
            return self.seal_text(self.open_text(sealed, what), what)
        return sealed
