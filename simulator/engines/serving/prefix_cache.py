"""The prefix cache of one serving engine, as vLLM V1's KV cache manager keeps it, over abstract token identities.

vLLM V1 (``vllm/v1/core/kv_cache_manager.py``, ``block_pool.py``; on by default) names a full KV block by
hash(parent block's hash, the block's tokens), so a block's name is the whole token prefix up to its end: two
requests whose prompts begin alike share those blocks. A request looks up the longest run of cached full blocks
of its prompt, capped at prompt length - 1 (the last prompt token is always recomputed to get logits); the blocks
it will compute are registered when they are allocated (so a request scheduled after it can hit them), and a
finished request's blocks stay cached in a free queue, evicted least recently used first, the tail of a sequence
before its head. vLLM reports hits per prompt token (``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits``).

Here tokens carry no ids; a call names its context instead (``Call.prefix``): a chain of segments
``(key, tokens)`` -- a system prompt, a session's earlier turns -- whose identity is the chain of keys up to it
(a node of a trie: ``path = (key_0, ..., key_i)``, like the hash chain), followed by the request's own tokens.

- **Prefix nodes** (shared across requests): cached token counts per path; a hit walks the call's chain and
  stops at the first node that is missing or only partly cached. Nodes in use by a running call are held
  (never evicted); a call registers the nodes it computes when it is placed (vLLM: at allocation).
- **A request's own entry** (key: the request id): what its previous call on this engine left, reused by its
  next call for the ``cached_tokens`` its plan says are identical (the single-request engines' convention,
  ``simulator.cost.execution.cache_split``); what a preempted call had written, reused when it is placed again. It is taken out of the cache when the next call is looked up and comes
  back when that call finishes; dropped when the request ends (no other request can hit it). A call with
  ``Call.publish`` caches its own tokens as a prefix node instead (the next turn of a session hits them).
- The hit, whatever its source, is floored to whole blocks of ``block`` tokens and capped at context - 1.
- Eviction: one LRU order over the evictable entries (own entries and unheld nodes), whole blocks from the tail
  of the least recently used entry, as many as needed (an own entry that lost its tail gives only its head); a
  node's children stay cached until evicted, unreachable, as in vLLM.

``enabled`` False (vLLM's ``--no-enable-prefix-caching``): no lookup, nothing cached; every call prefills its
whole context.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    """Cached KV of one engine, in tokens: held prefix nodes + evictable entries (LRU order)."""

    __slots__ = ("block", "enabled", "lru", "nodes", "held", "cut", "tokens", "lru_tokens", "evictions",
                 "query_tokens", "hit_tokens", "query_blocks", "hit_blocks")


    def __init__(self, block: int = 1, enabled: bool = True):
        self.block = int(block)
        self.enabled = enabled
        self.lru: OrderedDict = OrderedDict()  # evictable entries, least recently used first: key -> tokens
        self.nodes: dict[tuple, int] = {}  # every cached prefix node (held or evictable): path -> cached tokens
        self.held: dict[tuple, int] = {}  # prefix nodes in use by running calls: path -> holders
        self.cut: set[int] = set()  # own entries whose tail was evicted (they hold their first tokens only)
        self.tokens = 0  # all cached tokens (held and evictable)
        self.lru_tokens = 0  # the evictable ones (in ``lru``)
        self.evictions = 0
        self.query_tokens = self.hit_tokens = self.query_blocks = self.hit_blocks = 0

    # ---- a call's lookup ---------------------------------------------------------------------------------
    def take_own(self, rid: int) -> tuple[int, bool]:
        """Take the request's own entry out of the cache (its next call is being looked up): (its tokens, whether
        its tail was evicted)."""
        own = self.lru.pop(rid, 0) if self.lru else 0
        self.tokens -= own
        self.lru_tokens -= own
        if self.cut and rid in self.cut:
            self.cut.discard(rid)
            return own, True
        return own, False

    def match(self, prefix: tuple, own: int, cached_tokens: int, total: int, cut: bool = False) -> tuple[int, int]:
        """(kept, cached): the tokens of a call's context (``total`` = cached + new) whose KV is reused, and the
        tokens of its prefix nodes cached now (up to the lengths it names). ``own``: the tokens its request's own entry held (``take_own``).
        Pure: holds nothing."""
        if not self.enabled:
            return 0, 0
        hit = cached = 0
        whole = True  # every prefix node so far cached in full
        path: tuple = ()
        nodes = self.nodes
        for key, n in prefix:
            path = path + (key,)
            have = min(nodes.get(path, 0), n)  # a node may hold more than this call names (a longer shared head)
            cached += have
            if whole:
                hit += have
                whole = have >= n
        return self.kept(hit if whole else -hit - 1, own, cached_tokens, total, cut), cached

    def kept(self, hit: int, own: int, cached_tokens: int, total: int, cut: bool = False) -> int:
        """The tokens reused: the prefix nodes' ``hit`` (negative, -hit - 1: the chain broke there), extended by the
        request's own earlier calls to the plan's ``cached_tokens`` if its entry survived (``own`` > 0; ``cut``: only
        its first ``own`` tokens did) and the chain is intact; whole blocks, at most ``total`` - 1 (the last prompt
        token is always recomputed)."""
        if hit < 0:
            hit = -hit - 1
        elif own > 0 and cached_tokens > hit:
            hit = min(cached_tokens, hit + own) if cut else cached_tokens
        kept = max(min(hit, total - 1), 0) if self.enabled else 0
        b = self.block
        return b * (kept // b) if b > 1 else kept

    def count(self, kept: int, total: int) -> None:
        """One lookup of a placed call (vLLM's prefix_cache_queries / hits, in tokens and full blocks)."""
        b = self.block
        self.query_tokens += total
        self.hit_tokens += kept
        self.query_blocks += total // b
        self.hit_blocks += kept // b

    def hold(self, prefix: tuple) -> tuple:
        """Hold a call's cached prefix nodes (not evictable while it runs); returns its paths."""
        if not prefix or not self.enabled:
            return ()
        paths = []
        path: tuple = ()
        for key, _n in prefix:
            path = path + (key,)
            paths.append(path)
            if path in self.nodes:
                h = self.held.get(path, 0)
                if h == 0:
                    self.lru_tokens -= self.lru.pop(path, 0)
                self.held[path] = h + 1
        return tuple(paths)

    def place(self, prefix: tuple, paths: tuple, kept: int, total: int, counted: bool = True) -> None:
        """A call is placed: cache the prefix nodes it computes in full now (vLLM caches blocks when it allocates
        them; a call placed after it hits them) and count the lookup (once per call)."""
        added = 0
        held = self.held
        for (_key, n), path in zip(prefix, paths):
            have = self.nodes.get(path, 0)
            if have < n:
                if not have:
                    held[path] = held.get(path, 0) + 1
                self.nodes[path] = n
                added += n - have
        self.tokens += added
        if counted:
            self.count(kept, total)

    def release(self, paths: tuple) -> None:
        """A call stops using its prefix nodes. Unheld nodes become evictable, the deepest first (vLLM frees a
        sequence's blocks in reverse order, so its tail is evicted before its head)."""
        held, lru, nodes = self.held, self.lru, self.nodes
        for path in reversed(paths):
            h = held.get(path)
            if h is None:
                continue
            if h > 1:
                held[path] = h - 1
                continue
            del held[path]
            n = nodes.get(path, 0)
            if n:
                lru[path] = n
                self.lru_tokens += n

    # ---- a call's end ----------------------------------------------------------------------------------
    def keep(self, rid: int, own_tokens: int, publish=None, paths: tuple = ()) -> None:
        """A finished call's own tokens (beyond its prefix) stay cached: as the request's own entry, or with
        ``publish`` as the prefix node ``paths[-1] + (publish,)`` that other requests can hit."""
        if not self.enabled or own_tokens <= 0:
            return
        if publish is None:
            self.lru[rid] = own_tokens
            self.tokens += own_tokens
            self.lru_tokens += own_tokens
            self.cut.discard(rid)
            return
        path = (paths[-1] if paths else ()) + (publish,)
        have = self.nodes.get(path, 0)
        if own_tokens > have:
            self.nodes[path] = own_tokens
            self.tokens += own_tokens - have
            if path not in self.held:
                self.lru_tokens += own_tokens - self.lru.get(path, 0)
                self.lru[path] = own_tokens  # before the prefix is released: evicted before it

    def drop(self, rid: int) -> None:
        """The request ended: its own entry can never be hit again."""
        if self.lru:
            tok = self.lru.pop(rid, 0)
            self.tokens -= tok
            self.lru_tokens -= tok
            self.cut.discard(rid)

    def evict(self, free: int, need: int) -> int:
        """Evict until ``free`` + evicted >= ``need``, least recently used entry first, whole blocks from an
        entry's tail (vLLM evicts blocks from the head of its free queue, where a freed sequence put its tail
        first); returns the tokens evicted."""
        out = 0
        lru, b = self.lru, self.block
        while free + out < need and lru:
            key = next(iter(lru))
            tok = lru[key]
            short = need - free - out
            take = tok if tok <= short else min(tok, -(-short // b) * b)
            out += take
            self.evictions += 1
            node = type(key) is tuple
            if take == tok:
                del lru[key]
                if node:
                    del self.nodes[key]
                else:
                    self.cut.discard(key)
            else:
                lru[key] = tok - take
                if node:
                    self.nodes[key] = tok - take
                else:
                    self.cut.add(key)
        self.tokens -= out
        self.lru_tokens -= out
        return out
