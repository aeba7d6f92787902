"""Keys and stored formats of the encrypted columns (journal, checkpoints, views, API keys).

Rules:

- A stored value is a Fernet token (`cryptography`: AES-128-CBC with an HMAC-SHA256 over the
  whole token) of the value's JSON text, zlib-compressed first and marked `z1:` when the column
  compresses and the text is large enough to gain from it. Nothing is ever pickled.
- The token is stored in binary after a one-byte mark, `BINARY_MARK` (0x01): a third smaller
  than the token's base64 text, which `Fernet.encrypt` returns and which values written before
  this form hold. The mark is needed because a binary token starts with 0x80, as a legacy value
  does. The first byte tells the form, and no two forms share one: 0x01 a binary token, 0x02 an
  empty value, 0x80 a legacy value, "g" a base64 token (the base64 of 0x80); anything else is
  unreadable. A value with a mark is read only as that form: a bad token after 0x01 is
  `UnreadableValue`, never tried as another form. Key rotation (`is_current` is false for a
  base64 token) rewrites base64 values in the binary form. A binary token is opened straight
  from its bytes as Fernet opens one (`_open_binary`); a base64 token by `cryptography`'s
  Fernet.
- An empty value (`""`, `{}`, `[]`: the default of many columns) is stored as `EMPTY_MARK`
  (0x02) followed by its JSON text, three bytes instead of a token of about a hundred, and
  anything else after that mark is unreadable. It is neither encrypted nor authenticated, which
  is safe: it holds no secret, and its ciphertext would show nearly as much (a token's length
  gives the JSON's length to 16 bytes, so an empty value's token already says "under 16
  bytes", and the column's type says which of the three). Someone who can write the database
  gains nothing by writing the mark: tokens are bound to no row or column, so they can already
  copy any row's encrypted empty value into another, or set a column to NULL. An empty value
  needs no key, so rotation leaves it as it is and dropping a key never makes it unreadable.
- Only the field keys encrypt and authenticate: `FIELD_ENCRYPTION_KEY` writes and reads,
  `FIELD_ENCRYPTION_KEY_FALLBACKS` only read. Each key is stretched into a Fernet key with HKDF,
  so any string of 32 or more characters is a key. `SECRET_KEY` plays no part: rotating it
  loses nothing once the legacy values are converted.
- Legacy values (written by django-cryptography before this module existed) are raw bytes
  starting with 0x80: an HMAC-SHA256 signed with `SECRET_KEY` over an AES-256-CBC ciphertext
  whose key is PBKDF2 of the field key, holding a pickle. They are still read, with `SECRET_KEY`
  or one of `SECRET_KEY_FALLBACKS`, through an unpickler that imports nothing, so that the
  pickle can only build dicts, lists, tuples, strings, numbers, booleans and None. Every value
  those columns ever held is of these types (text columns held str, JSON columns JSON objects).
  `manage.py convert_legacy_encryption` rewrites them in the Fernet format once, after which
  the legacy reader is never reached.
- A value read from either format is returned exactly as a JSON round trip would return it, so
  a converted value and a value read through the legacy path are equal.
- The journal's search index stores no text: each term is a 32-bit keyed BLAKE2b digest under a
  key derived (HKDF) from a field key and the session, so equal terms are equal only within one
  session and nobody without the field key can compute or confirm one. Each index row names the
  field key it was made with (`search_key_id`); a search tries every configured key, and key
  rotation rebuilds the rows of the old keys.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
import pickle
import zlib
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
from django.conf import settings

__all__ = [
    "BINARY_MARK",
    "COMPRESSED_MARK",
    "EMPTY_MARK",
    "LEGACY_VERSION",
    "UnreadableValue",
    "decrypt",
    "decrypt_sized",
    "decrypt_text",
    "encrypt",
    "is_current",
    "is_legacy",
    "keyring_id",
    "message_digest",
    "reencrypt",
    "search_keys",
    "term_digests",
]

# Marks compressed plaintext; JSON text never starts with "z".
COMPRESSED_MARK = b"z1:"
# Plaintext smaller than this is stored without compression: zlib would add more than it saves.
MIN_COMPRESSED_BYTES = 128
# The first byte of a django-cryptography value (and of a Fernet token in binary).
LEGACY_VERSION = 0x80
# The first byte of a Fernet token stored in binary (what follows starts with 0x80).
BINARY_MARK = b"\x01"
# The first byte of an empty value, followed by its JSON text (one of `_EMPTY_JSON`).
EMPTY_MARK = b"\x02"
_EMPTY_JSON = frozenset({b'""', b"{}", b"[]"})
_HKDF_INFO = b"agentloom encrypted columns v1"
_LEGACY_SALT = b"django-cryptography"
_LEGACY_ITERATIONS = 30_000
_LEGACY_HEADER = 9  # version byte and 64-bit timestamp
_LEGACY_MAC = 32  # HMAC-SHA256


class UnreadableValue(ValueError):
    """A stored value that no configured key opens, or that is not in a known format."""


# --- keys --------------------------------------------------------------------------------------


@lru_cache(maxsize=16)
def _derived_key(secret: str) -> bytes:
    """Return the 32-byte Fernet key stretched from a field key: HMAC key, then AES key."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(
        secret.encode()
    )


