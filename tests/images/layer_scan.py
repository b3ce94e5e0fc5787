"""Search every layer of an image for byte strings, as a registry would receive them.

Why ``docker save`` and not the running image's files: a secret written in one
step and deleted in a later one is gone from the container's view but still in
the earlier layer, and a push uploads that layer. The export is uncompressed
tar, so a plain byte search over it sees every file of every layer.

One export serves every needle: a 2.5 GB image takes minutes to export on a
busy 2-core machine, and the engine writes the whole export out before the
first byte comes (see ``SLOW_REPLY_TIMEOUT_S``).
"""

from __future__ import annotations

from collections.abc import Iterable

from tests.support.docker_engine import engine_client

CHUNK_BYTES = 1 << 20


def layers_holding(image: str, needles: Iterable[bytes],
                   docker_host: str | None = None) -> set[bytes]:
    """The needles found anywhere in ``image``'s layers (one ``docker save``, streamed), on the
    engine at ``docker_host`` (else ``DOCKER_HOST``)."""
    export = engine_client(docker_host).images.get(image).save(chunk_size=CHUNK_BYTES)
    return needles_in(export, needles)


def needles_in(chunks: Iterable[bytes], needles: Iterable[bytes]) -> set[bytes]:
    """The needles that occur in the concatenation of ``chunks``, read once, in order.

    A needle may straddle any number of chunks (the stream may hand over pieces
    shorter than a needle), so the window carries the last ``len(longest) - 1``
    bytes seen, not the last chunk's.
    """
    wanted = {needle for needle in needles if needle}
    overlap = max((len(needle) for needle in wanted), default=1) - 1
    found: set[bytes] = set()
    tail = b""
    for chunk in chunks:
        window = tail + chunk
        found |= {needle for needle in wanted - found if needle in window}
        tail = window[max(0, len(window) - overlap):] if overlap else b""
    return found
