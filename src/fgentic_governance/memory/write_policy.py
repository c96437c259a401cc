"""What memory refuses to remember: credentials and durable high-risk standing instructions.

Pure functions, applied by the store before any insert (and by the client before any cost is
admitted). A refusal is a bare reason code; the matched text is never returned, logged or
quoted. The checks fail closed: a false positive costs one unremembered fact, a false negative
stores a secret or a standing prompt injection for up to the retention period.

Input is normalized first (NFKC, zero-width and soft-hyphen characters removed, whitespace
runs collapsed) so that look-alike or invisibly split secrets and phrases are still caught.
Every pattern is linear-time in practice: no nested quantifiers, bounded repetitions.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Final

from fgentic_governance.memory.errors import StoreRefusal
from fgentic_governance.reasons import Reason

# Characters that render as nothing and are used to split a token past a scanner.
_INVISIBLE: Final = dict.fromkeys(
    map(ord, "\u00ad\u180e\u200b\u200c\u200d\u200e\u200f\u2060\u2061\u2062\u2063\u2064\ufeff"),
    None,
)
_SPACES: Final = re.compile(r"\s+")

def _compile(*patterns: str, flags: int = 0) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, flags) for p in patterns)


# Fixed-shape secrets. They contain no spaces, so they are also searched for in the text with
# all spaces removed (a key pasted across lines or split by blanks is still a key).
_TOKEN_PATTERNS: Final = _compile(
    # AWS access key ids (long-term and temporary).
    r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA)[A-Z0-9]{16}\b",
    # Well-known provider token shapes.
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bglpat-[A-Za-z0-9_-]{20,}",
    r"\bsk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{20,}",
    r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    r"\bxapp-[0-9]-[A-Za-z0-9-]{10,}",
    r"\bAIza[0-9A-Za-z_-]{35}",
    r"\bya29\.[0-9A-Za-z_-]{20,}",
    r"\bhf_[A-Za-z0-9]{30,}",
    r"\bnpm_[A-Za-z0-9]{36}",
    r"\bsyt_[A-Za-z0-9_]{10,}",  # Synapse (Matrix) access tokens
    r"\bmct_[A-Za-z0-9_]{10,}",  # MAS compatibility tokens
    # JSON Web Tokens: a base64url JSON header ("eyJ") and two more segments.
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{4,}",
)

# Secrets recognised by their surroundings rather than their shape.
_CONTEXT_PATTERNS: Final = _compile(
    # PEM / OpenSSH / PGP private key blocks.
    r"-{5} ?BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY",
    r"(?i)\baws_?secret_?access_?key\b",
    # HTTP authorization values; a bearer token has at least one digit.
    r"(?i)\bbearer (?=[A-Za-z._~+/=-]{0,200}[0-9])[A-Za-z0-9._~+/=-]{12,}",
    r"(?i)\bauthorization ?[:=] ?\S{8,}",
    # Credentials embedded in a URL: scheme://user:secret@host
    r"(?i)\b[a-z][a-z0-9+.-]{1,15}://[^\s/:@]{1,64}:[^\s/@]{1,128}@",
    # Assignments of secret-named fields: password=..., "api_key": "...", client-secret: ...
    r"(?i)\b(?:password|passwd|pwd|passphrase|passcode|secret|secret[_-]?key|api[_-]?key|apikey"
    r"|access[_-]?key|access[_-]?token|auth[_-]?token|refresh[_-]?token|client[_-]?secret"
    r"|private[_-]?key|token)[\"']? ?(?::|=>|=) ?[\"']?[^\s\"']{3,}",
    # Natural-language disclosure of a secret's value: "my password is ...".
    r"(?i)\b(?:password|passphrase|passcode|api key|secret key|2fa code|one-time code"
    r"|recovery code)s? (?:is|was|=|:) \S",
    r"(?i)\bpin(?: code| number)? (?:is|was|=|:) ?[0-9]{3,}",
)

# Long runs of a token alphabet; judged in code (mixed case + digits, or long hex) because a
# regular expression with class look-aheads would be quadratic on long unbroken input.
_TOKEN_RUN: Final = re.compile(r"[A-Za-z0-9+/_=-]{32,}")
_HEX_RUN: Final = re.compile(r"\b[0-9a-fA-F]{48,}\b")

_HIGH_RISK_PATTERNS: Final = _compile(
    # Overrides of earlier or governing instructions.
    r"\b(?:ignore|disregard|forget|override|overrule) (?:(?:all|any|the|your|my|every|of"
    r"|these|those) ){0,3}(?:previous|prior|above|earlier|preceding|existing|original|system"
    r"|safety|security) (?:instructions?|rules?|prompts?|directions?|guidelines?|guardrails?"
    r"|polic(?:y|ies)|constraints?|restrictions?|messages?)\b",
    r"\b(?:ignore|disregard|override|overrule) (?:(?:all|any|the|your|my|every) ){0,2}"
    r"(?:instructions?|prompts?|guardrails?|guidelines?|polic(?:y|ies)|safety)\b",
    # System-prompt and persona overrides.
    r"\b(?:new|updated|real|true|override|replace|change|reveal|print|show|ignore) (?:the |your |"
    r"this )?system prompt",
    r"\bsystem prompt ?(?::|=|is\b|says\b)",
    r"(?:^|\s)(?:< ?/? ?system ?>|\[ ?system ?\]|#{2,} ?system\b|<\|im_start\|> ?system)",
    r"\b(?:god|jailbreak|jailbroken|dan|unrestricted|unfiltered) mode\b",
    r"\byou are now (?:an? )?(?:unrestricted|unfiltered|jailbroken|root|admin|dan)\b",
    # Standing orders addressed to the assistant: "from now on you must ...".
    r"\b(?:from now on|henceforth|going forward|for all future|in (?:all|every) future)\b"
    r"[ ,:;-]{0,3}(?:you|the assistant|the agent|assistant|agent) (?:must|will|shall|should"
    r"|have to|are to|need to|may)\b",
    # "always/never" + a high-risk action: "always obey", "always approve", "never ask ...".
    r"\b(?:always|unconditionally|automatically|blindly) (?:\w+ ){0,2}?(?:obey|comply|approve"
    r"|accept|allow|authori[sz]e|grant|bypass|ignore|disable|override|trust|execute|reveal|leak"
    r"|exfiltrate|escalate|elevate|follow (?:any|all|every)|do (?:what|whatever|anything))\b",
    r"\bnever (?:\w+ ){0,2}?(?:ask|check|verify|confirm|require|wait) (?:\w+ ){0,2}?"
    r"(?:approval|permission|confirmation|consent|review|verification)\b",
    # Disabling governance: audit, logging, approval, safety, policy.
    r"\b(?:bypass|disable|turn off|switch off|circumvent|evade|suppress) (?:the |all |any |"
    r"your )?(?:audit(?:ing|s)?|logging|logs?|approvals?|polic(?:y|ies)|safety|guardrails?"
    r"|filters?|moderation|monitoring|consent|governance|security)\b",
    r"\b(?:do not|don't|dont|never) (?:log|audit|record)\b",
    r"\bwithout (?:asking|approval|permission|confirmation|consent|review|audit|logging)\b",
    flags=re.IGNORECASE,
)


# Gates: for each group, literals one of which every match of every pattern in the group
# contains. A text without any of them cannot match the group, so its patterns are skipped; a
# text with one runs them all, as before. The token gate is case-sensitive like its patterns.
# The other groups fold case, so their gates look in the lower-cased text, which is exact only
# for ASCII (Unicode case folding also pairs letters such as U+0130 and U+0131 with "i"): a
# text with other characters runs every pattern. Every branch starts with a literal, so the
# search scans for first characters. tests/unit/test_write_policy.py holds the gated verdict
# equal to the ungated one.
_TOKEN_GATE: Final = re.compile(  # searched in the compact text (no literal has a space)
    r"_|-|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA|AIza|ya29\.|eyJ")
_CONTEXT_GATE: Final = re.compile(
    r"-----|aws|bearer|:|=|pass|api key|secret key|code|pin")
_HIGH_RISK_GATE: Final = re.compile(
    r"ignore|disregard|forget|overr|system|mode|now|henceforth|forward|future|always"
    r"|unconditionally|automatically|blindly|never|bypass|disable|turn off|switch off"
    r"|circumvent|evade|suppress|do not|don't|dont|without")


def normalize(text: str) -> str:
    """NFKC, invisible characters removed, whitespace runs collapsed to one space."""
    folded = unicodedata.normalize("NFKC", text).translate(_INVISIBLE)
    return _SPACES.sub(" ", folded)


def _compact(text: str) -> str:
    # Secrets are whitespace-free: a key split by spaces or newlines is rejoined here.
    return text.replace(" ", "")


def _high_entropy(text: str) -> bool:
    for match in _TOKEN_RUN.finditer(text):
        run = match.group()
        if (any(c.isupper() for c in run) and any(c.islower() for c in run)
                and any(c.isdigit() for c in run)):
            return True
    return _HEX_RUN.search(text) is not None


def content_reason(text: str, *, gated: bool = True) -> Reason | None:
    """The refusal reason for a fact's text, or None when it may be stored.

    ``gated=False`` runs every pattern regardless of the gates (the reference the tests
    compare the gated verdict with)."""
    normalized = normalize(text)
    compact = _compact(normalized)
    tokens, context, high_risk = _open_gates(normalized, compact) if gated else (True,) * 3
    if ((tokens and any(p.search(normalized) or p.search(compact) for p in _TOKEN_PATTERNS))
            or (context and any(p.search(normalized) for p in _CONTEXT_PATTERNS))
            or _high_entropy(normalized)):
        return Reason.CREDENTIAL_CONTENT
    if high_risk and any(p.search(normalized) for p in _HIGH_RISK_PATTERNS):
        return Reason.HIGH_RISK_INSTRUCTION_CONTENT
    return None


def _open_gates(normalized: str, compact: str) -> tuple[bool, bool, bool]:
    """Which groups (tokens, context, high-risk) may match."""
    tokens = _TOKEN_GATE.search(compact) is not None
    if not normalized.isascii():
        return tokens, True, True
    lowered = normalized.lower()
    return (tokens, _CONTEXT_GATE.search(lowered) is not None,
            _HIGH_RISK_GATE.search(lowered) is not None)


MetadataValue = str | int | float | bool | None | Sequence["MetadataValue"] | Mapping[
    str, "MetadataValue"]


def metadata_reason(metadata: Mapping[str, MetadataValue]) -> Reason | None:
    """Keys and string values of metadata pass the same checks as content."""
    stack: list[object] = [metadata]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            reason = content_reason(item)
            if reason is not None:
                return reason
        elif isinstance(item, Mapping):
            for key, value in item.items():
                stack.extend((str(key), value))
        elif isinstance(item, Sequence | set | frozenset):
            stack.extend(item)
    return None


def enforce(text: str, metadata: Mapping[str, MetadataValue] | None = None) -> None:
    """Raise StoreRefusal(CREDENTIAL_CONTENT | HIGH_RISK_INSTRUCTION_CONTENT) if refused."""
    reason = content_reason(text)
    if reason is None and metadata:
        reason = metadata_reason(metadata)
    if reason is not None:
        raise StoreRefusal(reason)