@lru_cache(maxsize=16)
def _fernet_for(secret: str) -> Fernet:
    return Fernet(base64.urlsafe_b64encode(_derived_key(secret)))


@lru_cache(maxsize=16)
def _opener_for(secret: str) -> tuple[bytes, algorithms.AES]:
    """Return what `_open_binary` needs of a field key: its HMAC key and its AES key."""
    derived = _derived_key(secret)
    return derived[:16], algorithms.AES(derived[16:])


def _field_keys() -> list[str]:
    return [settings.FIELD_ENCRYPTION_KEY, *settings.FIELD_ENCRYPTION_KEY_FALLBACKS]


@lru_cache(maxsize=4)
def _keyring(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([_fernet_for(key) for key in keys])


def _current() -> MultiFernet:
    return _keyring(tuple(_field_keys()))


def _primary() -> Fernet:
    return _fernet_for(settings.FIELD_ENCRYPTION_KEY)


@lru_cache(maxsize=4)
def _digest_of(keys: tuple[str, ...]) -> str:
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:32]


def keyring_id() -> str:
    """Return a digest of the configured field keys (the primary and its fallbacks, in order).

    A process that keeps decrypted values keys them with it, so that a value is served again
    only under the keys it was read with (a key taken out of the fallbacks reads nothing more).
    """
    return _digest_of(tuple(_field_keys()))


_SEARCH_INFO = b"agentloom journal search index v1"


@lru_cache(maxsize=16)
def _search_key_id(secret: str) -> int:
    # 31 bits, so the id fits a signed integer column on every database.
    return int.from_bytes(hashlib.sha256(b"search key id\0" + secret.encode()).digest()[:4]) >> 1


@lru_cache(maxsize=256)
def _session_search_key(secret: str, session_id: int) -> bytes:
    info = _SEARCH_INFO + b"\0" + str(session_id).encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret.encode())


def search_keys(session_id: int) -> list[tuple[int, bytes]]:
    """Return `(key id, key)` of the session's search index under each configured field key,
    the current key first: an index row made under a fallback key still matches."""
    return [(_search_key_id(key), _session_search_key(key, session_id)) for key in _field_keys()]


def term_digests(key: bytes, terms: list[str]) -> list[int]:
    """Return each term's keyed 32-bit digest as a signed integer (an index or a query)."""
    return [
        int.from_bytes(hashlib.blake2b(term.encode(), key=key, digest_size=4).digest(), signed=True)
        for term in terms
    ]


_ONCE_INFO = b"agentloom message stored once v1"


@lru_cache(maxsize=256)
def _session_once_key(secret: str, session_id: int) -> bytes:
    info = _ONCE_INFO + b"\0" + str(session_id).encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret.encode())


def message_digest(session_id: int, message: Any) -> str:
    """Return the keyed digest under which a session stores `message` once (`StoredMessage`).

    The same message gives the same digest in one session under the current field key, so it is
    stored once however many views and snapshots show it; without the key the digest tells
    nothing of the message, and two sessions' digests of one message differ. A new field key
    starts new digests: a message stored before is then stored again once (never misread).
    """
    data = json.dumps(message, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    key = _session_once_key(settings.FIELD_ENCRYPTION_KEY, session_id)
    digest = hashlib.blake2b(data.encode("utf-8", "surrogatepass"), key=key, digest_size=16)
    return digest.hexdigest()


# --- the format --------------------------------------------------------------------------------


def _to_json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "surrogatepass"
    )


def _from_json(data: bytes) -> Any:
    return json.loads(data.decode("utf-8", "surrogatepass"))


