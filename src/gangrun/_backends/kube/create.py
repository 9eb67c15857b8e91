"""Creating a ClusteredTask exactly once, however often the create is retried.

A create whose response is lost (a connection cut, a client timeout) may or may not have been stored,
and a caller that retries it (`submit` itself, a Flyte connector called again by Flyte, a script that
submits again) must not start a second gang. Every create therefore carries a client token in a label
(`CLIENT_TOKEN_LABEL`), set before the first try: the caller's own when the manifest names one
(the Flyte connector derives it from the task execution), else a fresh one per `submit` call.

Why the name is chosen here and not by the API server's `generateName`: after a lost response, a
lookup by the token cannot tell "not stored yet" (the request still in flight on the server) from
"never arrived", so a retry after an empty lookup could still make a second task. A name derived from
the token makes the API server itself decide: a retry either creates the task or gets 409 for the
name, and a task of that name that carries our token is the one the first try made. The name has the
shape `generateName` promises (the prefix and 5 characters of the API server's alphabet); a name taken
by another task (another token) moves on to the token's next candidate, in the same order on every try.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from gangrun._backends.kube.client import TASKS, KubeApi
from gangrun._backends.kube.crd import CLIENT_TOKEN_LABEL
from gangrun._core.spec import GENERATED_SUFFIX_LEN
from gangrun._errors import ApiError, Conflict, NotFound

__all__ = ["CREATE_TRIES", "create_once", "new_token", "token_name"]

CREATE_TRIES = 3  # tries of one name when the response is lost
CANDIDATES = 8  # names of one token to try when others are taken: 27^5 suffixes make a ninth unlikely
# The API server's own alphabet for generated names (no vowels, so no words; no 0, 1, 3: no look-alikes).
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def new_token() -> str:
    """A client token for one submit call that names none."""
    return uuid.uuid4().hex


def token_name(prefix: str, token: str, candidate: int = 0) -> str:
    """The `candidate`th name of `token` under a generateName `prefix`: the prefix and 5 characters."""
    digest = int.from_bytes(hashlib.sha256(f"{token}/{candidate}".encode()).digest()[:8], "big")
    suffix = ""
    for _ in range(GENERATED_SUFFIX_LEN):
        digest, i = divmod(digest, len(ALPHABET))
        suffix += ALPHABET[i]
    return prefix + suffix


def create_once(api: KubeApi, namespace: str, body: dict[str, Any], *, token: str | None = None,
                tries: int = CREATE_TRIES) -> dict[str, Any]:
    """Create the task `body` (its metadata names `name` or `generateName`) labelled with its client token
    (`token`, else the one its labels carry, else a new one), and return it: the one this call stored, or
    the one an earlier try with the same token stored.

    Raises Conflict when a task of that `name` exists with another token (or none); ApiError(0) when
    every try of a name got no response; other ApiErrors as the API server answered them.
    """
    meta = body.get("metadata") or {}
    token = token or (meta.get("labels") or {}).get(CLIENT_TOKEN_LABEL) or new_token()
    labels = {**(meta.get("labels") or {}), CLIENT_TOKEN_LABEL: token}
    prefix = "" if meta.get("name") else str(meta.get("generateName") or "")
    names = [token_name(prefix, token, i) for i in range(CANDIDATES)] if prefix else [str(meta.get("name"))]
    for name in names:
        doc = {**body, "metadata": {**meta, "name": name, "labels": labels}}
        found = _create_or_find(api, namespace, doc, token=token, tries=tries)
        if found is not None:
            return found
    raise Conflict(409, f"names {names[0]} and {len(names) - 1} more of prefix {prefix!r} are taken")


def _create_or_find(api: KubeApi, namespace: str, doc: dict[str, Any], *, token: str,
                    tries: int) -> dict[str, Any] | None:
    """The task stored under doc's name with our token, created now or before; None when the name is
    another task's and a generated name may move on."""
    name, generated = doc["metadata"]["name"], bool(doc["metadata"].get("generateName"))
    lost: ApiError | None = None
    for _ in range(tries):
        try:
            return api.create(TASKS, namespace, doc)
        except Conflict:
            try:
                existing = api.get(TASKS, namespace, name)
            except NotFound:  # deleted between the two calls: the name is free again
                continue
            if ((existing.get("metadata") or {}).get("labels") or {}).get(CLIENT_TOKEN_LABEL) == token:
                return existing  # an earlier try's, whose response was lost
            if generated:
                return None
            raise
        except ApiError as e:
            if e.status != 0:
                raise
            lost = e  # no response: the task may be stored; the next try finds out
    raise lost if lost is not None else ApiError(0, f"create {name}: the name was taken and freed {tries} times")
