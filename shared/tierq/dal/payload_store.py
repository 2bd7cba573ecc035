"""Where big payloads live (``tierq.logic.payloads``): one store interface, two stores.

- :class:`S3PayloadStore`: the deployment's payload bucket (template.yaml ``PayloadBucket``,
  SSE-KMS by the bucket's default encryption). Uploads and downloads are presigned URLs
  made with the function's own role, so a producer or a Worker needs no AWS credentials of
  its own: an upload URL signs ``Content-Length`` (S3 refuses a body of any other size), and
  lives ``TIERQ_PAYLOAD_URL_SECONDS``.
- :class:`LocalPayloadStore`: ``tierq dev``'s folder (``.local/payloads`` unless
  ``TIERQ_PAYLOAD_DIR`` says otherwise), one file per key. Its URLs point at the local
  gateway (``/_payloads/<key>``, where :func:`set_local_base_url` says it listens) and carry
  an expiry and an HMAC of the method, key, size and expiry made with a secret of the
  process; the gateway serves them once :meth:`LocalPayloadStore.check` accepts them.

:func:`payload_store` gives the process's store from the settings; None when the deployment
has none (a pointer is then refused).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, quote, unquote

from tierq.config import Settings, get_settings

LOCAL_BUCKET = "tierq-local"
LOCAL_ROUTE = "/_payloads/"
DELETE_BATCH = 1000  # keys per S3 DeleteObjects call (its limit)


@dataclass(frozen=True, slots=True)
class Transfer:
    """One presigned HTTP request: send ``method`` to ``url`` with ``headers`` (and, for an
    upload, exactly the payload's bytes as the body)."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)


class PayloadStore(Protocol):
    """What tierq needs of a payload store."""

    bucket: str

    def upload(self, key: str, size: int, seconds: int) -> Transfer:
        """A presigned upload of exactly ``size`` bytes to ``key``."""
        ...

    def download(self, key: str, seconds: int) -> Transfer:
        """A presigned download of ``key``."""
        ...

    def read(self, key: str) -> bytes:
        """The object's bytes (``KeyError`` when there is none)."""
        ...

    def write(self, key: str, data: bytes) -> None:
        ...

    def exists(self, key: str) -> bool:
        ...

    def delete(self, keys: Sequence[str]) -> list[str]:
        """Delete these objects (one that is already gone counts as deleted); the keys that
        could not be deleted."""
        ...


class S3PayloadStore:
    """The payload bucket, through boto3 (which the Lambda runtime ships)."""

    def __init__(self, bucket: str, region: str | None = None, client: Any = None) -> None:
        self.bucket = bucket
        if client is None:
            import boto3  # type: ignore[import-untyped]  # (Lambda ships it)
            from botocore.config import Config

            # virtual-hosted, regional URLs: what a presigned URL must name to be valid
            # from anywhere, signed with SigV4 (which SSE-KMS objects require)
            client = boto3.client("s3", region_name=region or None, config=Config(
                signature_version="s3v4", s3={"addressing_style": "virtual"},
                retries={"max_attempts": 3, "mode": "standard"}))
        self.client = client

    def upload(self, key: str, size: int, seconds: int) -> Transfer:
        url = self.client.generate_presigned_url(
            "put_object", Params={"Bucket": self.bucket, "Key": key, "ContentLength": size},
            ExpiresIn=seconds, HttpMethod="PUT")
        return Transfer("PUT", url, {"Content-Length": str(size)})

    def download(self, key: str, seconds: int) -> Transfer:
        url = self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=seconds)
        return Transfer("GET", url)

    def read(self, key: str) -> bytes:
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
        except self.client.exceptions.NoSuchKey:
            raise KeyError(key) from None
        data: bytes = answer["Body"].read()
        return data

    def write(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def delete(self, keys: Sequence[str]) -> list[str]:
        failed: list[str] = []
        for start in range(0, len(keys), DELETE_BATCH):
            batch = keys[start:start + DELETE_BATCH]
            answer = self.client.delete_objects(Bucket=self.bucket, Delete={
                "Objects": [{"Key": key} for key in batch], "Quiet": True})
            failed.extend(error["Key"] for error in answer.get("Errors", []))
        return failed


class LocalPayloadStore:
    """A folder standing in for the bucket (``tierq dev``); see the module's documentation.
    ``base_url`` gives the local gateway's URL when a URL is made (it is known only once
    the server listens)."""

    def __init__(self, root: Path, base_url: Callable[[], str],
                 secret: bytes | None = None) -> None:
        self.bucket = LOCAL_BUCKET
        self.root = root
        self.base_url = base_url
        self._secret = secret or secrets.token_bytes(32)
        self._lock = threading.Lock()

    def path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") for p in parts) or "\\" in key:
            raise KeyError(key)
        return self.root.joinpath(*parts)

    def _signature(self, method: str, key: str, size: int | None, expires: int) -> str:
        text = f"{method}\n{key}\n{'' if size is None else size}\n{expires}"
        return hmac.new(self._secret, text.encode(), hashlib.sha256).hexdigest()

    def _url(self, method: str, key: str, size: int | None, seconds: int) -> str:
        expires = int(time.time()) + seconds
        query = f"expires={expires}&signature={self._signature(method, key, size, expires)}"
        if size is not None:
            query += f"&size={size}"
        return f"{self.base_url().rstrip('/')}{LOCAL_ROUTE}{quote(key, safe='/')}?{query}"

    def upload(self, key: str, size: int, seconds: int) -> Transfer:
        return Transfer("PUT", self._url("PUT", key, size, seconds),
                        {"Content-Length": str(size)})

    def download(self, key: str, seconds: int) -> Transfer:
        return Transfer("GET", self._url("GET", key, None, seconds))

    def read(self, key: str) -> bytes:
        try:
            return self.path(key).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None

    def write(self, key: str, data: bytes) -> None:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.part")
        partial.write_bytes(data)
        os.replace(partial, target)  # readers see the whole object or none

    def exists(self, key: str) -> bool:
        try:
            return self.path(key).is_file()
        except KeyError:
            return False

    def delete(self, keys: Sequence[str]) -> list[str]:
        for key in keys:
            try:
                self.path(key).unlink(missing_ok=True)
            except KeyError:
                continue
        return []

    def check(self, method: str, raw_path: str, query: str,
              size: int | None) -> tuple[str, str | None]:
        """(key, None) when a request to the local route carries a valid signature for this
        method (and, for an upload, this body size); (key, why not) otherwise."""
        key = unquote(raw_path[len(LOCAL_ROUTE):])
        params = {name: values[-1] for name, values in parse_qs(query).items()}
        try:
            expires = int(params.get("expires", ""))
        except ValueError:
            return key, "the URL has no expiry"
        if expires < time.time():
            return key, "the URL has expired"
        signed_size = params.get("size")
        if method == "PUT" and signed_size != str(size):
            return key, f"the body is {size} bytes; the URL was signed for {signed_size}"
        expected = self._signature(method, key, int(signed_size) if signed_size else None,
                                   expires)
        if not hmac.compare_digest(expected, params.get("signature", "")):
            return key, "the signature does not match"
        return key, None


_lock = threading.Lock()
_store: PayloadStore | None = None
_made_for: tuple[str | None, str | None] | None = None
_override: list[PayloadStore | None] = []  # use_payload_store's, when given


_local_base = ["http://127.0.0.1:3000"]  # the local gateway's URL (`tierq dev`'s default)


def local_base_url() -> str:
    """The URL of the local gateway that serves the local store's URLs."""
    return _local_base[0]


def set_local_base_url(url: str) -> None:
    """Say where the local gateway listens (``tierq dev``, once its server is bound)."""
    _local_base[0] = url


def payload_store(settings: Settings | None = None) -> PayloadStore | None:
    """The process's payload store: the bucket (``TIERQ_PAYLOAD_BUCKET``), else the local
    folder (``TIERQ_PAYLOAD_DIR``); None when neither is set."""
    global _store, _made_for
    if _override:
        return _override[-1]
    settings = settings or get_settings()
    wanted = (settings.payload_bucket, settings.payload_dir)
    with _lock:
        if _made_for != wanted:
            store: PayloadStore | None = None
            if settings.payload_bucket:
                store = S3PayloadStore(settings.payload_bucket, settings.region or None)
            elif settings.payload_dir:
                store = LocalPayloadStore(Path(settings.payload_dir), local_base_url)
            _store, _made_for = store, wanted
        return _store


def use_payload_store(store: PayloadStore | None) -> None:
    """Make ``store`` the process's store whatever the settings say (tests); None: the
    settings' again."""
    with _lock:
        _override.clear()
        if store is not None:
            _override.append(store)
