"""Who made a request, as kube-apiserver's user.Info describes it, and the names it uses."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
MASTERS = "system:masters"
ANONYMOUS = "system:anonymous"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"
# Set by kube-apiserver on tokens bound to a pod: the node that pod runs on.
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


class Extra(Mapping[str, tuple[str, ...]]):
    """A user's extra attributes, immutable and hashable so a UserInfo can key a cache."""

    __slots__ = ("_hash", "_items")

    def __init__(self, source: Mapping[str, Iterable[str] | str] | None = None) -> None:
        self._items: dict[str, tuple[str, ...]] = {
            key: (values,) if isinstance(values, str) else tuple(values)
            for key, values in sorted((source or {}).items())}
        self._hash = hash(tuple(self._items.items()))

    def __getitem__(self, key: str) -> tuple[str, ...]:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Extra({self._items!r})"


@dataclass(frozen=True, slots=True, kw_only=True)
class UserInfo:
    """Who is calling, as the authenticator saw it (user.Info upstream)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=Extra)

    def __post_init__(self) -> None:
        # Accept lists and plain dicts from callers, store immutable forms so instances hash.
        object.__setattr__(self, "groups", tuple(self.groups))
        if not isinstance(self.extra, Extra):
            object.__setattr__(self, "extra", Extra(self.extra))

    @property
    def service_account(self) -> tuple[str, str] | None:
        """(namespace, name) when this is a ServiceAccount's username, else None."""
        return split_service_account(self.username)

    @property
    def node_name(self) -> str | None:
        """The node of the pod the user's token is bound to, when it is bound to exactly one."""
        values = self.extra.get(NODE_NAME_EXTRA, ())
        return values[0] if len(values) == 1 and values[0] else None

    def to_json(self) -> dict[str, Any]:
        """The UserInfo of TokenReview and SelfSubjectReview statuses (empty fields omitted)."""
        body: dict[str, Any] = {"username": self.username}
        if self.uid:
            body["uid"] = self.uid
        if self.groups:
            body["groups"] = list(self.groups)
        if self.extra:
            body["extra"] = {key: list(values) for key, values in self.extra.items()}
        return body


def service_account_username(namespace: str, name: str) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


def service_account_groups(namespace: str) -> tuple[str, str]:
    return SERVICE_ACCOUNTS_GROUP, f"{SERVICE_ACCOUNTS_GROUP}:{namespace}"


def split_service_account(username: str) -> tuple[str, str] | None:
    if not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return None
    parts = username[len(SERVICE_ACCOUNT_PREFIX):].split(":")
    if len(parts) != 2 or not all(parts):
        return None
    return parts[0], parts[1]
