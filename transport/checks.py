"""Input checks: what may refuse a user's message before it reaches a model, without I/O.

A check is a callable, plain or async, ``check(message: UIMessage) -> None``. It raises
``RunwireError(code, ...)`` to refuse the message. ``first_refusal(checks, message)`` runs checks
in order and returns the first refusal, or ``None``. Any other exception refuses the message with
``CHECK_FAILED``, so a broken check never lets a message through.

The relay runs checks on every message entry, and the agent on its Run's prompt and queued
messages. For a refused queued message, both publish the entry ``refusal_entry`` builds. It names
the message and the error, never the text.

The shipped checks are factories that return a check. ``pii()`` refuses with ``PII_DETECTED``,
``prompt_injection()`` with ``PROMPT_INJECTION_DETECTED`` and ``content_filter()`` with
``LLM_CONTENT_FILTERED``. ``CHECKS`` maps their command-line names to them, and ``named(name)``
builds one.

See docs/explanation/input-checks.md for where checks run and what each one looks for.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from .errors import LLM_CONTENT_FILTERED, RunwireError
from .frames import ErrorBody, MessageEntry, RefusedEntry
from .messages import TextPart, UIMessage

__all__ = [
    "BLOCKED_TERM",
    "CHECKS",
    "CHECK_FAILED",
    "CONTENT_CATEGORIES",
    "LLM_CONTENT_FILTERED",
    "PII_DETECTED",
    "PII_TYPES",
    "PROMPT_INJECTION_DETECTED",
    "Check",
    "as_refusal",
    "content_filter",
    "find_pii",
    "first_refusal",
    "iban_valid",
    "luhn_valid",
    "named",
    "pii",
    "prompt_injection",
    "refusal_entry",
    "refusal_entry_id",
]

Check = Callable[[UIMessage], "Awaitable[None] | None"]
"""``check(message)``: returns to let the message through, raises ``RunwireError`` to refuse."""

PII_DETECTED = "PII_DETECTED"
"""The message contains personal data (``details.types`` says which kinds)."""
PROMPT_INJECTION_DETECTED = "PROMPT_INJECTION_DETECTED"
"""The message looks like a prompt injection (``details.threats`` says which patterns)."""
CHECK_FAILED = "CHECK_FAILED"
"""An input check raised something other than ``RunwireError``; the message is refused."""

PII_TYPES: tuple[str, ...] = ("email", "phone", "card", "iban")

# ----------------------------------------------------------------- running --


async def first_refusal(checks: Iterable[Check], message: UIMessage) -> RunwireError | None:
    """Run ``checks`` in order on ``message``; the first refusal, or ``None``."""
    for check in checks:
        try:
            result = check(message)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            return as_refusal(check, exc)
    return None


def as_refusal(check: Check, exc: Exception) -> RunwireError:
    """The refusal for what a check raised: a ``RunwireError`` as is, else ``CHECK_FAILED``."""
    if isinstance(exc, RunwireError):
        return exc
    name = getattr(check, "__name__", type(check).__name__)
    return RunwireError(
        CHECK_FAILED,
        f"the input check {name} failed, so the message was refused: {exc!r}",
        details={"check": name},
    )


def refusal_entry_id(message_id: str) -> str:
    """The id of the ``refused`` entry for a message (the same wherever it is made)."""
    if len(message_id) <= 180:
        return f"refused.{message_id}"
    return "refused." + hashlib.sha256(message_id.encode()).hexdigest()


def refusal_entry(entry: MessageEntry, error: RunwireError) -> RefusedEntry:
    """The ``refused`` entry recording that ``entry``'s message was refused with ``error``."""
    return RefusedEntry(
        id=refusal_entry_id(entry.message.id),
        run_id=entry.run_id,
        message_id=entry.message.id,
        intent=entry.intent,
        error=ErrorBody(code=error.code, message=error.message, details=error.details),
    )


def _text(message: UIMessage) -> str:
    return "\n".join(p.text for p in message.parts if isinstance(p, TextPart))


