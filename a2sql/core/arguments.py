"""Input checks, identical on every engine.

Everything is checked before a transaction opens, so a rejected call writes
nothing. JSON values are encoded here, once: the text that was measured
against the size limit is the text that is stored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from a2sql.core.errors import invalid
from a2sql.core.jsontext import encode_json

MAX_NAME_LENGTH = 255
MAX_JSON_DEPTH = 256
DEFAULT_MAX_JSON_CHARS = 1024 * 1024
MAX_LIMIT = 1000
# Python refuses to print integers past 4300 digits by default; stay well
# inside. (The limit can be lowered: jsontext reads and writes such integers
# without it.)
MAX_JSON_INT_BITS = 13_000
# Below this many bits an int prints in fewer digits than the smallest limit
# Python can be set to (640 digits), so a message can show it whole.
_PRINTABLE_INT_BITS = 2_000
INT64_MAX = 2**63 - 1
MAX_TTL_MS = 100 * 365 * 24 * 3600 * 1000
# exclude_indexes must fit one statement's bound parameters on every engine.
MAX_EXCLUDED = 10_000
# The longest wait a2sql accepts between polls: a day (threading and asyncio
# refuse timeouts past a few hundred years; nobody means one that long).
MAX_WAIT_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Limits:
    """Configurable bounds on what a store accepts."""

    max_json_chars: int = DEFAULT_MAX_JSON_CHARS


def _check_text(value: str, argument: str) -> None:
    if "\x00" in value:
        raise invalid(argument, "must not contain a NUL character")
    if value.isascii():  # no surrogate: skip encoding it to find out
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(argument, "must not contain a lone surrogate") from None


def name(value: object, argument: str) -> str:
    """A session id, event id, type, lane, holder, reducer name, namespace, participant or field."""
    if not isinstance(value, str):
        raise invalid(argument, f"must be a str, got {type(value).__name__}")
    if not value:
        raise invalid(argument, "must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise invalid(argument, f"must be at most {MAX_NAME_LENGTH} characters, got {len(value)}")
    _check_text(value, argument)
    return value


def checked_ids(ids: Callable[[], object]) -> Callable[[], str]:
    """``ids`` whose every event id is held to the rules of an id a caller gives."""

    def make_id() -> str:
        return name(ids(), "ids (the event id the ids callable returned)")

    return make_id


def optional_name(value: object, argument: str) -> str | None:
    return None if value is None else name(value, argument)


def text(value: object, argument: str, limits: Limits) -> str:
    """Free text such as an error message: any length up to the JSON size limit."""
    if not isinstance(value, str):
        raise invalid(argument, f"must be a str, got {type(value).__name__}")
    # The length first: checking the characters of a huge text encodes it.
    if len(value) > limits.max_json_chars:
        raise invalid(argument, f"must be at most {limits.max_json_chars} characters")
    _check_text(value, argument)
    return value


def shown_int(value: int) -> str:
    """``value`` as a message shows it: whole, or its size when it has too many digits
    to print (Python refuses past ``sys.get_int_max_str_digits()``, 4300 by default)."""
    bits = value.bit_length()
    if bits <= _PRINTABLE_INT_BITS:
        return str(int(value))
    kind = "a negative int" if value < 0 else "an int"
    return f"{kind} of about {int(bits * math.log10(2)) + 1} digits"


def integer(value: object, argument: str, *, minimum: int, maximum: int = INT64_MAX) -> int:
    """An ``int`` (never a ``bool``) within ``minimum..maximum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(argument, f"must be an int, got {type(value).__name__}")
    if value < minimum or value > maximum:
        raise invalid(argument, f"must be between {minimum} and {maximum}, got {shown_int(value)}")
    return value


