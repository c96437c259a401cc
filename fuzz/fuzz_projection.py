"""atheris harness: the X-Fgentic-Identity / Room-Context decoder and the document loaders.

Any exception other than ContractError, or a ContractError whose message is not exactly a
bounded code plus a contract field path, is a crash. Run:

    .venv/bin/python fuzz/fuzz_projection.py -runs=100000
"""

from __future__ import annotations

import base64
import json
import re
import sys

import atheris

with atheris.instrument_imports(include=["_common", "fgentic_governance"]):
    import _common  # first: it puts a plain checkout on sys.path

    from fgentic_governance import contract
    from fgentic_governance.contract import Code, ContractError
    from fgentic_governance.contract.shapes import FIELD_NAMES

_CODES = "|".join(c.value for c in Code)
_MESSAGE = re.compile(rf"^({_CODES})( at [a-z_][a-z0-9_]*(\[[0-9]+\])*"
                      rf"(\.[a-z_][a-z0-9_]*(\[[0-9]+\])*)*)?$")
_DATA = _common.ROOT / "src" / "fgentic_governance" / "contract" / "testdata"
SEEDS = [json.dumps(json.loads((_DATA / f"adr0017_{stem}.json").read_text()), sort_keys=True,
                    separators=(",", ":")).encode()
         for stem in ("matrix_projection", "oauth_projection", "room_snapshot")]
NOW = 1784117000


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def splice(fdp: atheris.FuzzedDataProvider) -> bytes:
    """A valid document with one fuzzer-chosen span replaced by fuzzer bytes."""
    seed = SEEDS[fdp.ConsumeIntInRange(0, len(SEEDS) - 1)]
    start = fdp.ConsumeIntInRange(0, len(seed))
    end = fdp.ConsumeIntInRange(start, min(len(seed), start + 16))
    middle = bytes(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 16)))
    return bytes(seed[:start] + middle + seed[end:])


def run(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 6)
    try:
        if mode == 0:  # raw header values, any count
            values: list[str | bytes] = [fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 200))
                                         for _ in range(fdp.ConsumeIntInRange(0, 2))]
            contract.decode_identity(values, now=NOW, agent=None)
        elif mode == 1:  # a well-formed carrier around arbitrary bytes: the JSON layers
            contract.decode_identity([b64(fdp.ConsumeBytes(fdp.remaining_bytes()))],
                                     now=fdp.ConsumeIntInRange(0, 2**53 - 1), agent=None)
        elif mode == 2:  # near-valid projections: the shape and semantic layers
            contract.decode_identity([b64(splice(fdp))], now=NOW, agent=None)
        elif mode == 3:
            contract.decode_room_context([b64(splice(fdp))], user_id="@alice:org-a.example")
        elif mode == 4:
            contract.load_identity(splice(fdp))
        elif mode == 5:
            contract.load_snapshot(splice(fdp), local_server="org-a.example")
        else:
            text = fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 300))
            contract.load_room_context(text)
    except ContractError as exc:
        _common.check_message(str(exc), _MESSAGE)
        if not set(re.findall(r"[a-z_][a-z0-9_]*", exc.path)) <= FIELD_NAMES:
            raise AssertionError("path outside the contract vocabulary") from None
        if exc.__cause__ is not None:
            raise AssertionError("chained cause") from None


def main() -> None:
    atheris.Setup(sys.argv, run)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
