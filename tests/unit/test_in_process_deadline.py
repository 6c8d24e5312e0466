"""An in-process call (a server of this process answering without HTTP) ends by its deadline as an HTTP call would,
and its deadline never touches the caller afterwards: a call that answered leaves no cancellation behind, and a
caller's own cancel stays a cancel, not a timeout."""

import asyncio
import time

import orjson
import pytest
import uvloop

from nemo_gym.failures import FailureClass, RequestFailed
from nemo_gym.http_client import HttpClient

URL = "http://127.0.0.1:9/route"  # never connected to: every call here is answered in process


async def _echo(raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    return 200, orjson.dumps({"got": orjson.loads(raw), "session": headers.get("x-session")})


class _Hangs:
    """An answer that never comes; `entered` is set once a call waits on it."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def __call__(self, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        self.entered.set()
        await asyncio.Event().wait()
        return 200, b"{}"


def test_an_answered_call_returns_a_copy_and_leaves_no_deadline_behind() -> None:
    async def main() -> None:
        body = {"input": [1, 2]}
        reply = await HttpClient().post_json(URL, body, in_process=_echo, headers={"x-session": "s"}, timeout_s=0.01)
        assert reply == {"got": body, "session": "s"}
        assert reply["got"] is not body
        # Past the call's deadline: a timer left armed would cancel this task here.
        await asyncio.sleep(0.1)
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    asyncio.run(main())


def test_an_answer_that_never_comes_is_a_timeout_and_the_caller_goes_on() -> None:
    async def main() -> None:
        with pytest.raises(RequestFailed) as failed:
            await HttpClient().post_json(URL, {}, in_process=_Hangs(), timeout_s=0.05)
        assert failed.value.failure_class == FailureClass.TIMEOUT
        assert "no reply within 0.05 s" in failed.value.message
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
        await asyncio.sleep(0)  # the task takes no cancellation of the deadline's with it

    asyncio.run(main())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("meets_the_deadline", [False, True])
def test_a_callers_cancel_during_the_call_stays_a_cancel(loop: str, meets_the_deadline: bool) -> None:
    """With `meets_the_deadline`, the loop is blocked past the deadline right after the caller's cancel, so the
    timer and the task's wake-up fall in one loop turn (in whichever order the loop runs them)."""
    async def main() -> None:
        hangs = _Hangs()
        call = asyncio.create_task(HttpClient().post_json(URL, {}, in_process=hangs,
                                                          timeout_s=0.01 if meets_the_deadline else 60))
        await hangs.entered.wait()
        call.cancel()
        if meets_the_deadline:
            time.sleep(0.05)  # blocks the loop: the deadline passes before the task runs again
        with pytest.raises(asyncio.CancelledError):
            await call

    (uvloop.run if loop == "uvloop" else asyncio.run)(main())
