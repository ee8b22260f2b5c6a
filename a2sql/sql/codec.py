"""Rows to records and back: causes, returned ids, JSON payloads, timestamps."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from a2sql.core.errors import A2Error, ErrorCode
from a2sql.core.jsontext import decode_json, encode_json
from a2sql.core.records import JSON, EventCause, StoredEvent


def truncate_ms(value: datetime) -> datetime:
    """An aware time as stored: in UTC, to the millisecond.

    Cut in UTC, not in the value's own zone: a UTC offset may have a
    sub-millisecond part, and every engine must keep the same instant.
    """
    utc = value.astimezone(UTC)
    return utc - timedelta(microseconds=utc.microsecond % 1000)


def encode_cause(cause: EventCause | None) -> str | None:
    """The seed's encoding: ``{"index":…,"attempt":…[,"batchSize":…]}``."""
    if cause is None:
        return None
    if cause.batch_size is None:
        return f'{{"index":{cause.index},"attempt":{cause.attempt}}}'
    return f'{{"index":{cause.index},"attempt":{cause.attempt},"batchSize":{cause.batch_size}}}'


def _positive_int(value: Any) -> bool:
    return type(value) is int and value >= 1


def decode_cause(text: str | None, where: str) -> EventCause | None:
    if text is None:
        return None
    try:
        value = decode_json(text)
    except ValueError:
        value = None
    if (
        not isinstance(value, dict)
        or not _positive_int(value.get("index"))
        or not _positive_int(value.get("attempt"))
        or ("batchSize" in value and not _positive_int(value["batchSize"]))
    ):
        raise A2Error(ErrorCode.CORRUPT_RECORD, f"{where} has an invalid cause: {text!r}")
    return EventCause(value["index"], value["attempt"], value.get("batchSize"))


def encode_ids(ids: Sequence[str]) -> str:
    return encode_json(list(ids))


def decode_ids(text: str | None, where: str) -> list[str] | None:
    if text is None:
        return None
    try:
        value = decode_json(text)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise A2Error(ErrorCode.CORRUPT_RECORD, f"{where} has invalid returned event ids: {text!r}")
    return value


def canonical_json(value: JSON) -> str:
    """Equal for equal JSON values, types kept: ``1``, ``1.0`` and ``true`` differ."""
    return encode_json(value, sort_keys=True)


def _where(session_id: str, index: int) -> str:
    return f"event {index} of session {session_id!r}"


def stored_event(row: Sequence[Any]) -> StoredEvent:
    """A full ``a2_events`` row (every column, in table order) as a ``StoredEvent``."""
    (
        session_id,
        idx,
        event_type,
        payload,
        event_id,
        created_at,
        cause,
        lane,
        _lane_ready,
        processed_at,
        processed_by_attempt,
        returned_event_ids,
        first_claimed_at,
        last_claimed_at,
        attempt_count,
        failure_count,
        last_failed_at,
        last_failed_attempt,
        last_error,
        failed_at,
        claim_holder,
        claim_expires_at,
        wake_on,
    ) = row
    # Positional, in field order: this runs for every event read (~1 µs less).
    return StoredEvent(
        event_id,
        event_type,
        payload,
        idx,
        session_id,
        created_at,
        None if cause is None else decode_cause(cause, _where(session_id, idx)),
        lane,
        processed_at,
        processed_by_attempt,
        (
            None
            if returned_event_ids is None
            else decode_ids(returned_event_ids, _where(session_id, idx))
        ),
        first_claimed_at,
        last_claimed_at,
        attempt_count,
        failure_count,
        last_failed_at,
        last_failed_attempt,
        last_error,
        failed_at,
        claim_holder,
        claim_expires_at,
        wake_on,
    )


def claimed_event(row: Sequence[Any], session_id: str, *, holder: str) -> StoredEvent:
    """A ``StoredEvent`` just claimed: the columns the claim returns (ops.claims.CLAIM),
    and what it set itself."""
    (
        idx,
        event_type,
        payload,
        event_id,
        created_at,
        cause,
        lane,
        processed_by_attempt,
        returned_event_ids,
        first_claimed_at,
        attempt_count,
        failure_count,
        last_failed_at,
        last_failed_attempt,
        last_error,
        last_claimed_at,
        claim_expires_at,
    ) = row
    # The full row, in table order: only unprocessed, live events are claimed.
    return stored_event(
        (
            session_id,
            idx,
            event_type,
            payload,
            event_id,
            created_at,
            cause,
            lane,
            True,  # lane_ready
            None,  # processed_at
            processed_by_attempt,
            returned_event_ids,
            first_claimed_at,
            last_claimed_at,
            attempt_count,
            failure_count,
            last_failed_at,
            last_failed_attempt,
            last_error,
            None,  # failed_at
            holder,
            claim_expires_at,
            None,  # wake_on: a claim ends the wait
        )
    )
