"""Which objects this operator instance works on when several instances split them (shards).
Pure: parses settings and answers questions about an object's labels and finalizers.

A shard is a name and a label selector over the objects' own labels (EtcdCluster, EtcdBackup,
EtcdRestore). The name gives each shard its own Lease and its own finalizer; the finalizer is
also the shard's claim on an object.

Invariants:
- An unnamed instance (the default) keeps the Lease `etcd-operator-leader` and the finalizer
  `etcd.operator.dev/finalizer`, and selects every object: unsharded installs do not change.
- A selector needs a name, so two shards never share a Lease or a finalizer (kopf removes a
  finalizer of its own name from every object no handler of its matches: with a shared name,
  each shard would strip the other's).
- An object is worked on only while it matches the selector AND carries no finalizer of
  another instance of this operator. The first shard to set its finalizer owns the object.
- A cluster that leaves its shard's selector stops being worked on at once, but its shard
  keeps holding it (its finalizer, so a deletion still applies reclaimPolicy) until another
  shard whose selector it matches asks for it (HANDOVER_ANNOTATION); only then does the old
  shard remove its finalizer, and only after that does the new shard take it. A cluster
  relabelled to no shard is never left without an owner.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from etcd_operator import API_GROUP

LEASE_NAME = "etcd-operator-leader"
FINALIZER = f"{API_GROUP}/finalizer"
# Set by a shard that wants a cluster another instance still holds: the shard's name.
HANDOVER_ANNOTATION = f"{API_GROUP}/shard-handover-to"
# A shard name goes into a Lease name and a finalizer, each at most 63 characters.
MAX_SHARD_NAME = 40

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SHARD_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class InvalidShardSetting(ValueError):
    """SHARD_NAME or SHARD_SELECTOR cannot be used; the message says why."""


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One term of a selector. `operator` is one of =, !=, in, notin, exists, !exists."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator in ("=", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):  # as in Kubernetes: an absent key matches
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        return not present  # !exists

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!exists":
            return f"!{self.key}"
        if self.operator in ("in", "notin"):
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        return f"{self.key}{self.operator}{self.values[0]}"


@dataclasses.dataclass(frozen=True)
class LabelSelector:
    """A Kubernetes label selector; every requirement must hold. Empty selects everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __bool__(self) -> bool:
        return bool(self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def parse_selector(text: str) -> LabelSelector:
    """Parses the string form kubectl takes with `-l`: `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
    `a notin (x,y)`, `a`, `!a`, joined by commas. Raises InvalidShardSetting."""
    requirements = []
    for term in _split_terms(text):
        requirements.append(_parse_term(term))
    return LabelSelector(tuple(requirements))


def _split_terms(text: str) -> list[str]:
    """Splits on the commas outside parentheses; an empty selector has no terms."""
    terms, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
            if depth > 1:
                raise InvalidShardSetting(f"selector {text!r}: nested parentheses")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise InvalidShardSetting(f"selector {text!r}: ')' without '('")
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise InvalidShardSetting(f"selector {text!r}: '(' without ')'")
    terms.append(current)
    stripped = [t.strip() for t in terms]
    if stripped == [""]:
        return []
    if "" in stripped:
        raise InvalidShardSetting(f"selector {text!r}: an empty term between commas")
    return stripped


_SET_TERM = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQUALITY_TERM = re.compile(r"^(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>\S*)$")


def _parse_term(term: str) -> Requirement:
    match = _SET_TERM.match(term)
    if match:
        values = tuple(v.strip() for v in match["values"].split(","))
        if values == ("",):
            raise InvalidShardSetting(f"selector term {term!r}: an empty set of values")
        for value in values:
            _check_value(value, term)
        return Requirement(_check_key(match["key"], term), match["op"], tuple(sorted(set(values))))
    match = _EQUALITY_TERM.match(term)
    if match:
        _check_value(match["value"], term)
        operator = "=" if match["op"] == "==" else match["op"]
        return Requirement(_check_key(match["key"], term), operator, (match["value"],))
    if term.startswith("!"):
        return Requirement(_check_key(term[1:].strip(), term), "!exists")
    if re.search(r"[\s=!<>(),]", term):
        raise InvalidShardSetting(
            f"selector term {term!r}: expected key, !key, key=value, key!=value, key in (v1,v2) or key notin (v1,v2)"
        )
    return Requirement(_check_key(term, term), "exists")


def _check_key(key: str, term: str) -> str:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise InvalidShardSetting(f"selector term {term!r}: {prefix!r} is not a DNS subdomain prefix")
    if not _NAME.match(name):
        raise InvalidShardSetting(f"selector term {term!r}: {key!r} is not a label key")
    return key


def _check_value(value: str, term: str) -> None:
    if value and not _NAME.match(value):
        raise InvalidShardSetting(f"selector term {term!r}: {value!r} is not a label value")


@dataclasses.dataclass(frozen=True)
class Shard:
    """This instance's share of the objects. The default, unnamed, takes everything."""

    name: str = ""
    selector: LabelSelector = LabelSelector()

    @property
    def lease_name(self) -> str:
        return f"{LEASE_NAME}-{self.name}" if self.name else LEASE_NAME

    @property
    def finalizer(self) -> str:
        return f"{FINALIZER}-{self.name}" if self.name else FINALIZER

    def foreign_claims(self, finalizers: Iterable[str] | None) -> list[str]:
        """Finalizers of other instances of this operator (other shards, or an unsharded one)."""
        return [f for f in finalizers or () if _is_operator_finalizer(f) and f != self.finalizer]

    def owns(self, labels: Mapping[str, str] | None, finalizers: Iterable[str] | None) -> bool:
        """Whether this instance may work on an object with these labels and finalizers."""
        return self.why_not_owned(labels, finalizers) is None

    def why_not_owned(self, labels: Mapping[str, str] | None, finalizers: Iterable[str] | None) -> str | None:
        """None when this instance may work on the object; otherwise why not, for people."""
        if not self.selector.matches(labels):
            return f"its labels do not match the selector {str(self.selector)!r} of shard {self.name!r}"
        claims = self.foreign_claims(finalizers)
        if claims:
            return f"another operator instance holds it ({', '.join(claims)})"
        return None

    def holds(
        self, labels: Mapping[str, str] | None, finalizers: Iterable[str] | None, annotations: Mapping[str, str] | None
    ) -> bool:
        """Whether this instance keeps its finalizer on the object (and applies deletion to
        it): while it may work on it, and afterwards until another shard asks for it."""
        if self.owns(labels, finalizers):
            return True
        requested = (annotations or {}).get(HANDOVER_ANNOTATION) or ""
        return (
            self.finalizer in (finalizers or ())
            and not self.foreign_claims(finalizers)
            and requested in ("", self.name)
        )

    def wants_handover(
        self, labels: Mapping[str, str] | None, finalizers: Iterable[str] | None, annotations: Mapping[str, str] | None
    ) -> bool:
        """Whether to ask for the object: it matches this shard's selector but another
        instance holds it, and this shard has not asked yet. An unnamed instance never asks."""
        return (
            bool(self.name)
            and self.selector.matches(labels)
            and bool(self.foreign_claims(finalizers))
            and (annotations or {}).get(HANDOVER_ANNOTATION) != self.name
        )

    def describe(self) -> str:
        if not self.name:
            return "unsharded (every object)"
        return f"shard {self.name!r}, selector {str(self.selector) or '(every object)'!r}"


def _is_operator_finalizer(finalizer: str) -> bool:
    return finalizer == FINALIZER or finalizer.startswith(f"{FINALIZER}-")


def shard_from_settings(name: str, selector: str) -> Shard:
    """SHARD_NAME and SHARD_SELECTOR as given; raises InvalidShardSetting with the reason."""
    name, selector = name.strip(), selector.strip()
    if name and (len(name) > MAX_SHARD_NAME or not _SHARD_NAME.match(name)):
        raise InvalidShardSetting(
            f"SHARD_NAME {name!r}: lower-case letters, digits and '-', starting and "
            f"ending with a letter or digit, at most {MAX_SHARD_NAME} characters"
        )
    parsed = parse_selector(selector)
    if parsed and not name:
        raise InvalidShardSetting(
            "SHARD_SELECTOR needs SHARD_NAME: every shard needs its own Lease and "
            "finalizer, or shards would take each other's"
        )
    return Shard(name, parsed)
