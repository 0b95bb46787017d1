"""An asyncio-native network backend for httpcore.

httpcore reaches sockets on asyncio through anyio: every read and write opens
a cancel scope (``fail_after``) and checks which async library runs, and the
pool's check of an idle connection (``get_extra_info("is_readable")``) makes
anyio collect every socket attribute (``getpeername`` included) into a dict;
with hundreds of sessions stepping on one loop that was a large share of the
client's CPU. ``AsyncioBackend`` implements httpcore's public
``AsyncNetworkBackend`` on an ``asyncio.Protocol``: the loop hands it what it
reads, a read that finds bytes waiting returns them without suspending, and a
timeout is one timer handle. What httpcore writes in one go (a request's head,
then its body) leaves in one send, when it reads the answer or at the loop's next
pass: a request is one segment, and an idle server is woken once for it, not
once for its head and again for its body. ``_http11.Http11Pool`` opens its connections
with it (``httpx.AsyncHTTPTransport`` takes no network backend). It runs on
Linux, macOS and Windows: the idle check uses ``select.poll`` where it exists
and ``select.select`` elsewhere.
"""

from __future__ import annotations

import asyncio
import select
import ssl
import typing
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import httpcore

__all__ = ["AsyncioBackend", "AsyncioStream", "fd_readable", "poll_readable", "select_readable"]

#: Bytes buffered from a connection nobody reads before the loop stops reading it.
_HIGH_WATER = 256 * 1024
#: Bytes written and not yet sent beyond which a write sends at once (and waits for the
#: socket to drain, if it must).
_COALESCE_MAX = 64 * 1024
#: Delay before trying the next address of a host (RFC 8305's 250 ms, as anyio).
_HAPPY_EYEBALLS_S = 0.25

_SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


class AsyncioStream(asyncio.Protocol, httpcore.AsyncNetworkStream):
    """One connection: an asyncio protocol that keeps what the loop reads until asked."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        #: Bytes received so far, ever.
        self.received = 0
        self._eof = False
        self._lost: Exception | None = None
        self._closed = False
        self._reader: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._paused_writing = False
        self._paused_reading = False
        self._unsent: list[bytes] = []  # written, sent together at the next read or pass
        self._unsent_size = 0
        self._flush_due: asyncio.Handle | None = None

    # -- the loop's side (asyncio.Protocol) -----------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = typing.cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        self.received += len(data)
        if self._buffered > _HIGH_WATER and not self._paused_reading and self._transport:
            self._paused_reading = True
            self._transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake_reader()
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._closed = True
        self._lost = exc
        self._wake_reader()
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def pause_writing(self) -> None:
        self._paused_writing = True

    def resume_writing(self) -> None:
        self._paused_writing = False
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _wake_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done():
            reader.set_result(None)

    # -- httpcore's side (AsyncNetworkStream) ---------------------------------------------

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._flush()
        if not self._chunks and not self._eof:
            await self._wait_for_data(timeout)
        if self._chunks:
            return self._take(max_bytes)
        if self._lost is not None:
            raise httpcore.ReadError(str(self._lost) or type(self._lost).__name__)
        return b""

    async def _wait_for_data(self, timeout: float | None) -> None:
        reader = self._reader = self._loop.create_future()
        try:
            await _until(self._loop, reader, timeout, httpcore.ReadTimeout)
        finally:
            if self._reader is reader:
                self._reader = None

    def _take(self, max_bytes: int) -> bytes:
        chunks = self._chunks
        first = chunks.popleft()
        if len(first) > max_bytes:
            chunks.appendleft(first[max_bytes:])
            first = first[:max_bytes]
        elif chunks and len(first) < max_bytes:
            parts, size = [first], len(first)
            while chunks and size + len(chunks[0]) <= max_bytes:
                part = chunks.popleft()
                parts.append(part)
                size += len(part)
            first = b"".join(parts)
        self._buffered -= len(first)
        if self._paused_reading and self._buffered <= _HIGH_WATER // 4 and not self._closed:
            self._paused_reading = False
            assert self._transport is not None
            self._transport.resume_reading()
        return first

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        transport = self._transport
        if transport is None or self._closed or transport.is_closing():
            raise httpcore.WriteError(
                str(self._lost) if self._lost is not None else "the connection is closed"
            )
        self._unsent.append(buffer)
        self._unsent_size += len(buffer)
        if self._unsent_size < _COALESCE_MAX:
            if self._flush_due is None:
                self._flush_due = self._loop.call_soon(self._flush)
            return
        self._flush()
        if self._paused_writing:
            drained = self._drained = self._loop.create_future()
            await _until(self._loop, drained, timeout, httpcore.WriteTimeout)
            if self._closed and self._lost is not None:
                raise httpcore.WriteError(str(self._lost))

    async def aclose(self) -> None:
        self.close()

    def _flush(self) -> None:
        """Send what was written, in one piece (dropped if the connection is closing: the
        next read says why)."""
        if self._flush_due is not None:
            self._flush_due.cancel()
            self._flush_due = None
        if not self._unsent:
            return
        data = self._unsent[0] if len(self._unsent) == 1 else b"".join(self._unsent)
        self._unsent.clear()
        self._unsent_size = 0
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def close(self) -> None:
        """Close the connection now (the loop closes the socket once its buffer is sent)."""
        self._flush()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        assert self._transport is not None
        try:
            with _connect_errors():
                async with asyncio.timeout(timeout):
                    transport = await self._loop.start_tls(
                        self._transport, self, ssl_context, server_hostname=server_hostname
                    )
        except BaseException:
            self._transport.abort()
            raise
        if transport is None:  # the connection closed during the handshake
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        self._transport = transport
        return self

    def get_extra_info(self, info: str) -> typing.Any:
        if info == "is_readable":
            return self._readable()
        transport = self._transport
        if transport is None:
            return None
        if info == "ssl_object":
            return transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return transport.get_extra_info("sockname")
        if info == "server_addr":
            return transport.get_extra_info("peername")
        if info == "socket":
            return transport.get_extra_info("socket")
        return None

    def _readable(self) -> bool:
        """Whether a read would return at once: bytes or the end are here, or the
        socket holds some the loop has not read yet (an idle connection the server
        just closed must not be handed a request)."""
        if self._chunks or self._eof or self._transport is None:
            return True
        sock = self._transport.get_extra_info("socket")
        fd = -1 if sock is None else sock.fileno()
        return True if fd < 0 else fd_readable(fd)


def poll_readable(fd: int) -> bool:
    """Whether ``fd`` has bytes (or its end) waiting, by ``select.poll`` (no limit on fds)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def select_readable(fd: int) -> bool:
    """Whether ``fd`` has bytes (or its end) waiting, by ``select.select``: where there is
    no ``poll`` (Windows, whose ``select`` takes sockets of any number)."""
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


