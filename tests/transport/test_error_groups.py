"""Error codes grouped by what the caller should do, each still a ``RunwireError``."""

from __future__ import annotations

import pickle

import pytest

from transport import errors
from transport.errors import (
    ERROR_GROUPS,
    CredentialsError,
    FinalError,
    RequestError,
    RetryableError,
    RunwireError,
)


@pytest.mark.parametrize(
    ("code", "group"),
    [
        (errors.RATE_LIMITED, RetryableError),
        (errors.STORE_UNAVAILABLE, RetryableError),
        (errors.TOKEN_EXPIRED, CredentialsError),
        (errors.UNAUTHORIZED, CredentialsError),
        (errors.VALIDATION_ERROR, RequestError),
        (errors.INTERRUPT_ANSWER_INVALID, RequestError),
        (errors.RUN_NOT_ACTIVE, FinalError),
        (errors.INTERRUPT_EXPIRED, FinalError),
    ],
)
def test_an_error_is_built_as_its_codes_group_and_stays_a_runwire_error(
    code: str, group: type[RunwireError]
) -> None:
    error = RunwireError(code, "why", details={"k": 1})
    assert type(error) is group
    assert error.code == code and error.details == {"k": 1}
    with pytest.raises(RunwireError):
        raise error
    assert type(RunwireError.from_wire(error.to_wire())) is group


def test_every_wire_code_has_exactly_one_group() -> None:
    codes = {v for k, v in vars(errors).items() if k.isupper() and isinstance(v, str)}
    grouped = [c for members in ERROR_GROUPS.values() for c in members]
    assert len(grouped) == len(set(grouped))
    assert codes <= set(grouped)


def test_an_unknown_code_gives_a_plain_error_and_copies_keep_the_code() -> None:
    assert type(RunwireError("SOMETHING_NEW")) is RunwireError
    error = RunwireError(errors.CONFLICT, "raced", details={"n": 2})
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is RetryableError and again == error


def test_the_errors_reference_page_shows_every_group_with_its_codes() -> None:
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs/reference/errors.md").read_text()
    for group, codes in ERROR_GROUPS.items():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{group.__name__}`"))
        assert {c.strip(" `") for c in row.rsplit("|", 2)[1].split(",")} == set(codes)
