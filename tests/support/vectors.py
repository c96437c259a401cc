"""The one spelling of a deterministic test embedding.

``unit_vector(text)`` is what every stand-in embedder returns: hash-seeded (the same text always
embeds the same, different texts almost orthogonally), unit length, and every component a
float32, so a base64 float32 round trip (kagent's runtime) and PostgreSQL's ``vector`` (float4)
both keep it exactly. ``one_hot(text)`` is for tests that need texts to be exactly orthogonal.
"""

from __future__ import annotations

import hashlib
import math
import struct

from fgentic_governance.memory.model import EMBEDDING_DIMENSIONS

DIMENSIONS = EMBEDDING_DIMENSIONS  # what kagent's controller and KAgentEmbedding require: 768


def unit_vector(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    seed = hashlib.shake_256(text.encode()).digest(4 * dimensions)
    words = struct.unpack(f"<{dimensions}I", seed)
    raw = [w / 2**31 - 1.0 for w in words]
    norm = math.sqrt(sum(x * x for x in raw))
    return list(struct.unpack(f"<{dimensions}f",
                              struct.pack(f"<{dimensions}f", *(x / norm for x in raw))))


def one_hot(text: str, dimensions: int = DIMENSIONS, *, floor: float = 0.001) -> list[float]:
    """One hot axis per text (by its SHA-256), ``floor`` elsewhere (a zero vector has no
    cosine)."""
    values = [floor] * dimensions
    values[int(hashlib.sha256(text.encode()).hexdigest(), 16) % dimensions] = 1.0
    return values
