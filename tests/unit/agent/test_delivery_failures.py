"""Which failed deliveries an agent retries soon (a replica asked again within 2 s) and which back off."""

from __future__ import annotations

import pytest

from colocation.agent.delivery import DeliveryFailed


@pytest.mark.parametrize("reason", ["unavailable", "timeout", "unreachable", "http-500", "http-504", "http-429"])
def test_a_leader_out_of_reach_or_failing_is_transient(reason: str) -> None:
    # A leader whose checks time out while kube-apiserver is frozen answers 5xx: a refusal would
    # have pushed the agent's next try toward 30 s, past the thaw.
    assert DeliveryFailed(reason, "x").transient


@pytest.mark.parametrize("reason", ["http-400", "http-403", "http-404", "http-422"])
def test_a_refused_request_is_not(reason: str) -> None:
    assert not DeliveryFailed(reason, "x").transient