def encrypt(value: Any, *, compress: bool = False) -> bytes:
    """Return the stored form of `value` under the primary field key: an empty value's mark and
    JSON, else the binary Fernet token of its JSON after its mark."""
    data = _to_json(value)
    if data in _EMPTY_JSON:
        return EMPTY_MARK + data
    if compress and len(data) >= MIN_COMPRESSED_BYTES:
        data = COMPRESSED_MARK + zlib.compress(data, 6)
    return BINARY_MARK + base64.urlsafe_b64decode(_primary().encrypt(data))


def decrypt(token: bytes) -> Any:
    """Return the value stored as `token`, in any form, under any configured key."""
    token = bytes(token)
    if is_legacy(token):
        return legacy_decrypt(token)
    return _from_json(_plaintext(token))


def decrypt_sized(token: bytes) -> tuple[Any, int | None]:
    """Return `decrypt(token)` and the UTF-8 length of the value's compact JSON, which is the
    stored text's (None when not known: a legacy value, or text with a lone surrogate)."""
    token = bytes(token)
    if is_legacy(token):
        return legacy_decrypt(token), None
    data = _plaintext(token)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _from_json(data), None
    return json.loads(text), len(data)


def decrypt_text(token: bytes) -> bytes:
    """Return the compact JSON text of the value stored as `token`, UTF-8 encoded as `encrypt`
    wrote it (a lone surrogate as `surrogatepass` encodes it), without parsing it: for a reader
    that passes the value on as JSON. A legacy value is parsed and encoded the same way."""
    token = bytes(token)
    if is_legacy(token):
        return _to_json(legacy_decrypt(token))
    return _plaintext(token)


def _empty_json(token: bytes) -> bytes:
    """Return the JSON text an empty value's stored form holds."""
    data = token[len(EMPTY_MARK) :]
    if data not in _EMPTY_JSON:
        raise UnreadableValue("the mark of an empty value is followed by something else")
    return data


def _fernet_token(token: bytes) -> bytes:
    """Return a stored Fernet token (binary after its mark, or base64) as base64 text, which is
    what `Fernet` reads."""
    if token[:1] == BINARY_MARK:
        return base64.urlsafe_b64encode(token[len(BINARY_MARK) :])
    return token


# A Fernet token: version (0x80), timestamp (8 bytes), IV (16), AES-CBC blocks (16 each, at
# least one: the padding), HMAC-SHA256 of everything before it (32).
_FERNET_VERSION = 0x80
_FERNET_IV = slice(9, 25)
_FERNET_MAC = 32
_FERNET_SHORTEST = 9 + 16 + 16 + _FERNET_MAC


def _open_binary(token: bytes) -> bytes | None:
    """Return the plaintext of a binary Fernet token under the first field key whose HMAC
    matches, else None.

    This is `MultiFernet.decrypt` without a time limit (the columns set none) read straight
    from the bytes: the MAC is compared in constant time before anything is decrypted, as
    Fernet does, and padding is then checked as PKCS7. Fernet itself first encodes the token in
    base64 to decode it again and wraps each primitive in layers of its own: reading a journal
    record took 19.5 µs of CPU through it, 14.5 this way (zlib included).
    """
    if (
        len(token) < _FERNET_SHORTEST
        or (len(token) - _FERNET_SHORTEST) % 16
        or token[0] != _FERNET_VERSION
    ):
        return None
    body, mac = token[:-_FERNET_MAC], token[-_FERNET_MAC:]
    for secret in _field_keys():
        signing, aes = _opener_for(secret)
        if not hmac.compare_digest(hmac.digest(signing, body, "sha256"), mac):
            continue
        decryptor = Cipher(aes, modes.CBC(body[_FERNET_IV])).decryptor()
        padded = decryptor.update(body[_FERNET_IV.stop :]) + decryptor.finalize()
        pad = padded[-1]
        if not 1 <= pad <= 16 or padded[-pad:] != bytes([pad]) * pad:
            return None
        return padded[:-pad]
    return None


def _plaintext(token: bytes) -> bytes:
    """Return the JSON text of a stored value that is not legacy, decompressed."""
    if token[:1] == EMPTY_MARK:
        return _empty_json(token)
    if token[:1] == BINARY_MARK:
        data = _open_binary(token[len(BINARY_MARK) :])
    else:
        try:
            data = _current().decrypt(token)
        except InvalidToken:
            data = None
    if data is None:
        raise UnreadableValue("no field encryption key opens this value")
    if data.startswith(COMPRESSED_MARK):
        data = zlib.decompress(data[len(COMPRESSED_MARK) :])
    return data


