"""``ors_gym._runtime.Runtime``: the one way blocking code runs the async core."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ors_gym import _runtime
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


# -- hand-offs ---------------------------------------------------------------------------------


def test_the_first_step_runs_in_the_caller_inside_a_task_of_the_private_loop(
    runtime: Runtime,
) -> None:
    async def first_step() -> tuple[bool, bool, threading.Thread]:
        async with asyncio.timeout(5):  # needs a current task
            task = asyncio.current_task()
            return (task is not None, asyncio.get_running_loop() is runtime.loop,
                    threading.current_thread())

    has_task, on_loop, thread = runtime.run(first_step())
    assert has_task and on_loop and thread is threading.current_thread()
    assert asyncio._get_running_loop() is None  # nothing left marked running


def test_a_call_that_waits_is_carried_to_its_end(runtime: Runtime) -> None:
    async def waits() -> int:
        await asyncio.sleep(0.01)
        await asyncio.sleep(0)
        return 5

    assert runtime.run(waits()) == 5


def test_each_call_runs_in_a_context_of_its_own(runtime: Runtime) -> None:
    var: contextvars.ContextVar[int] = contextvars.ContextVar("var", default=0)

    async def bump() -> int:
        var.set(var.get() + 1)
        return var.get()

    assert [runtime.run(bump()) for _ in range(3)] == [1, 1, 1]
    assert var.get() == 0


def test_an_exception_from_the_first_step_reaches_the_caller(runtime: Runtime) -> None:
    async def boom() -> None:
        raise KeyError("first step")

    with pytest.raises(KeyError, match="first step"):
        runtime.run(boom())
    assert runtime.run(_value(1)) == 1  # the runtime is fine afterwards


def test_inside_a_running_loop_the_outer_loop_is_restored_after_a_failure(
    runtime: Runtime,
) -> None:
    async def boom() -> None:
        await asyncio.sleep(0)
        raise ValueError("inner")

    async def notebook_cell() -> bool:
        outer = asyncio.get_running_loop()
        with pytest.raises(ValueError, match="inner"):
            runtime.run(boom())
        return asyncio.get_running_loop() is outer

    assert asyncio.run(notebook_cell())


def test_a_caller_arriving_while_the_background_driver_drives_is_served_then_drives(
    runtime: Runtime,
) -> None:
    stop = threading.Event()
    driving = threading.Event()

    async def background() -> None:
        while not stop.is_set():  # keeps the background driver busy on the loop
            driving.set()
            await asyncio.sleep(0.001)

    async def start() -> None:
        asyncio.get_running_loop().create_task(background())

    runtime.run(start())
    runtime.drive_in_background()
    assert driving.wait(10)
    driver = runtime._driver
    assert driver is not None and driver.is_alive()

    async def where() -> threading.Thread:
        await asyncio.sleep(0)
        return threading.current_thread()

    try:
        # Left with the driver: the call runs there, and the driver goes on driving.
        assert runtime.run(where(), leave_driver=True) is driver
        assert runtime.run(where(), leave_driver=True) is driver
        assert runtime.run(_value(4)) == 4  # joined onto the running loop, or taken over
        assert runtime.run(where()) is threading.current_thread()  # the caller drives again
    finally:
        stop.set()


def test_abandon_forgets_the_loop_and_makes_a_new_one(runtime: Runtime) -> None:
    old = runtime.loop
    runtime.abandon()
    assert runtime.run(_value(2)) == 2
    assert runtime.loop is not old
    assert not old.is_closed()  # left alone: it may belong to other threads


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_a_loop_of_its_own(runtime: Runtime) -> None:
    parent_loop = runtime.loop
    assert runtime.run(_value(1)) == 1
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the inherited loop is abandoned, a new one made on use
        try:
            ok = runtime.run(_value(9)) == 9 and runtime.loop is not parent_loop
            os.write(write, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(write)
    try:
        answer = os.read(read, 2)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert answer == b"ok"
    assert runtime.loop is parent_loop and runtime.run(_value(3)) == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_hook_runs_in_the_child_after_every_runtime_abandoned_its_loop(
    runtime: Runtime,
) -> None:
    runtime.run(_value(1))  # a loop the child inherits
    seen: list[bool] = []

    def hook() -> None:
        seen.append(runtime._loop is None)

    _runtime.after_fork_in_child(hook)
    read, write = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:
            try:
                os.write(write, b"ok" if seen == [True] else b"no")
            finally:
                os._exit(0)
        os.close(write)
        try:
            answer = os.read(read, 2)
        finally:
            os.close(read)
            os.waitpid(pid, 0)
    finally:
        _runtime._FORK_HOOKS.remove(hook)
    assert answer == b"ok" and seen == []  # run once, in the child only


def test_ors_gym_registers_one_at_fork_handler() -> None:
    package = Path(_runtime.__file__).parent
    registering = [str(path.relative_to(package)) for path in sorted(package.rglob("*.py"))
                   if "os.register_at_fork(" in path.read_text(encoding="utf-8")]
    assert registering == ["_runtime.py"]  # others add hooks with after_fork_in_child
