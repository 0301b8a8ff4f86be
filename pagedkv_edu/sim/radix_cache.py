"""SGLang's RadixAttention cache: a radix tree over token ids, beside vLLM's block hash chain (chapter 8).

A hit may end at any token (SGLang's default page size is 1); running requests lock their path;
over capacity, the least recently used unlocked leaves go first. Token ids only: no K/V slots.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..checks import check_token_ids, check_whole


@dataclass(eq=False)
class RadixNode:
    """An edge's run of tokens, the node it leads to, and who uses it."""

    key: tuple[int, ...] = ()
    parent: "RadixNode | None" = None
    children: dict[int, "RadixNode"] = field(default_factory=dict)   # by the first token of the child's key
    lock_ref: int = 0              # running requests whose prefix passes through here
    last_access: int = 0           # a logical clock: larger is more recent

    def prefix(self) -> tuple[int, ...]:
        """The tokens from the root to the end of this node's edge."""
        runs, node = [], self
        while node is not None:
            runs.append(node.key)
            node = node.parent
        return tuple(t for run in reversed(runs) for t in run)


class RadixCache:
    """A token-level radix tree of at most ``capacity_tokens`` cached tokens."""

    def __init__(self, capacity_tokens: int) -> None:
        check_whole("capacity_tokens", capacity_tokens, 1)
        self.capacity_tokens = capacity_tokens
        self.root = RadixNode(lock_ref=1)      # never evicted
        self.num_tokens = 0
        self.num_evicted_tokens = 0
        self._clock = 0

    # --- lookup ------------------------------------------------------------------------------------
    def match_prefix(self, token_ids: Sequence[int]) -> tuple[int, RadixNode]:
        """The length of the longest cached prefix of ``token_ids`` and the node where it ends.

        Marks the path as used now (for LRU), and splits an edge the match ends inside.
        """
        tokens = tuple(check_token_ids(token_ids))
        self._clock += 1
        node, matched = self.root, 0
        while matched < len(tokens) and tokens[matched] in node.children:
            child = node.children[tokens[matched]]
            child.last_access = self._clock
            n = _common_length(child.key, tokens[matched:])
            partial = n < len(child.key)
            node, matched = (self._split(child, n) if partial else child), matched + n
            if partial:
                break
        return matched, node

    def _split(self, child: RadixNode, n: int) -> RadixNode:
        """Cut ``child``'s edge after ``n`` tokens: a new node takes the first ``n``, the child keeps the rest."""
        parent = child.parent
        assert parent is not None and 0 < n < len(child.key)
        middle = RadixNode(child.key[:n], parent, {child.key[n]: child}, child.lock_ref, child.last_access)
        parent.children[child.key[0]] = middle
        child.key, child.parent = child.key[n:], middle
        return middle

    # --- changes -----------------------------------------------------------------------------------
    def insert(self, token_ids: Sequence[int]) -> int:
        """Cache ``token_ids`` (their K/V were computed); returns how many were cached already.

        Makes room by evicting unlocked least recently used leaves (never the path it extends);
        if there is still not room for all of them, caches the longest prefix that fits.
        """
        tokens = tuple(check_token_ids(token_ids))
        matched, node = self.match_prefix(tokens)
        rest = tokens[matched:]
        if rest:
            self.lock(node)
            self.evict(self.num_tokens + len(rest) - self.capacity_tokens)
            self.unlock(node)
            rest = rest[:self.capacity_tokens - self.num_tokens]
        if rest:
            node.children[rest[0]] = RadixNode(rest, node, last_access=self._clock)
            self.num_tokens += len(rest)
        return matched

    def lock(self, node: RadixNode) -> None:
        """A running request uses the prefix ending at ``node``: nothing on its path may be evicted."""
        while node is not None:
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: RadixNode) -> None:
        """The request that locked ``node`` finished; raises if the path is not locked."""
        path = []
        while node is not None:
            if node.lock_ref == 0:
                raise ValueError(f"unlock of a node that is not locked (its prefix ends with {node.key[-4:]})")
            path.append(node)
            node = node.parent
        for n in path:
            n.lock_ref -= 1

    def evict(self, num_tokens: int) -> int:
        """Evict at least ``num_tokens`` tokens if possible, least recently used unlocked leaves first.

        Returns the tokens evicted (maybe more than asked: a leaf goes whole; fewer if the rest is locked).
        """
        if num_tokens <= 0:
            return 0
        heap = [(n.last_access, id(n), n) for n in self.nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(heap)
        evicted = 0
        while evicted < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            evicted += len(leaf.key)
            if not parent.children and parent.lock_ref == 0 and parent is not self.root:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        self.num_tokens -= evicted
        self.num_evicted_tokens += evicted
        return evicted

    # --- reading -----------------------------------------------------------------------------------
    def nodes(self) -> Iterator[RadixNode]:
        """Every node but the root, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    @property
    def num_nodes(self) -> int:
        return sum(1 for _ in self.nodes())

    @property
    def evictable_tokens(self) -> int:
        """Cached tokens no running request uses."""
        return sum(len(n.key) for n in self.nodes() if n.lock_ref == 0)

    def __repr__(self) -> str:
        return (f"RadixCache({self.num_tokens} of {self.capacity_tokens} tokens in {self.num_nodes} nodes, "
                f"{self.evictable_tokens} evictable)")


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
