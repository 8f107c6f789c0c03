"""A radix tree over prompt token ids: the emulator's stand-in for SGLang's RadixCache.

SGLang keeps the KV cache of every finished prefill in a radix tree keyed by token ids (page size
1 by default) and, for a new request, reuses the longest cached prefix: those tokens are not
prefilled again (`#cached-token` in the prefill log, `cached_tokens` in meta_info,
`sglang:cached_tokens_total` / `sglang:cache_hit_rate` in /metrics). What is modelled here:

- `match(ids)`: the longest cached prefix, capped at len(ids) - 1 (SGLang always computes at
  least the last prompt token to get logits for the first output token);
- `insert(ids)`: a prompt whose prefill finished is cached (SGLang also caches output tokens;
  the emulator's outputs come from a text bank and are never re-sent, so only prompts are kept);
- eviction of least recently used leaves once more than `capacity` tokens are cached;
- `reset()`: `/flush_cache`.

Edges hold tuples of token ids (a compressed radix tree), so a 1,000-token prompt is a handful of
nodes, not a thousand. Pure: no I/O, no clock (recency is a counter).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Node:
    key: tuple[int, ...] = ()
    parent: _Node | None = None
    children: dict[int, _Node] = field(default_factory=dict)
    last_use: int = 0


class RadixCache:
    """Longest-prefix matching over token id sequences, bounded by `capacity` tokens."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._tick = itertools.count(1)
        self.reset()

    def reset(self) -> None:
        self.root = _Node()
        self.size = 0  # cached tokens (sum of edge lengths)

    def match(self, ids: list[int] | tuple[int, ...]) -> int:
        """How many leading tokens of `ids` are cached and can skip prefill (< len(ids))."""
        limit = len(ids) - 1
        if limit <= 0 or not self.root.children:
            return 0
        node, pos, tick = self.root, 0, next(self._tick)
        while pos < limit:
            child = node.children.get(ids[pos])
            if child is None:
                break
            key = child.key
            n = 0
            top = min(len(key), limit - pos)
            while n < top and key[n] == ids[pos + n]:
                n += 1
            child.last_use = tick
            pos += n
            if n < len(key):
                break
            node = child
        return pos

    def insert(self, ids: list[int] | tuple[int, ...]) -> int:
        """Cache `ids`; returns how many tokens were new. Evicts LRU leaves beyond capacity."""
        ids = tuple(ids)
        node, pos, tick, added = self.root, 0, next(self._tick), 0
        while pos < len(ids):
            child = node.children.get(ids[pos])
            if child is None:
                leaf = _Node(ids[pos:], node, last_use=tick)
                node.children[ids[pos]] = leaf
                added = len(ids) - pos
                break
            key = child.key
            n = 0
            top = min(len(key), len(ids) - pos)
            while n < top and key[n] == ids[pos + n]:
                n += 1
            if n < len(key):  # split the edge where the new sequence leaves it
                mid = _Node(key[:n], node, last_use=tick)
                node.children[ids[pos]] = mid
                child.key = key[n:]
                child.parent = mid
                mid.children[child.key[0]] = child
                child = mid
            child.last_use = tick
            node = child
            pos += n
        self.size += added
        if self.size > self.capacity:
            self._evict(self.size - self.capacity)
        return added

    def _evict(self, tokens: int) -> None:
        leaves = [(n.last_use, id(n), n) for n in self._nodes() if not n.children and n is not self.root]
        heapq.heapify(leaves)
        while tokens > 0 and leaves:
            _, _, leaf = heapq.heappop(leaves)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            self.size -= len(leaf.key)
            tokens -= len(leaf.key)
            if parent is not self.root and not parent.children:
                heapq.heappush(leaves, (parent.last_use, id(parent), parent))

    def _nodes(self) -> list[_Node]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out
