"""A JSON document around one long array, produced a chunk at a time: request bodies and files with a million
entries are never all in memory."""

from typing import Any, AsyncIterator, Iterable, Iterator

import orjson

CHUNK_BYTES = 1 << 18


def json_array_chunks(head: bytes, items: Iterable[Any], tail: bytes = b"]}") -> Iterator[bytes]:
    """`head`, the items as JSON separated by commas, then `tail`, in chunks of about CHUNK_BYTES."""
    block = bytearray(head)
    first = True
    for item in items:
        if not first:
            block += b","
        first = False
        block += orjson.dumps(item)
        if len(block) >= CHUNK_BYTES:
            yield bytes(block)
            block.clear()
    yield bytes(block + tail)


async def as_async(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """The same chunks for an HTTP client that streams an async body."""
    for chunk in chunks:
        yield chunk
