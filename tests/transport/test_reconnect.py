"""The reconnect policy (``transport._reconnect.ReconnectPolicy``) with a fake clock and jitter."""

from __future__ import annotations

import pytest

from transport._reconnect import EXPIRED_RETRIES, ReconnectPolicy
from transport.errors import PROTOCOL_ERROR, TOKEN_EXPIRED, UNAUTHORIZED


def policy(*, jitter: float = 1.0, provider: bool = False) -> ReconnectPolicy:
    return ReconnectPolicy(
        jitter=lambda: jitter, backoff_initial=0.05, backoff_max=0.4, token_provider=provider
    )


def test_the_backoff_doubles_up_to_its_cap_and_starts_again_after_a_connect() -> None:
    p = policy()
    now = 100.0
    waits = []
    for _ in range(6):
        at = p.next_try_at(now, restarting=False)
        waits.append(round(at - now, 6))
        now = at
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.4, 0.4]
    p.ended()  # a socket that was up closed as usual
    assert p.next_try_at(now, restarting=False) == pytest.approx(now + 0.05)


def test_the_jitter_spreads_a_wait_between_half_of_it_and_all_of_it() -> None:
    assert policy(jitter=0.0).next_try_at(0.0, restarting=False) == pytest.approx(0.025)
    assert policy(jitter=0.5).next_try_at(0.0, restarting=False) == pytest.approx(0.0375)


def test_after_a_relay_restart_the_first_try_goes_at_once_and_the_next_backs_off() -> None:
    p = policy()
    assert p.next_try_at(7.0, restarting=True) == 7.0
    assert p.next_try_at(7.0, restarting=True) == pytest.approx(7.1)  # that try failed too


def test_a_welcome_before_the_error_starts_the_backoff_again() -> None:
    p = policy()
    for _ in range(3):
        p.next_try_at(0.0, restarting=False)
    assert not p.failed(PROTOCOL_ERROR, welcomed=True, started=True)
    assert p.next_try_at(0.0, restarting=False) == pytest.approx(0.05)


def test_unauthorized_is_final_and_other_errors_are_final_only_before_the_first_connect() -> None:
    assert policy().failed(UNAUTHORIZED, welcomed=False, started=True)
    assert policy().failed(PROTOCOL_ERROR, welcomed=False, started=False)
    assert not policy().failed(PROTOCOL_ERROR, welcomed=False, started=True)


def test_an_expired_token_is_final_without_a_provider() -> None:
    assert policy().failed(TOKEN_EXPIRED, welcomed=False, started=True)


def test_with_a_provider_expired_tokens_go_again_a_few_times_in_a_row() -> None:
    p = policy(provider=True)
    for _ in range(EXPIRED_RETRIES):
        assert not p.failed(TOKEN_EXPIRED, welcomed=False, started=False)
    assert p.failed(TOKEN_EXPIRED, welcomed=False, started=True)
    q = policy(provider=True)
    for _ in range(EXPIRED_RETRIES * 2):  # a connect that gets through each time
        assert not q.failed(TOKEN_EXPIRED, welcomed=True, started=True)


def test_the_provider_is_asked_before_every_try_but_a_first_one_with_a_token() -> None:
    p = policy(provider=True)
    assert p.start(has_token=True) is False
    assert p.start(has_token=True) is True
    q = policy(provider=True)
    assert q.start(has_token=False) is True
    assert policy().start(has_token=False) is False  # no provider to ask
