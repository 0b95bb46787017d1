"""``ors_gym._runtime.Runtime``: the one way blocking code runs the async core."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from ors_gym._runtime import Runtime

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    rt = Runtime("test")
    yield rt
    rt.close()


async def _value(x: int) -> int:
    await asyncio.sleep(0)
    return x


def test_runs_a_coroutine_in_the_calling_thread(runtime: Runtime) -> None:
    async def where() -> threading.Thread:
        return threading.current_thread()

    assert runtime.run(where()) is threading.current_thread()
    assert runtime.run(_value(3)) == 3


def test_a_task_left_pending_goes_on_after_the_call(runtime: Runtime) -> None:
    finished = threading.Event()

    async def finish() -> None:
        await asyncio.sleep(0.01)  # wakes on a timer nobody's call is waiting for
        finished.set()

    async def start() -> None:
        asyncio.get_running_loop().create_task(finish())

    runtime.run(start())
    assert finished.wait(10)  # the background driver ran it: no call came


def test_works_inside_a_running_loop(runtime: Runtime) -> None:
    async def notebook_cell() -> int:
        outer = asyncio.get_running_loop()
        result = runtime.run(_value(7))
        assert asyncio.get_running_loop() is outer  # the caller's loop is restored
        return result

    assert asyncio.run(notebook_cell()) == 7


def test_calling_from_its_own_loop_is_refused(runtime: Runtime) -> None:
    async def nested() -> None:
        coro = _value(1)
        with pytest.raises(RuntimeError, match="would deadlock"):
            runtime.run(coro)

    runtime.run(nested())


def test_many_threads_at_once(runtime: Runtime) -> None:
    results: dict[int, list[int]] = {}

    def worker(k: int) -> None:
        results[k] = [runtime.run(_value(k * 100 + i)) for i in range(50)]

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == {k: [k * 100 + i for i in range(50)] for k in range(8)}


def test_close_ends_the_background_driver() -> None:
    rt = Runtime("closing")
    ran = threading.Event()

    async def later() -> None:
        await asyncio.sleep(0.01)
        ran.set()

    async def start() -> None:
        asyncio.get_running_loop().create_task(later())

    rt.run(start())
    rt.drive_in_background()
    assert ran.wait(10)
    driver = rt._driver
    assert driver is not None
    rt.close()
    driver.join(10)
    assert not driver.is_alive()
    assert rt.run(_value(2)) == 2  # reusable after close
    rt.close()
