"""``LocalSandbox``: a temporary folder on this machine, and a subprocess per command.

It stands in for the OpenReward sandbox client (``AsyncOpenReward().sandbox(...)``)
where an environment's toolset expects one: the SDK's ``CLIToolset`` calls
``run`` (for bash, glob, grep, ls and ranged reads), ``download`` (whole-file
reads and the read-modify-write of ``edit``) and ``check_run`` (``write``
uploads base64 text through the shell). ``upload`` copies a local file in,
with the client's signature. Nothing else of the client is implemented.

**This is NOT a security boundary.** Commands run as the current user on
this machine, with its file system, processes and network; the folder is only
their working directory and ``HOME``. What it does give:

- a fresh folder per sandbox (``start``), removed by ``stop``;
- a time limit per command: the command runs in its own process group, and
  the whole group is killed when the limit passes (exit code 124,
  ``timed_out``); processes a command leaves behind are killed when it returns;
- an output cap in bytes (stdout and stderr together): the rest is read and
  dropped, and the result says ``truncated``;
- a scrubbed environment: only ``PATH``, ``LANG`` and ``HOME`` (the folder), so
  no inherited secrets or API keys;
- no stdin (``/dev/null``), so a command waiting for input returns at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from openreward import RunResult
from openreward.api.sandboxes import FileTooLargeError, FileTransferError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TIMEOUT",
    "FileTooLargeError",
    "FileTransferError",
    "LocalSandbox",
]

#: Seconds a command may run when neither the sandbox nor the call says otherwise.
DEFAULT_TIMEOUT = 30.0
#: Bytes of output a command may return when neither the sandbox nor the call says otherwise.
DEFAULT_MAX_BYTES = 50_000
#: Largest file ``download`` reads by default (the SDK client's order of magnitude).
_DOWNLOAD_MAX_BYTES = 10 * 1024 * 1024
#: Exit code reported for a command killed at its time limit (as ``timeout(1)`` uses).
_TIMEOUT_EXIT = 124
#: How long to wait for the output pipe to close once the command's group is gone.
_DRAIN_GRACE_S = 2.0
_READ_CHUNK = 65536
#: Commands longer than this (bytes) run from a script file: one argv string is
#: limited to 128 KiB on Linux, and ``write`` sends a file's content inline.
_INLINE_MAX = 100_000


class LocalSandbox:
    """A per-session temporary folder where shell commands run as subprocesses.

    NOT a security boundary: commands run as the current user on this machine.

    ``files`` (relative path -> text) are written into the folder by
    :meth:`start`. ``timeout`` (seconds) and ``max_bytes`` are the defaults for
    :meth:`run` and also its ceilings: a call may ask for less, never more.
    """

    def __init__(
        self,
        files: Mapping[str, str] | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        prefix: str = "ors-sandbox-",
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        self.files = dict(files or {})
        for name in self.files:
            _check_relative(name)
        self.timeout = float(timeout)
        self.max_bytes = int(max_bytes)
        self._prefix = prefix
        self._root: Path | None = None
        self._groups: set[int] = set()  # process groups of commands in flight

    @property
    def root(self) -> Path | None:
        """The folder while started, else None."""
        return self._root

    @property
    def running(self) -> bool:
        return self._root is not None

    async def start(self) -> None:
        """Make the folder and write ``files`` into it (a second call does nothing)."""
        if self._root is not None:
            return
        root = Path(tempfile.mkdtemp(prefix=self._prefix)).resolve()
        try:
            for name, text in self.files.items():
                path = root / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
        except BaseException:
            _remove_tree(root)
            raise
        self._root = root

    async def stop(self) -> None:
        """Kill commands still running and remove the folder; safe to call twice."""
        for group in list(self._groups):
            _kill_group(group)
        self._groups.clear()
        root, self._root = self._root, None
        if root is not None:
            await asyncio.to_thread(_remove_tree, root)

    async def __aenter__(self) -> LocalSandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- the client interface the SDK toolsets use ------------------------------------------

    async def run(
        self, cmd: str, timeout: float | None = None, max_bytes: int | None = None
    ) -> RunResult:
        """Run ``cmd`` with ``bash -c`` in the folder; ``(output, exit_code)`` plus flags.

        stdout and stderr come back together, cut at ``max_bytes``
        (``truncated``). At ``timeout`` seconds the command's process group is
        killed and the exit code is 124 (``timed_out``). Both default to, and
        are capped at, the sandbox's own limits.
        """
        root = self._require_root()
        limit = self.timeout if timeout is None else min(float(timeout), self.timeout)
        cap = self.max_bytes if max_bytes is None else max(0, min(int(max_bytes), self.max_bytes))
        with _script_args(cmd) as args:  # a script file must outlive the command
            proc, read_fd = await self._spawn(args, root)
            self._groups.add(proc.pid)
            try:
                stream, transport = await _open_reader(read_fd)
            except BaseException:
                _kill_group(proc.pid)
                self._groups.discard(proc.pid)
                raise
            try:
                return await _collect(proc, stream, limit, cap)
            finally:
                transport.close()
                self._groups.discard(proc.pid)

    async def _spawn(
        self, args: list[str], root: Path
    ) -> tuple[asyncio.subprocess.Process, int]:
        """Start ``args`` in the folder, in a new process group; the process and its output fd.

        The pipe is ours, not the Process's, so its ``wait()`` returns when bash
        exits even if something it started in the background still holds the pipe.
        """
        read_fd, write_fd = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *args,
                cwd=root,
                env=self._environ(root),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,
                start_new_session=True,  # its own process group, killed as one
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return proc, read_fd

    async def check_run(
        self, cmd: str, timeout: float | None = None, max_bytes: int | None = None
    ) -> str:
        """:meth:`run`, raising ``RuntimeError`` (as the SDK client does) on a nonzero exit."""
        result = await self.run(cmd, timeout=timeout, max_bytes=max_bytes)
        if result.return_code != 0:
            raise RuntimeError(f"Command failed: {cmd}\n{result.output}")
        return result.output

    async def download(
        self, container_path: str, max_size: int | None = _DOWNLOAD_MAX_BYTES
    ) -> bytes:
        """The bytes of a file; a relative path is taken from the folder.

        Raises ``FileTransferError`` for a missing path or one that is not a
        regular file, ``FileTooLargeError`` past ``max_size`` (None: no limit),
        like the SDK client.
        """
        path = self._resolve(container_path)
        if not path.is_file():
            raise FileTransferError(f"Cannot download {container_path}: no such file")
        try:
            size = path.stat().st_size
            if max_size is not None and size > max_size:
                raise FileTooLargeError(container_path, size, max_size)
            return await asyncio.to_thread(path.read_bytes)
        except OSError as exc:  # e.g. a command made it unreadable
            raise FileTransferError(f"Cannot download {container_path}: {exc.strerror}") from exc

    async def upload(self, local_path: str | os.PathLike[str], container_path: str) -> None:
        """Copy a local file to ``container_path`` (relative: in the folder)."""
        source = Path(local_path)
        if not source.is_file():
            raise FileNotFoundError(f"Local file not found: {source}")
        await asyncio.to_thread(shutil.copyfile, source, self._resolve(container_path))

    # -- helpers ------------------------------------------------------------------------------

    def _require_root(self) -> Path:
        if self._root is None:
            raise RuntimeError("the sandbox is not running (start() it first)")
        return self._root

    def _resolve(self, path: str) -> Path:
        """``path`` as the shell would see it from the folder (absolute paths are kept)."""
        return self._require_root() / path

    @staticmethod
    def _environ(root: Path) -> dict[str, str]:
        """The whole environment a command sees: nothing inherited but PATH and LANG."""
        return {
            "PATH": os.environ.get("PATH") or os.defpath,
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            "HOME": str(root),
        }


async def _open_reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    """An asyncio stream over the read end of a pipe (which the transport then owns)."""
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(loop=loop)
    pipe = os.fdopen(fd, "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream, loop=loop), pipe
        )
    except BaseException:
        pipe.close()
        raise
    return stream, transport


async def _collect(
    proc: asyncio.subprocess.Process, stream: asyncio.StreamReader, limit: float, cap: int
) -> RunResult:
    """Wait for a started command (``limit`` seconds at most) and gather its output."""
    kept = bytearray()
    reader = asyncio.create_task(_read_capped(stream, kept, cap + 1))
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proc.wait(), limit)
        except TimeoutError:
            timed_out = True
        # On time out the command; otherwise whatever it left running in the background.
        _kill_group(proc.pid)
        await proc.wait()
        with contextlib.suppress(TimeoutError):
            # A process that left the group may hold the pipe open: stop reading then.
            await asyncio.wait_for(reader, _DRAIN_GRACE_S)
    except BaseException:
        _kill_group(proc.pid)
        reader.cancel()
        raise
    code = _TIMEOUT_EXIT if timed_out else _exit_code(proc.returncode)
    output = bytes(kept[:cap]).decode("utf-8", errors="replace")
    return RunResult(
        output=output, return_code=code, truncated=len(kept) > cap, timed_out=timed_out
    )


async def _read_capped(stream: asyncio.StreamReader, kept: bytearray, keep: int) -> None:
    """Read ``stream`` to EOF, keeping its first ``keep`` bytes in ``kept``."""
    while chunk := await stream.read(_READ_CHUNK):
        room = keep - len(kept)
        if room > 0:
            kept += chunk[:room]


@contextlib.contextmanager
def _script_args(cmd: str) -> Iterator[list[str]]:
    """The argv running ``cmd`` in bash: inline, or from a private script file if long."""
    data = cmd.encode("utf-8", errors="surrogateescape")
    if len(data) <= _INLINE_MAX:
        yield ["bash", "-c", cmd]
        return
    fd, script = tempfile.mkstemp(prefix="ors-sandbox-cmd-", suffix=".sh")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield ["bash", script]
    finally:
        with contextlib.suppress(OSError):
            os.unlink(script)


def _kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid``; a group already gone is fine.

    Where there are no process groups (Windows: ``start_new_session`` is ignored
    and ``os.killpg`` missing) the command's own process is terminated instead.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if hasattr(os, "killpg"):
            os.killpg(pgid, signal.SIGKILL)
        else:
            os.kill(pgid, signal.SIGTERM)  # Windows: TerminateProcess


def _exit_code(returncode: int | None) -> int:
    """A shell-style exit code: 128 + N for a process killed by signal N."""
    if returncode is None:
        return -1
    return 128 - returncode if returncode < 0 else returncode


def _check_relative(name: str) -> None:
    """Refuse a task file path that would land outside the folder."""
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts:
        raise ValueError(f"sandbox file paths must be relative and stay inside: {name!r}")


def _remove_tree(root: Path) -> None:
    """Remove ``root``, first making its folders writable if a command locked any."""
    try:
        shutil.rmtree(root)
    except FileNotFoundError:
        return
    except OSError:
        with contextlib.suppress(OSError):
            os.chmod(root, stat.S_IRWXU)
        for dirpath, dirnames, _ in os.walk(root):
            for name in dirnames:
                path = os.path.join(dirpath, name)
                if not os.path.islink(path):
                    with contextlib.suppress(OSError):
                        os.chmod(path, stat.S_IRWXU)
        shutil.rmtree(root, ignore_errors=True)
