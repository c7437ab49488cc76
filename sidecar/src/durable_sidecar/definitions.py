"""n8n workflow definitions: parsing, the canonical content hash, step names and node diffs.

The content hash is the SHA-256 of the canonical JSON (RFC 8785, see
canonical.py) of ``{"nodes": [...], "connections": {...}}`` where:

- nodes are sorted by name: n8n addresses nodes by their (unique) name in
  connections and expressions, and reorders the array when it saves;
- each node's ``position`` (canvas layout) and ``id`` (an identity n8n may
  regenerate on import) are left out: neither changes what a node does.
  Caveat: with ``executionOrder: v1`` n8n orders parallel branches by
  position, so moving nodes to reorder branches is not a new version;
- sticky notes (``n8n-nodes-base.stickyNote``) are left out: they never run,
  and editing their text should not put in-flight instances on a mismatch;
- connections drop empty outputs n8n leaves behind (``"main": [[]]``).

Everything else (parameters, type, typeVersion, credentials, webhookId,
disabled, notes, retry settings) is kept: when in doubt, a spurious new
version is the safe mistake, a missed change is not.

Node names are identifiers (1 to 255 characters, no control characters):
they become step names and are stored as text. ``legacy_content_hash`` is the
hash before RFC 8785; registering accepts a match on it (canonical.py, Migration).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from . import canonical, validation
from .errors import InvalidArgument

STICKY_NOTE_TYPE = "n8n-nodes-base.stickyNote"
_IGNORED_NODE_FIELDS = frozenset({"id", "position"})

# semver.org 2.0.0, the official regular expression.
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


@dataclass(frozen=True)
class Definition:
    """A checked definition: the bytes to store, their content hash and the step names."""

    raw: bytes
    content_hash: str
    node_names: tuple[str, ...]
    canonical_nodes: dict[str, Any]
    connections: dict[str, Any]
    legacy_content_hash: str = ""


@dataclass(frozen=True)
class NodeChange:
    name: str
    fields: tuple[str, ...]


@dataclass(frozen=True)
class DefinitionDiff:
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[NodeChange, ...]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def semver_label(field: str, value: str) -> str:
    """An optional label; when given it must be a semantic version (1.4.0, 2.0.0-rc.1)."""
    if value and not _SEMVER.match(value):
        raise InvalidArgument(
            f"{field} {value[:64]!r} is not a semantic version: use MAJOR.MINOR.PATCH, e.g. 1.4.0 or 2.0.0-rc.1"
        )
    return value


def canonical_json(value: Any) -> bytes:
    """RFC 8785 bytes of a parsed definition fragment."""
    return canonical.canonical_value("definition_json", value)


def parse(raw: bytes, field: str = "definition_json") -> Definition:
    """Checks the shape n8n gives a workflow and computes the content hash; InvalidArgument when malformed."""
    if not raw:
        raise InvalidArgument(f"{field} is required (JSON)")
    doc = canonical.parse(field, raw)
    nodes, steps, conns = _shape(field, doc)
    digest = hashlib.sha256(canonical.canonical_value(field, {"nodes": [nodes[n] for n in steps],
                                                              "connections": conns})).hexdigest()
    return Definition(raw=raw, content_hash=digest, node_names=tuple(steps),
                      canonical_nodes={n: nodes[n] for n in steps}, connections=conns,
                      legacy_content_hash=_legacy_hash(field, raw))


def _legacy_hash(field: str, raw: bytes) -> str:
    """The content hash as computed before RFC 8785 (Python numbers and spelling); "" when impossible."""
    try:
        nodes, steps, conns = _shape(field, json.loads(raw))
        return hashlib.sha256(canonical.legacy_dumps({"nodes": [nodes[n] for n in steps],
                                                      "connections": conns})).hexdigest()
    except (ValueError, RecursionError):
        return ""


def _shape(field: str, doc: Any) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """(nodes by name without ignored fields, sorted executable node names, cleaned connections)."""
    if not isinstance(doc, dict):
        raise InvalidArgument(f"{field} must be a JSON object with a 'nodes' array (an n8n workflow)")
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise InvalidArgument(f"{field} has no 'nodes' array: send the n8n workflow JSON (nodes and connections)")
    connections = doc.get("connections", {})
    if connections is None:
        connections = {}
    if not isinstance(connections, dict):
        raise InvalidArgument(f"{field}: 'connections' must be an object keyed by node name")
    canonical_nodes: dict[str, Any] = {}
    steps: list[str] = []
    for i, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise InvalidArgument(f"{field}: nodes[{i}] is not an object")
        name = node.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"{field}: nodes[{i}] has no name")
        validation.identifier(f"{field}: nodes[{i}].name", name)
        if not isinstance(node.get("type"), str) or not node["type"]:
            raise InvalidArgument(f"{field}: node {name[:64]!r} has no type")
        if name in canonical_nodes:
            raise InvalidArgument(f"{field}: node name {name[:64]!r} appears twice; n8n node names are unique")
        canonical_nodes[name] = {k: v for k, v in node.items() if k not in _IGNORED_NODE_FIELDS}
        if node["type"] != STICKY_NOTE_TYPE:
            steps.append(name)
    return canonical_nodes, sorted(steps), _canonical_connections(field, connections)


def _canonical_connections(field: str, connections: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for source, by_type in connections.items():
        if not isinstance(by_type, dict):
            raise InvalidArgument(f"{field}: connections[{source[:64]!r}] must be an object of output types")
        kept: dict[str, Any] = {}
        for kind, outputs in by_type.items():
            if not isinstance(outputs, list):
                raise InvalidArgument(f"{field}: connections[{source[:64]!r}][{kind[:64]!r}] must be an array")
            outs = [o if o is not None else [] for o in outputs]
            while outs and outs[-1] == []:
                outs.pop()
            if outs:
                kept[kind] = outs
        if kept:
            out[source] = kept
    return out


def diff(old: Definition, new: Definition) -> DefinitionDiff:
    """Nodes added, removed, and changed (which fields, or their outgoing connections)."""
    before, after = set(old.canonical_nodes), set(new.canonical_nodes)
    changed = []
    for name in sorted(before & after):
        a, b = old.canonical_nodes[name], new.canonical_nodes[name]
        fields = sorted(k for k in set(a) | set(b) if canonical_json(a.get(k)) != canonical_json(b.get(k)))
        if canonical_json(old.connections.get(name)) != canonical_json(new.connections.get(name)):
            fields.append("connections")
        if fields:
            changed.append(NodeChange(name, tuple(fields)))
    return DefinitionDiff(added=tuple(sorted(after - before)), removed=tuple(sorted(before - after)),
                          changed=tuple(changed))