# --------------------------------------------------------------------- PII --

_EMAIL = re.compile(
    r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
)
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{1,5}\)[\s.-]?)?\d{1,8}(?:[\s.-]\d{2,8}){1,6}(?![\w])"
    r"|(?<![\w+])\+\d{8,15}(?![\w])"
)
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DIGIT_RUN = re.compile(r"(?<![\d])\d+(?:[ -]\d+)*(?![\d])")
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{2}\d{2}(?:[ ]?[A-Za-z0-9]){11,32}")

IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24,
    "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SC": 31,
    "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip
"""IBAN lengths by country (the SWIFT IBAN registry); other countries: 15 to 34."""


def luhn_valid(digits: str) -> bool:
    """True if ``digits`` (digits only) passes the Luhn check."""
    if not digits.isdigit():
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = ord(ch) - 48
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def iban_valid(iban: str) -> bool:
    """True if ``iban`` (no spaces) has a country code, check digits and passes mod-97."""
    iban = iban.upper()
    if not (15 <= len(iban) <= 34) or not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]+", iban):
        return False
    known = IBAN_LENGTHS.get(iban[:2])
    if known is not None and known != len(iban):
        return False
    rearranged = iban[4:] + iban[:4]
    number = "".join(str(int(ch, 36)) for ch in rearranged)
    return int(number) % 97 == 1


def _has_card(text: str) -> bool:
    for match in _DIGIT_RUN.finditer(text):
        groups = re.split(r"[ -]", match.group())
        for start in range(len(groups)):
            digits = ""
            for end in range(start, len(groups)):
                # Inside a grouped number every group but the last has 3+ digits.
                if end > start and len(groups[end - 1]) < 3:
                    break
                digits += groups[end]
                if len(digits) > 19:
                    break
                if len(digits) >= 13 and luhn_valid(digits):
                    return True
    return False


def _iban_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for match in _IBAN.finditer(text):
        compact = match.group().replace(" ", "").upper()
        known = IBAN_LENGTHS.get(compact[:2])
        lengths = [known] if known is not None else range(min(len(compact), 34), 14, -1)
        for length in lengths:
            if len(compact) >= length and iban_valid(compact[:length]):
                spans.append(match.span())
                break
    return spans


def _has_phone(text: str, skip: list[tuple[int, int]]) -> bool:
    for match in _PHONE.finditer(text):
        if any(a <= match.start() < b for a, b in skip):
            continue  # the digits of an IBAN
        found = match.group()
        if _ISO_DATE.search(found):
            continue
        digits = re.sub(r"\D", "", found)
        # A grouped card number looks like a phone too: it counts as a card only.
        if 9 <= len(digits) <= 15 and not (len(digits) >= 13 and luhn_valid(digits)):
            return True
    return False


def find_pii(text: str, types: Sequence[str] = PII_TYPES) -> list[str]:
    """The kinds of personal data in ``text``, in ``PII_TYPES`` order."""
    found: list[str] = []
    if "email" in types and _EMAIL.search(text):
        found.append("email")
    ibans = _iban_spans(text) if "iban" in types or "phone" in types else []
    if "phone" in types and _has_phone(text, ibans):
        found.append("phone")
    if "card" in types and _has_card(text):
        found.append("card")
    if "iban" in types and ibans:
        found.append("iban")
    return found


def pii(mode: str = "block", *, types: Sequence[str] = PII_TYPES) -> Check:
    """A check refusing messages with personal data (``PII_DETECTED``).

    ``mode`` is ``"block"`` (the only mode: refuse the message). ``types``
    narrows what is looked for. Raises ``ValueError`` for another mode or an
    unknown type.
    """
    if mode != "block":
        raise ValueError(f"pii mode must be 'block', not {mode!r}")
    unknown = set(types) - set(PII_TYPES)
    if unknown:
        raise ValueError(f"unknown PII types: {', '.join(sorted(unknown))}")
    wanted = tuple(types)

    def check_pii(message: UIMessage) -> None:
        found = find_pii(_text(message), wanted)
        if found:
            raise RunwireError(
                PII_DETECTED,
                f"The input contains personal data: {', '.join(found)}",
                details={"types": found},
            )

    return check_pii