#: ``poll_readable`` where the platform has ``select.poll``; ``select_readable`` elsewhere
#: (on POSIX ``select`` fails for descriptors past ``FD_SETSIZE``, so it is not the default).
fd_readable = poll_readable if hasattr(select, "poll") else select_readable


async def _until(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[None], timeout: float | None,
    error: type[Exception],
) -> None:
    """Await ``future``; after ``timeout`` seconds (None: never) it fails with ``error``."""
    timer = None if timeout is None else loop.call_later(timeout, _expire, future, error)
    try:
        await future
    finally:
        if timer is not None:
            timer.cancel()


def _expire(future: asyncio.Future[None], error: type[Exception]) -> None:
    if not future.done():
        future.set_exception(error())


class _loop_time_timeout:
    """``asyncio.timeout`` counting only the time the loop ran: a connect finishes in
    the kernel, but its task needs a few passes of the loop to see it, and a loop
    busy with thousands of sessions can take seconds per pass. When the deadline
    comes late (the loop was stalled ``_STALL_S`` or more), the stall is given back,
    up to ``_MAX_GRACE`` times the timeout in all; a loop that runs on time times
    out on time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float | None) -> None:
        self._loop = loop
        self._timeout = timeout
        self._inner = asyncio.timeout(None)

    async def __aenter__(self) -> None:
        await self._inner.__aenter__()
        if self._timeout is not None:
            start = self._loop.time()
            self._last = start + self._timeout
            self._limit = start + self._timeout * _MAX_GRACE
            self._handle = self._loop.call_at(self._last, self._due)

    def _due(self) -> None:
        now = self._loop.time()
        late = now - self._last
        if late >= _STALL_S and now < self._limit:
            self._last = min(now + late, self._limit)
            self._handle = self._loop.call_at(self._last, self._due)
            return
        self._inner.reschedule(now)  # expires at once: the task is cancelled as by timeout

    async def __aexit__(self, *exc_info: typing.Any) -> None:
        if self._timeout is not None:
            self._handle.cancel()
        await self._inner.__aexit__(*exc_info)


#: A deadline met this late means the loop was stalled, not the connect slow.
_STALL_S = 0.5
#: The most a stalled loop stretches a connect's timeout (times the timeout).
_MAX_GRACE = 6.0


def _happy_eyeballs(loop: asyncio.AbstractEventLoop) -> dict[str, typing.Any]:
    """``happy_eyeballs_delay`` for the loops that take it: asyncio's own (every
    ``asyncio.BaseEventLoop``); uvloop's ``create_connection``, which uvicorn picks
    whenever uvloop is installed, rejects it, and tries a host's addresses in turn."""
    if isinstance(loop, asyncio.BaseEventLoop):
        return {"happy_eyeballs_delay": _HAPPY_EYEBALLS_S}
    return {}


@contextmanager
def _connect_errors() -> Iterator[None]:
    try:
        yield
    except TimeoutError as exc:  # before OSError: TimeoutError is one
        raise httpcore.ConnectTimeout(str(exc)) from exc
    except (OSError, ssl.SSLError) as exc:
        raise httpcore.ConnectError(str(exc)) from exc


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend on the running asyncio loop (see the module docstring)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        with _connect_errors():
            async with _loop_time_timeout(loop, timeout):
                transport, stream = await loop.create_connection(
                    lambda: AsyncioStream(loop), host, port,
                    local_addr=None if local_address is None else (local_address, 0),
                    **_happy_eyeballs(loop),
                )
        _set_options(transport, socket_options)
        return stream

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _set_options(transport: asyncio.BaseTransport, options: Iterable[_SocketOption] | None
                 ) -> None:
    sock = transport.get_extra_info("socket")
    for option in options or ():
        sock.setsockopt(*option)
