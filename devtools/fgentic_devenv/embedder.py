"""A deterministic embeddings endpoint for `fgentic-dev up` (no model weights here).

The embeddings provider is outside the system: this stands in for it with feature hashing,
where each lowercase word adds to one of 768 dimensions and the sum is normalised. Texts that
share words are near each other, so a question finds the chunk that answers it. It serves
OpenAI's ``POST /v1/embeddings`` shape (float lists) on 127.0.0.1, or on ``--host`` (the
cluster tier binds it to the test bridge for pods):

    python -m fgentic_devenv.embedder --port N [--host ADDRESS]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import re

from aiohttp import web

DIMENSIONS = 768


def embed(text: str) -> list[float]:
    vector = [0.0] * DIMENSIONS
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        vector[int.from_bytes(digest[:4], "big") % DIMENSIONS] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


async def _embeddings(request: web.Request) -> web.Response:
    body = await request.json()
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    return web.json_response({"object": "list", "model": body.get("model"), "data": [
        {"object": "embedding", "index": i, "embedding": embed(str(t))}
        for i, t in enumerate(texts)]})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    app = web.Application()
    app.router.add_post("/v1/embeddings", _embeddings)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