# -------------------------------------------------------- prompt injection --

INJECTION_PATTERNS: dict[str, str] = {
    "instruction_override": (
        r"\b(?:ignore|disregard|forget|override|bypass|skip)\b[^.\n]{0,40}?"
        r"\b(?:previous|prior|above|earlier|preceding|all|any|your|system)\b[^.\n]{0,20}?"
        r"\b(?:instructions?|prompts?|rules|directions|guidelines|directives)\b"
    ),
    "prompt_leak": (
        r"\b(?:reveal|show|print|repeat|output|display|leak|tell me)\b[^.\n]{0,30}?"
        r"\b(?:(?:the|your) (?:system|hidden|initial|original) (?:prompt|instructions)"
        r"|system prompt|your (?:instructions|prompt|rules))\b"
    ),
    "role_hijack": (
        r"\byou are now\b[^.\n]{0,40}?\b(?:DAN|unrestricted|jailbroken|unfiltered|evil|"
        r"in developer mode|free of (?:all )?(?:rules|restrictions))"
        r"|\b(?:act|pretend|behave|roleplay)\b[^.\n]{0,20}?\b(?:as|to be|like)\b[^.\n]{0,30}?"
        r"\b(?:unrestricted|jailbroken|unfiltered|without (?:any )?(?:rules|restrictions|filters))"
        r"|\bdeveloper mode\b|\bjailbreak(?:ing|ed)?\b|\bDAN mode\b"
    ),
    "delimiter_injection": (
        r"<\|(?:im_start|im_end|system|endoftext|assistant|user)\|>"
        r"|\[/?INST\]|<</?SYS>>"
        r"|(?m:^\s*(?:###|\[)\s*(?:system|assistant)\s*(?:\]|:))"
    ),
}
"""The threat types ``prompt_injection()`` looks for, with their patterns (case-insensitive)."""


def prompt_injection(*, patterns: Mapping[str, str] | None = None) -> Check:
    """A check refusing likely prompt injections (``PROMPT_INJECTION_DETECTED``).

    ``patterns`` replaces the threat patterns (name -> regular expression,
    matched case-insensitively); by default ``INJECTION_PATTERNS``.
    """
    compiled = {
        name: re.compile(pattern, re.IGNORECASE)
        for name, pattern in (patterns or INJECTION_PATTERNS).items()
    }

    def check_prompt_injection(message: UIMessage) -> None:
        text = _text(message)
        threats = [name for name, rx in compiled.items() if rx.search(text)]
        if threats:
            raise RunwireError(
                PROMPT_INJECTION_DETECTED,
                f"Prompt injection detected: {', '.join(threats)}",
                details={"threats": threats},
            )

    return check_prompt_injection


# ---------------------------------------------------------- content filter --

