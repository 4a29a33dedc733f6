"""The one poll loop of the benchmarks and the tests: what it returns, when it gives up, what it raises."""

from __future__ import annotations

import itertools

import pytest

from benchmarks.polling import NotReached, eventually, eventually_async


def test_the_first_truthy_answer_is_returned() -> None:
    answers = iter([None, 0, "", "ready"])
    assert eventually(lambda: next(answers), 10, interval=0) == "ready"


def test_a_condition_that_never_holds_fails_with_its_message_and_last_answer() -> None:
    counts = itertools.count()
    with pytest.raises(NotReached, match=r"^a count above a billion: not within 0.05 s \(last: False\)$"):
        eventually(lambda: next(counts) > 10**9, 0.05, interval=0.01, message="a count above a billion")


def test_the_failure_is_a_timeout_for_the_benchmarks_and_an_assertion_for_the_tests() -> None:
    with pytest.raises(TimeoutError):
        eventually(lambda: None, 0, interval=0)
    with pytest.raises(AssertionError):
        eventually(lambda: None, 0, interval=0)


async def test_the_async_form_takes_a_coroutine_function_or_a_plain_one() -> None:
    answers = iter([False, False, 42])

    async def answer() -> int | bool:
        return next(answers)

    assert await eventually_async(answer, 10, interval=0) == 42
    flags = iter([False, True])
    assert await eventually_async(lambda: next(flags), 10, interval=0) is True
    with pytest.raises(NotReached, match=r"^condition: not within 0 s \(last: \[\]\)$"):
        await eventually_async(lambda: [], 0)
