"""vLLM's automatic prefix cache, by prefix rather than by block: a request whose prompt starts with a prefix this
replica computed before skips that prefix's prefill.

A prefix is named by a key (over HTTP, a hash chained over its blocks of token ids, tokens.py; the in-process fleet
names a rollout's turns itself) and has a length in tokens. The cache keeps the conversations the replica finished (prompt and output: the start of the same
session's next turn). Their KV blocks are the free ones no running sequence holds, so the cache holds at most what
the running sequences leave free and gives up its least recently used prefixes first; a hit hands the blocks to the
request that found them (they are its KV now, counted once). Hits count in whole blocks, as vLLM's do. Prompts
shared between concurrent requests (one prompt sampled several times) are not modelled: every rollout of the
benchmark has a prompt of its own.
"""

from collections import OrderedDict
from typing import Sequence


class PrefixCache:
    def __init__(self, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self._tokens: OrderedDict[int, int] = OrderedDict()  # key -> tokens, least recently used first
        self.held = 0  # tokens the cached prefixes hold

    def take(self, prefixes: Sequence[tuple[int, int]]) -> int:
        """Tokens of the longest cached prefix among `prefixes` ((key, tokens), shortest first), in whole blocks;
        that prefix leaves the cache for the request's own KV."""
        for key, _ in reversed(prefixes):
            tokens = self._tokens.pop(key, None)
            if tokens is not None:
                self.held -= tokens
                return tokens - tokens % self.block_tokens
        return 0

    def add(self, key: int, tokens: int, room: int) -> None:
        """Cache prefix `key` of `tokens` tokens, evicting the least recently used while more than `room` is held."""
        old = self._tokens.pop(key, None)
        if old is not None:
            self.held -= old
        self._tokens[key] = tokens
        self.held += tokens
        self.shrink(room)

    def shrink(self, room: int) -> None:
        """Evict the least recently used prefixes until at most `room` tokens are held."""
        while self.held > max(room, 0) and self._tokens:
            _, tokens = self._tokens.popitem(last=False)
            self.held -= tokens

    def clear(self) -> None:
        self._tokens.clear()
        self.held = 0
