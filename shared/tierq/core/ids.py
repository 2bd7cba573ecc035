"""Time-ordered task ids (UUIDv7, RFC 9562) and lease tokens."""

from __future__ import annotations

import os
import secrets
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def uuid7(now_ms: int | None = None) -> uuid.UUID:
    """A UUIDv7: 48-bit unix ms, then a 12-bit counter that keeps ids from one process
    strictly increasing within a millisecond, then 61 random bits after a clear
    ``BATCH_MARK`` (``tierq.core.batch_ids``)."""
    global _last_ms, _counter
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    with _lock:
        if ms <= _last_ms:
            ms = _last_ms
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                ms += 1
                _counter = 0
        else:
            _counter = int.from_bytes(os.urandom(2), "big") & 0x3FF  # leave room to count up
        _last_ms = ms
        counter = _counter
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 61) - 1)  # (the mark's bit clear)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= rand
    return uuid.UUID(int=value)


def uuid7_strings(n: int, now_ms: int | None = None) -> list[str]:
    """``n`` UUIDv7s as strings, for bulk writers: the layout of ``uuid7`` and its
    per-process order (each id greater than the one before), a few times as fast. The
    random half's variant bits are set on all its bytes at once (``bytes.translate``), and
    the text before the counter is formatted once per millisecond."""
    global _last_ms, _counter
    if n <= 0:
        return []
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    with _lock:
        if ms <= _last_ms:
            ms, first = _last_ms, _counter + 1
        else:
            first = int.from_bytes(os.urandom(2), "big") & 0x3FF
        last = first + n - 1  # the counter carries into the next milliseconds
        _last_ms, _counter = ms + (last >> 12), last & 0xFFF
    raw = bytearray(os.urandom(8 * n))  # 8 random bytes per id
    raw[0::8] = raw[0::8].translate(_VARIANT_BYTE)  # (each id's first: variant 0b10)
    rand = raw.hex()  # 16 hex digits per id
    out: list[str] = []
    c, end = first, first + n
    while c < end:  # the ids of one millisecond at a time
        id_ms = (ms + (c >> 12)) & _MS_MASK
        ms_hex = f"{id_ms:012x}"
        head = f"{ms_hex[:8]}-{ms_hex[8:]}-7"  # then the version and the 12-bit counter
        stop = min(end, (c | 0xFFF) + 1)
        at = 16 * (c - first)
        for k in range(c, stop):
            out.append(f"{head}{_COUNTER_HEX[k & 0xFFF]}-{rand[at:at + 4]}-{rand[at + 4:at + 16]}")
            at += 16
        c = stop
    return out


_MS_MASK = (1 << 48) - 1
# a random byte with its top two bits set to the variant 0b10 and the next, a batch
# member's mark (tierq.core.batch_ids), clear
_VARIANT_BYTE = bytes(0x80 | (b & 0x1F) for b in range(256))
# each 12-bit counter as 3 hex digits, by index: concatenated, not formatted (a tenth of the
# instructions of 4,096 f-strings, at every cold start)
_HEX_DIGITS = "0123456789abcdef"
_COUNTER_HEX = [a + b + c for a in _HEX_DIGITS for b in _HEX_DIGITS for c in _HEX_DIGITS]


def reseed() -> None:
    """Forget the last id's millisecond and counter: the next id starts a fresh random
    counter. For a process resumed from a snapshot (Lambda SnapStart), where every copy
    would otherwise continue from the same counter."""
    global _last_ms, _counter
    with _lock:
        _last_ms, _counter = 0, 0


def new_token_prefix(tenant: str) -> str:
    """A claim's lease-token prefix. Tokens carry their tenant and the attempt they lease
    (``<tenant>~<random>~<attempt>~<n>``) so acks, nacks and heartbeats find the right
    (queue, tenant) and attempt without a lookup (a token is only accepted for the task it
    was issued for: see lua/claim.lua)."""
    return f"{tenant}~{secrets.token_hex(12)}~"


def attempt_of_token(token: str) -> int | None:
    """The attempt a lease token was issued for, or None when the token is malformed."""
    parts = token.rsplit("~", 3)
    if len(parts) != 4 or not (parts[2].isascii() and parts[2].isdigit()):
        return None
    return int(parts[2])


def tenant_of_token(token: str) -> str | None:
    """The tenant a lease token was issued for, or None when the token is malformed."""
    tenant, sep, rest = token.partition("~")
    if not sep or not tenant or "~" not in rest:
        return None
    return tenant