CONTENT_CATEGORIES: dict[str, str] = {
    "weapons": (
        r"\b(?:how (?:do i|can i|to|would i)|steps? to|instructions? (?:for|to)|recipe for|"
        r"help me)\b[^.\n]{0,30}?\b(?:make|build|assemble|synthesi[sz]e|produce|brew|cook)\b"
        r"[^.\n]{0,30}?\b(?:(?:pipe |nail |car |fertili[sz]er )?bombs?|explosives?|"
        r"nerve (?:agent|gas)|sarin|vx|ricin|anthrax|bio-?weapons?|chemical weapons?|"
        r"dirty bomb|napalm|thermite charge)\b(?!-)"
    ),
    "self_harm": (
        r"\b(?:how (?:do i|can i|to|should i)|best (?:way|method)s? to|ways? to|help me)\b"
        r"[^.\n]{0,20}?\b(?:kill|hurt|harm|cut|poison|hang) (?:myself|me)\b"
        r"|\b(?:commit suicide|end my (?:own )?life|take my (?:own )?life)\b"
    ),
    "violent_threat": (
        r"\bi(?:'m| am)? (?:going to|gonna|will)\b[^.\n]{0,20}?\b(?:kill|murder|shoot|stab|"
        r"behead|bomb)\b[^.\n]{0,10}?\b(?:you|him|her|them|everyone|everybody|people)\b"
    ),
    "sexual_minors": (
        r"\b(?:child|children|minors?|underage|preteens?|\d{1,2}[- ]?y(?:ea)?r[- ]?olds?)\b"
        r"[^.\n]{0,30}?\b(?:porn\w*|nudes?|sexual(?:ly|i[sz]ed?)?(?!\s+(?:education|health|development|abuse))|erotic\w*)\b"
        r"|\b(?:porn\w*|nudes?|sexual(?:ly|i[sz]ed?)?(?!\s+(?:education|health|development|abuse))|erotic\w*)\b[^.\n]{0,30}?"
        r"\b(?:child|children|minors?|underage|preteens?|\d{1,2}[- ]?y(?:ea)?r[- ]?olds?)\b"
    ),
}
"""The categories ``content_filter()`` looks for by default, with their patterns
(case-insensitive). They catch plain requests for serious harm; they are a first
line, not a moderation model."""

BLOCKED_TERM = "blocked_term"
"""The category a refusal names when one of the ``blocked_terms`` matched."""


def content_filter(
    *,
    categories: Sequence[str] | None = None,
    blocked_terms: Sequence[str] = (),
    patterns: Mapping[str, str] | None = None,
) -> Check:
    """A check refusing harmful content (``LLM_CONTENT_FILTERED``).

    ``categories`` picks among ``CONTENT_CATEGORIES`` (default: all of them).
    ``blocked_terms`` are words or phrases refused wherever they stand as whole
    words, in any case (category ``blocked_term``). ``patterns`` adds categories
    of your own (name -> regular expression, matched case-insensitively).
    ``details.categories`` lists what matched, in that order; the error never
    quotes the text. Raises ``ValueError`` for an unknown category, an empty
    term or a pattern that does not compile.
    """
    chosen = list(CONTENT_CATEGORIES) if categories is None else list(categories)
    unknown = set(chosen) - set(CONTENT_CATEGORIES)
    if unknown:
        raise ValueError(
            f"unknown content categories: {', '.join(sorted(unknown))}; "
            f"known: {', '.join(CONTENT_CATEGORIES)}"
        )
    compiled: dict[str, re.Pattern[str]] = {
        name: re.compile(CONTENT_CATEGORIES[name], re.IGNORECASE) for name in chosen
    }
    for name, pattern in (patterns or {}).items():
        try:
            compiled[name] = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"content filter pattern {name!r} does not compile: {exc}") from None
    terms = [t.strip() for t in blocked_terms]
    if any(not t for t in terms):
        raise ValueError("a blocked term must not be empty")
    if terms:
        alternatives = "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True))
        compiled[BLOCKED_TERM] = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)

    def check_content_filter(message: UIMessage) -> None:
        text = _text(message)
        found = [name for name, rx in compiled.items() if rx.search(text)]
        if found:
            raise RunwireError(
                LLM_CONTENT_FILTERED,
                f"The input was refused by the content filter: {', '.join(found)}",
                details={"categories": found},
            )

    return check_content_filter


# ---------------------------------------------------------------- by name --

CHECKS: dict[str, Callable[[], Check]] = {
    "content_filter": content_filter,
    "pii": pii,
    "prompt_injection": prompt_injection,
}
"""The checks ``runwire relay --check NAME`` knows, by name."""


def named(name: str, **options: Any) -> Check:
    """Build the shipped check called ``name``; raises ``ValueError`` for an unknown name."""
    factory: Any = CHECKS.get(name)
    if factory is None:
        raise ValueError(f"unknown input check {name!r}; known: {', '.join(sorted(CHECKS))}")
    check: Check = factory(**options)
    return check