def is_legacy(token: bytes) -> bool:
    """Return whether `token` was written by django-cryptography."""
    return bool(token) and token[0] == LEGACY_VERSION


def is_current(token: bytes) -> bool:
    """Return whether `token` is in the form `encrypt` writes: an empty value's mark and JSON,
    or a binary Fernet token under the primary key (checks the MAC only)."""
    token = bytes(token)
    if token[:1] == EMPTY_MARK:
        return token[len(EMPTY_MARK) :] in _EMPTY_JSON
    if token[:1] != BINARY_MARK:
        return False
    try:
        _primary().extract_timestamp(_fernet_token(token))
    except InvalidToken:
        return False
    return True


def reencrypt(token: bytes, *, compress: bool) -> bytes:
    """Return `token`'s value stored again under the primary key."""
    return encrypt(decrypt(token), compress=compress)


# --- the legacy format -------------------------------------------------------------------------


class _JsonOnlyUnpickler(pickle.Unpickler):
    """An unpickler that imports nothing: only the types pickle builds by itself come out."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"a stored value may not refer to {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("a stored value may not hold persistent references")


def _check_json_like(value: Any, depth: int = 0) -> None:
    if depth > 500:
        raise UnreadableValue("stored value is nested too deeply")
    if value is None or isinstance(value, str | bool | int | float):
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_json_like(item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not (key is None or isinstance(key, str | bool | int | float)):
                raise UnreadableValue("stored value has a key that JSON cannot hold")
            _check_json_like(item, depth + 1)
        return
    raise UnreadableValue(f"stored value holds a {type(value).__name__}, which JSON cannot")


def restricted_loads(data: bytes) -> Any:
    """Unpickle `data` admitting only JSON-like values; return them as JSON would."""
    try:
        value = _JsonOnlyUnpickler(io.BytesIO(data)).load()
    except UnreadableValue:
        raise
    except Exception as error:  # a refused global, a truncated or garbled pickle
        raise UnreadableValue(f"legacy value refused: {error}") from None
    _check_json_like(value)
    return _from_json(_to_json(value))


@lru_cache(maxsize=16)
def _legacy_aes_key(field_key: str) -> bytes:
    kdf = PBKDF2HMAC(
        algorithm=hashes.SHA256(), length=32, salt=_LEGACY_SALT, iterations=_LEGACY_ITERATIONS
    )
    return kdf.derive(field_key.encode())


def _legacy_signed_by(token: bytes) -> bool:
    body, mac = token[:-_LEGACY_MAC], token[-_LEGACY_MAC:]
    for secret in [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]:
        expected = hmac.new(secret.encode(), body, "sha256").digest()
        if hmac.compare_digest(mac, expected):
            return True
    return False


def _legacy_plaintext(token: bytes, aes_key: bytes) -> bytes | None:
    iv = token[_LEGACY_HEADER : _LEGACY_HEADER + 16]
    ciphertext = token[_LEGACY_HEADER + 16 : -_LEGACY_MAC]
    decryptor = Cipher(algorithms.AES(aes_key), modes.CBC(iv)).decryptor()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        padded = decryptor.update(ciphertext) + decryptor.finalize()
        return unpadder.update(padded) + unpadder.finalize()
    except ValueError:
        return None


def legacy_decrypt(token: bytes) -> Any:
    """Return the value of a django-cryptography token, refusing anything but JSON-like data.

    The MAC is checked with `SECRET_KEY` and its fallbacks; the AES key is derived from each
    field key in turn (CBC does not authenticate, so a wrong key shows as bad padding or a
    refused pickle and the next key is tried).
    """
    if len(token) < _LEGACY_HEADER + 16 + 16 + _LEGACY_MAC or (len(token) - 57) % 16:
        raise UnreadableValue("legacy value is truncated")
    if not _legacy_signed_by(token):
        raise UnreadableValue("legacy value is not signed by SECRET_KEY or its fallbacks")
    for field_key in _field_keys():
        data = _legacy_plaintext(token, _legacy_aes_key(field_key))
        if data is None:
            continue
        if data.startswith(COMPRESSED_MARK):
            try:
                data = zlib.decompress(data[len(COMPRESSED_MARK) :])
            except zlib.error:
                continue
        try:
            return restricted_loads(data)
        except UnreadableValue:
            if field_key == _field_keys()[-1]:
                raise
    raise UnreadableValue("no field encryption key opens this legacy value")