def seconds(value: object, argument: str, *, maximum: float = MAX_WAIT_S) -> float:
    """A positive, finite number of seconds (an ``int`` or ``float``) up to ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(argument, f"must be a number of seconds, got {type(value).__name__}")
    # Compared as given: float() of an int past 1e308 would raise OverflowError.
    if not value > 0 or not value <= maximum:
        shown = shown_int(value) if isinstance(value, int) else repr(float(value))
        raise invalid(argument, f"must be more than 0 and at most {maximum:g} seconds, got {shown}")
    return float(value)


def limit(value: object, argument: str = "limit") -> int:
    return integer(value, argument, minimum=1, maximum=MAX_LIMIT)


def aware_datetime(value: object, argument: str) -> datetime:
    """A timezone-aware datetime whose UTC time lies in years 1 to 9999."""
    if not isinstance(value, datetime):
        raise invalid(argument, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise invalid(argument, "must be timezone-aware")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise invalid(argument, "lies outside the years 1 to 9999 in UTC") from None
    return value


def ttl(value: object, argument: str = "ttl_ms") -> int:
    """A lifetime in milliseconds: at least 1, at most a hundred years."""
    return integer(value, argument, minimum=1, maximum=MAX_TTL_MS)


def expiry(now: datetime, ttl_ms: int, argument: str = "ttl_ms") -> datetime:
    """``now + ttl_ms``, refused when it would pass the year 9999."""
    try:
        return now + timedelta(milliseconds=ttl_ms)
    except OverflowError:
        raise invalid(argument, f"puts the expiry past the year 9999 (now is {now})") from None


class Lease(NamedTuple):
    """A claim's lease, checked: a length from the time the claim records (``ttl_ms``),
    or a time given (``expires_at``); one of the two is ``None``."""

    ttl_ms: int | None
    expires_at: datetime | None

    def at(self, now: datetime) -> datetime:
        """When a claim taken at ``now`` expires."""
        if self.expires_at is not None:
            return self.expires_at
        assert self.ttl_ms is not None
        return expiry(now, self.ttl_ms)


def short_sequence(value: object, argument: str, *, limit: int) -> Sequence[Any]:
    """A list of at most ``limit`` items (each becomes a bound parameter of one statement)."""
    items = sequence(value, argument)
    if len(items) > limit:
        raise invalid(argument, f"must hold at most {limit} items, got {len(items)}")
    return items


# Values that are JSON whatever they hold (strings are checked for lone
# surrogates once, on the encoded text).
_LEAVES = frozenset({str, bool, type(None)})


def _leaf_size(leaf: object) -> int:
    """The fewest characters a leaf encodes to: a str its quotes and characters
    (escapes only add), ``null``/``true``/``false`` at least 4."""
    return len(leaf) + 2 if isinstance(leaf, str) else 4


def _check_json(value: object, argument: str, depth: int) -> int:
    """Check that ``value`` is JSON; return a lower bound of its encoded length.

    The bound costs no encoding: a value far over the size limit is refused
    before the encoder makes (and the limit measures) text of its size.
    """
    # Exact types first: a payload is mostly dicts, lists, strings and numbers.
    if type(value) in _LEAVES:
        return _leaf_size(value)
    if type(value) is int:
        if value.bit_length() > MAX_JSON_INT_BITS:
            raise invalid(argument, "holds an integer too large to store")
        return 1
    if type(value) is float:
        if not math.isfinite(value):
            raise invalid(argument, f"holds a non-finite float ({value})")
        return 1
    if type(value) is dict or type(value) is list:
        if depth >= MAX_JSON_DEPTH:
            raise invalid(argument, f"is nested deeper than {MAX_JSON_DEPTH} levels")
        items: Iterable[object] = value
        # A lower bound of the encoded length: the brackets and separators,
        # every item at least one character (a string its characters more, a
        # container its own bound), every key its characters, quotes and colon.
        size = 2 * len(value) + 1
        if type(value) is dict:
            for key in value:
                if not isinstance(key, str):
                    raise invalid(argument, f"has a non-str object key ({type(key).__name__})")
            size += sum(map(len, value)) + 3 * len(value)
            items = value.values()
        for item in items:
            if type(item) is str:
                size += len(item)
            elif type(item) not in _LEAVES:
                size += _check_json(item, argument, depth + 1) - 1
        return size
    # Subclasses of str, int and float (enums, say) are JSON as their base
    # type; of list and dict they are not.
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, int):
        return _check_json(int(value), argument, depth)
    if isinstance(value, float):
        return _check_json(float(value), argument, depth)
    raise invalid(argument, f"is not JSON: holds a {type(value).__name__}")


def json_value(value: object, argument: str, limits: Limits) -> str:
    """Check that ``value`` is JSON and return its encoded text."""
    at_least = _check_json(value, argument, 0)
    if at_least > limits.max_json_chars:
        raise invalid(
            argument,
            f"encodes to at least {at_least} characters, over the {limits.max_json_chars} limit",
        )
    encoded = encode_json(value)
    if not encoded.isascii():
        try:
            encoded.encode("utf-8")
        except UnicodeEncodeError:
            raise invalid(argument, "holds a string or object key with a lone surrogate") from None
    if len(encoded) > limits.max_json_chars:
        raise invalid(
            argument,
            f"encodes to {len(encoded)} characters, over the {limits.max_json_chars} limit",
        )
    return encoded


def sequence(value: object, argument: str) -> Sequence[Any]:
    """A list or tuple argument (not a str, not a mapping)."""
    if type(value) is list or type(value) is tuple:  # the common case, without ABC checks
        return value
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise invalid(argument, f"must be a list, got {type(value).__name__}")
    return value


def mapping(value: object, argument: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise invalid(argument, f"must be a dict, got {type(value).__name__}")
    return value
