"""The verifier's worker process: runs candidate programs and reports their raw outputs.

Started by `sandbox.VerifierPool` as `python -I -S worker.py REQ_FD RESP_FD CONFIG_JSON`. It
imports only the standard library and never sees expected outputs: a request holds the source,
the entry point and the case arguments, a reply holds what the function returned.

The worker itself never runs candidate code. For every request it forks a throwaway child
that tightens its own limits (CPU seconds, no new processes, few file descriptors), installs
an audit hook that refuses every audited operation (open, import, exec, socket, fork, kill,
...), runs the cases and writes one JSON message before exiting. The worker reads that
message under a wall-clock deadline and kills the child's process group when time is up, so
a hostile program can neither outlive its budget nor leave state behind for the next one.

Request frame: REQUEST header (sequence, timeout seconds, payload length) + marshal payload
(source, entry_point, [args, ...]). Reply frame: REPLY header (sequence, status byte, payload
length) + payload, status RESULT (payload: the child's JSON), TIMEOUT, DIED (payload: how it
ended) or TOO_BIG.
"""

from __future__ import annotations

import builtins
import gc
import json
import marshal
import math
import os
import resource
import select
import signal
import struct
import sys
import time

REQUEST = struct.Struct("!QdI")
REPLY = struct.Struct("!QcI")
RESULT, TIMEOUT, DIED, TOO_BIG = b"R", b"T", b"D", b"B"
MAX_DEPTH = 32  # nesting of a returned value; deeper (or self-containing) values are refused
CHILD_RESULT_FD = 3
running = [0]  # pid of the child now running a program, 0 when none


class Refused(Exception):
    """A returned value that is not plain data, or too big or deep to send back."""


def encode(value: object, budget: list[int], depth: int = 0) -> list:
    """Tag a returned value by its exact type: [tag, payload], tags N b i f s l t d.

    `type(v) is ...` checks make subclasses (and anything with a rigged __eq__) unsendable;
    ints go as hex text (no digit-count limit); budget[0] counts elements and characters.
    """
    if depth > MAX_DEPTH:
        raise Refused("output nested too deeply")
    t = type(value)
    if t is int:
        size = value.bit_length() // 4 + 1
    elif t is str or t is list or t is tuple or t is dict:
        size = len(value) + 1
    else:
        size = 1
    budget[0] -= size
    if budget[0] < 0:
        raise Refused("output too large")
    if value is None:
        return ["N", None]
    if t is bool:
        return ["b", value]
    if t is int:
        return ["i", format(value, "x")]
    if t is float:
        return ["f", repr(value)]
    if t is str:
        return ["s", value]
    if t is list or t is tuple:
        return ["l" if t is list else "t", [encode(v, budget, depth + 1) for v in value]]
    if t is dict:
        return ["d", [[encode(k, budget, depth + 1), encode(v, budget, depth + 1)]
                      for k, v in value.items()]]
    raise Refused("unsupported output type")


def deny_all(allowed_code: object):
    """An audit hook refusing every audited event except exec of the candidate's own module."""
    def hook(event: str, args: tuple) -> None:
        if event == "exec" and args and args[0] is allowed_code:
            return
        raise PermissionError(f"{event} is not allowed in the verifier")
    return hook


