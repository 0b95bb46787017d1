"""sse-starlette: let several SDK servers stream SSE in one process.

sse-starlette 2.x (the SDK pins 2.3.6) waits for shutdown on one global
Event bound to the first event loop that used it, so every SSE answer of any
later server in the process, on another loop, fails (fixed in 3.0, see
https://github.com/sysid/sse-starlette/issues/140). Inside ``VERIFIED`` the private
``EventSourceResponse._listen_for_exit_signal`` is replaced by one that polls
the shared exit flag, as sse-starlette 3 does; from 3.0 on nothing is needed;
elsewhere nothing is patched (one SSE-serving loop per process).
"""

from __future__ import annotations

from ors_gym._compat._versions import note_fallback, version_of, within

__all__ = ["POLL_SECONDS", "VERIFIED", "exit_listener_per_loop"]

#: sse-starlette releases with the one-loop exit Event, and the staticmethod replaced here.
VERIFIED = ((2, 3), (3,))
#: How often the replacement looks at ``AppStatus.should_exit``.
POLL_SECONDS = 0.5

_patched = False


def exit_listener_per_loop() -> bool:
    """Patch sse-starlette once if it needs it; returns whether the patch is in place."""
    global _patched
    if _patched:
        return True
    version = version_of("sse-starlette")
    if version is None or version >= VERIFIED[1]:
        return False  # not installed, or no longer needed
    what = "sse-starlette EventSourceResponse._listen_for_exit_signal"
    if not within("sse-starlette", *VERIFIED):
        note_fallback(what, f"sse-starlette {version} is outside the verified range {VERIFIED}; "
                      "not patched: SSE works on the first server's event loop only")
        return False
    import anyio
    from sse_starlette import sse

    if not isinstance(
        sse.EventSourceResponse.__dict__.get("_listen_for_exit_signal"), staticmethod
    ) or not hasattr(sse.AppStatus, "should_exit"):
        note_fallback(what, "sse-starlette has no such staticmethod or no AppStatus.should_exit; "
                      "not patched: SSE works on the first server's event loop only")
        return False

    async def listen_for_exit_signal() -> None:
        while not sse.AppStatus.should_exit:
            await anyio.sleep(POLL_SECONDS)

    sse.EventSourceResponse._listen_for_exit_signal = staticmethod(listen_for_exit_signal)  # type: ignore[method-assign]
    _patched = True
    return True