def run_cases(payload: bytes, max_output: int, safe_builtins: dict) -> list:
    """Compile the candidate, call its entry point on every case; the child's whole job."""
    source, entry_point, cases = marshal.loads(payload)
    try:
        code = compile(source, "<candidate>", "exec")
    except BaseException as err:  # whatever compile raises, it is the candidate's
        return ["invalid", f"does not compile: {type(err).__name__}"]
    namespace = {"__builtins__": dict(safe_builtins)}
    sys.addaudithook(deny_all(code))
    try:
        exec(code, namespace)
    except BaseException as err:
        return ["crash", f"defining the function raised {type(err).__name__}"]
    function = namespace.get(entry_point)
    if type(function) is not type(run_cases):
        return ["invalid", f"{entry_point} is not a function"]
    budget = [max_output]
    results = []
    for args in cases:
        try:
            value = function(*args)
        except BaseException as err:  # SystemExit, KeyboardInterrupt included
            name = type(err).__name__
            results.append(["e", name[:60] if type(name) is str else "exception"])
            continue
        try:
            results.append(["v", encode(value, budget)])
        except Refused as err:
            results.append(["x", str(err)])
        except BaseException as err:  # e.g. RecursionError, MemoryError
            results.append(["x", f"output could not be read: {type(err).__name__}"])
    return ["ok", results]


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def child_main(payload: bytes, result_fd: int, timeout: float, config: dict) -> None:
    """In the forked child: lock down, run, send one JSON message, exit without cleanup."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.setpgid(0, 0)
    os.dup2(result_fd, CHILD_RESULT_FD)
    os.closerange(CHILD_RESULT_FD + 1, config["max_fd"])
    for limit, value in ((resource.RLIMIT_CPU, math.ceil(timeout) + 1),
                         (resource.RLIMIT_NPROC, 0),
                         (resource.RLIMIT_NOFILE, CHILD_RESULT_FD + 1)):
        try:
            resource.setrlimit(limit, (value, value))
        except (ValueError, OSError):
            pass  # a limit the platform refuses; the audit hook and the deadline remain
    try:
        message = run_cases(payload, config["max_output"], config["safe_builtins"])
        data = json.dumps(message).encode()
    except BaseException as err:
        data = json.dumps(["crash", f"worker error: {type(err).__name__}"]).encode()
    write_all(CHILD_RESULT_FD, data)
    os._exit(0)


def describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return f"exited with status {os.WEXITSTATUS(status)} without a result"


def kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def run_one(payload: bytes, timeout: float, config: dict) -> tuple[bytes, bytes]:
    """Fork a child for one program and collect its message under the wall-clock deadline."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            child_main(payload, write_fd, timeout, config)
        finally:
            os._exit(70)
    os.close(write_fd)
    running[0] = pid
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child already did it, or already exited
    deadline = time.monotonic() + timeout
    chunks, size, status = [], 0, None
    while status is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([read_fd], [], [], remaining)[0]:
            status = TIMEOUT
            break
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        size += len(chunk)
        if size > config["max_message"]:
            status = TOO_BIG
        chunks.append(chunk)
    os.close(read_fd)
    while status is None:  # the pipe closed: wait for the exit, still under the deadline
        done, exit_status = os.waitpid(pid, os.WNOHANG)
        if done:
            running[0] = 0
            if os.WIFEXITED(exit_status) and os.WEXITSTATUS(exit_status) == 0 and chunks:
                return RESULT, b"".join(chunks)
            return DIED, describe_exit(exit_status).encode()
        if time.monotonic() > deadline:
            status = TIMEOUT
        else:
            time.sleep(0.0002)
    kill_group(pid)
    os.waitpid(pid, 0)
    running[0] = 0
    return status, b""


def read_exact(fd: int, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def drop_privileges() -> None:
    """Run as 'nobody' when started as root: process limits then apply and files are not ours."""
    if os.getuid() != 0:
        return
    try:
        import pwd
        nobody = pwd.getpwnam("nobody")
        uid, gid = nobody.pw_uid, nobody.pw_gid
    except (ImportError, KeyError):
        uid = gid = 65534
    try:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    except OSError:
        pass


def warm_up() -> None:
    """Do once here what every child would otherwise redo from cold (the compiler's lazy set-up
    above all), then move all objects out of the collector's sight so children don't touch them.
    """
    namespace: dict = {}
    exec(compile("def f(x):\n    return [x * 2.0, str(x)]\n", "<warm-up>", "exec"), namespace)
    json.dumps(["ok", [["v", encode(namespace["f"](1), [100])]]])
    gc.collect()
    gc.freeze()


def stop(signum: int, frame: object) -> None:
    """SIGTERM from the pool: take the running child down too, then leave."""
    if running[0]:
        kill_group(running[0])
    os._exit(0)


def main() -> None:
    request_fd, reply_fd = int(sys.argv[1]), int(sys.argv[2])
    config = json.loads(sys.argv[3])
    config["safe_builtins"] = {name: getattr(builtins, name) for name in config["builtins"]}
    config["max_fd"] = max(request_fd, reply_fd, 16) + 1
    memory = config["memory_mb"] * 1024 * 1024
    for limit, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_FSIZE, 0),
                         (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(limit, (value, value))
        except (ValueError, OSError):
            pass
    drop_privileges()
    signal.signal(signal.SIGTERM, stop)
    warm_up()
    while True:
        header = read_exact(request_fd, REQUEST.size)
        if header is None:
            return  # the pool closed its end
        seq, timeout, length = REQUEST.unpack(header)
        payload = read_exact(request_fd, length)
        if payload is None:
            return
        status, data = run_one(payload, timeout, config)
        write_all(reply_fd, REPLY.pack(seq, status, len(data)) + data)


if __name__ == "__main__":
    main()
