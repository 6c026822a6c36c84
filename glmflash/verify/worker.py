"""The verifier's worker process: runs candidate programs and reports their raw outputs.

Started by `sandbox.VerifierPool` as `python -s -P -S -B worker.py REQ_FD RESP_FD CONFIG_JSON`.
It imports only the standard library and never sees expected outputs: a request holds the
source, the entry point and the case arguments (or, for a test-code task, the instrumented
test), a reply holds what the function returned (or what each assert did).

The worker itself never runs candidate code. For every request it forks a throwaway child
that tightens its own limits (CPU seconds, no new processes, few file descriptors), installs
an audit hook that refuses every audited operation (open, import, exec, socket, fork, kill,
...), runs the program and writes one JSON message before exiting. The worker reads that
message within the child's budget and kills the child's process group when it is spent, so
a hostile program can neither outlive its budget nor leave state behind for the next one.

The child's budget is CPU time, read from /proc while it runs, so a loaded machine does not
turn a slow verdict into a timeout; the wall clock (WALL_FACTOR times the budget) is only a
backstop for a program that blocks. Before running anything the child installs a seccomp
filter that allows the handful of system calls a pure function needs (memory, writing its
result, exiting) and fails every other with EPERM: no signals to any process, no files, no
process-group or scheduler changes, whatever the candidate reaches. Every worker starts with
the same string-hash seed, so a verdict is a function of (source, task) alone.

Request frame: REQUEST header (sequence, timeout seconds, message cap, payload length) +
marshal payload ("cases", entry_point, [args, ...]) or ("check", entry_point, test source),
followed by the marshalled candidate source. Reply frame:
REPLY header (sequence, status byte, payload length) + payload, status RESULT (payload: the
child's JSON), TIMEOUT (payload: b"cpu" or b"wall"), DIED (payload: how it ended) or TOO_BIG.
"""

from __future__ import annotations

import builtins
import ctypes
import gc
import io
import json
import marshal
import math
import os
import platform
import random
import resource
import select
import signal
import struct
import sys
import time

REQUEST = struct.Struct("!QdQI")
REPLY = struct.Struct("!QcI")
RESULT, TIMEOUT, DIED, TOO_BIG = b"R", b"T", b"D", b"B"
MAX_DEPTH = 32  # nesting of a returned value; deeper (or self-containing) values are refused
CHILD_RESULT_FD = 3
HASH_SEED = "0"  # PYTHONHASHSEED of every worker: set iteration order is the same in all
WALL_FACTOR, WALL_EXTRA = 4.0, 1.0  # wall-clock backstop: WALL_FACTOR * budget + WALL_EXTRA s
CPU_POLL = 0.02  # seconds between reads of the child's CPU time
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
HAS_PROC = os.path.exists("/proc/self/stat")
RECORD = "__glmflash_assert__"  # name of the assert recorder in a check task's test code
# Loaded before privileges drop: unicodedata for compile() (non-ASCII names, \N{...}); the
# rest so that general Python (CheckTask) can import them, from sys.modules, with no file I/O.
PRELOAD = (
    "unicodedata",
    "math",
    "cmath",
    "typing",
    "random",
    "copy",
    "string",
    "re",
    "collections",
    "itertools",
    "functools",
    "operator",
    "heapq",
    "bisect",
    "hashlib",
    "fractions",
    "decimal",
    "statistics",
)
# Audited events general Python (a CheckTask) may raise: seeding a generator, eval/exec of a
# string, id() (copy.deepcopy uses it). Opening files, importing what is not loaded, sockets,
# processes stay refused.
GENERAL_PYTHON_EVENTS = frozenset({"random.seed", "compile", "exec", "builtins.id"})
running = [0]  # pid of the child now running a program, 0 when none


def wall_limit(timeout: float) -> float:
    """The wall-clock backstop for a program whose CPU budget is `timeout` seconds."""
    return WALL_FACTOR * timeout + WALL_EXTRA


def message_cap(max_output: int, n_cases: int) -> int:
    """Bytes of the child's JSON message for an output within budget: each unit of the output
    budget (an element or a character) takes at most 48 bytes of JSON (a float's repr with its
    tag, a character escaped as a surrogate pair), each case's wrapper at most 96."""
    return (1 << 16) + 48 * max_output + 96 * n_cases


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
        return [
            "d",
            [
                [encode(k, budget, depth + 1), encode(v, budget, depth + 1)]
                for k, v in value.items()
            ],
        ]
    raise Refused("unsupported output type")


def deny_all(*allowed_code: object, allowed_events: frozenset[str] = frozenset()):
    """An audit hook refusing every audited event except exec of the given code objects and
    `allowed_events`."""

    def hook(event: str, args: tuple) -> None:
        if event in allowed_events:
            return
        if event == "exec" and args and any(args[0] is code for code in allowed_code):
            return
        raise PermissionError(f"{event} is not allowed in the verifier")

    return hook


def error_name(err: BaseException) -> str:
    name = type(err).__name__
    return name[:60] if type(name) is str else "exception"


def define(source: str, entry_point: str, builtins_: dict, test: str | None = None):
    """Compile the candidate (and the test code, if any), lock imports and execs down, run the
    candidate's module. Returns (its function, its namespace, the compiled test) or, when
    there is no function to call, (["invalid" | "crash", why], None, None)."""
    try:
        code = compile(source, "<candidate>", "exec")
        test_code = None if test is None else compile(test, "<check>", "exec")
    except BaseException as err:  # whatever compile raises, it is the candidate's
        return ["invalid", f"does not compile: {type(err).__name__}"], None, None
    namespace = {"__builtins__": dict(builtins_), "__name__": "__candidate__"}
    sys.addaudithook(
        deny_all(
            code,
            test_code,
            allowed_events=GENERAL_PYTHON_EVENTS if test is not None else frozenset(),
        )
    )
    try:
        exec(code, namespace)
    except BaseException as err:
        return ["crash", f"defining the function raised {error_name(err)}"], None, None
    function = namespace.get(entry_point)
    if type(function) is not type(run_cases):
        return ["invalid", f"{entry_point} is not a function"], None, None
    return function, namespace, test_code


def run_cases(entry_point: str, cases: list, source: str, config: dict) -> list:
    """Call the candidate's entry point on every case and tag what each call returned."""
    function, _, _ = define(source, entry_point, config["safe_builtins"])
    if type(function) is list:
        return function
    budget = [config["max_output"]]
    results = []
    for args in cases:
        try:
            value = function(*args)
        except BaseException as err:  # SystemExit, KeyboardInterrupt included
            results.append(["e", error_name(err)])
            continue
        try:
            results.append(["v", encode(value, budget)])
        except Refused as err:
            results.append(["x", str(err)])
        except BaseException as err:  # e.g. RecursionError, MemoryError
            results.append(["x", f"output could not be read: {type(err).__name__}"])
    return ["ok", results]


def run_check(entry_point: str, test: str, source: str, config: dict) -> list:
    """Run check(candidate) of the (instrumented) test code in the candidate's namespace, as
    HumanEval does (its tests may call the prompt's helpers). Each assert calls the recorder,
    which keeps per assert [times held, first failure: "" none, "f" false, "e:Name" raised]."""
    random.seed(0)  # tests and candidates that draw unseeded numbers draw the same ones
    function, namespace, test_code = define(source, entry_point, config["all_builtins"], test)
    if type(function) is list:
        return function
    held: dict[int, list] = {}

    def record(index: object, thunk: object) -> None:
        entry = held.setdefault(index if type(index) is int else -1, [0, ""])
        try:
            ok = bool(thunk())
        except BaseException as err:
            entry[1] = entry[1] or f"e:{error_name(err)}"
            return
        if ok:
            entry[0] += 1
        else:
            entry[1] = entry[1] or "f"

    namespace[RECORD] = record
    error = ""
    try:
        exec(test_code, namespace)
        namespace["check"](function)
    except BaseException as err:
        error = error_name(err)
    return [
        "ok",
        {"asserts": [[i, n, why] for i, (n, why) in sorted(held.items())], "error": error},
    ]


# System calls a child may make once its program starts: memory, its result pipe, its own exit.
# Everything else (kill, pidfd_*, open*, mknod*, stat*, setpgid, sched_*, setpriority, socket,
# clone, execve, ...) fails with EPERM. (audit arch, {name: number}) per machine.
SECCOMP_ALLOWED = {
    "x86_64": (
        0xC000003E,
        {
            "read": 0,
            "write": 1,
            "close": 3,
            "mmap": 9,
            "mprotect": 10,
            "munmap": 11,
            "brk": 12,
            "rt_sigprocmask": 14,
            "rt_sigreturn": 15,
            "mremap": 25,
            "madvise": 28,
            "exit": 60,
            "futex": 202,
            "clock_gettime": 228,
            "exit_group": 231,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "read": 63,
            "write": 64,
            "close": 57,
            "mmap": 222,
            "mprotect": 226,
            "munmap": 215,
            "brk": 214,
            "rt_sigprocmask": 135,
            "rt_sigreturn": 139,
            "mremap": 216,
            "madvise": 233,
            "exit": 93,
            "futex": 98,
            "clock_gettime": 113,
            "exit_group": 94,
        },
    ),
}
SECCOMP_RET_ALLOW, SECCOMP_RET_KILL_PROCESS = 0x7FFF0000, 0x80000000
SECCOMP_RET_EPERM = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


def seccomp_program(arch: int, allowed: list[int]) -> bytes:
    """Classic BPF over struct seccomp_data {int nr; u32 arch; ...}: a foreign architecture is
    killed, an allowed number returns ALLOW, anything else EPERM."""

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    load_word, jump_eq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K
    body = [
        op(load_word, 4),
        op(jump_eq, arch, 1, 0),
        op(ret, SECCOMP_RET_KILL_PROCESS),
        op(load_word, 0),
    ]
    for i, number in enumerate(allowed):  # ALLOW sits len(allowed) - i instructions ahead
        body.append(op(jump_eq, number, len(allowed) - i, 0))
    body += [op(ret, SECCOMP_RET_EPERM), op(ret, SECCOMP_RET_ALLOW)]
    return b"".join(body)


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def seccomp_filter() -> tuple[ctypes.CDLL, ctypes.Array, SockFprog] | None:
    """What the child needs to lock itself down (libc, the program, its descriptor), built once
    in the worker; None where seccomp is not available (not Linux, unknown machine)."""
    machine = platform.machine()
    if sys.platform != "linux" or machine not in SECCOMP_ALLOWED:
        return None
    arch, table = SECCOMP_ALLOWED[machine]
    program = seccomp_program(arch, sorted(table.values()))
    buffer = ctypes.create_string_buffer(program, len(program))
    libc = ctypes.CDLL(None, use_errno=True)
    return libc, buffer, SockFprog(len(program) // 8, ctypes.addressof(buffer))


def lock_down(seccomp: tuple[ctypes.CDLL, ctypes.Array, SockFprog] | None) -> None:
    """Install the filter in this (child) process; it holds for the rest of its life."""
    if seccomp is None:
        return
    libc, _, fprog = seccomp
    if (
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0
    ):
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def child_main(payload: bytes, result_fd: int, timeout: float, config: dict) -> None:
    """In the forked child: lock down, run, send one JSON message, exit without cleanup."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.setpgid(0, 0)
    os.dup2(result_fd, CHILD_RESULT_FD)
    os.closerange(CHILD_RESULT_FD + 1, config["max_fd"])
    for limit, value in (
        (resource.RLIMIT_CPU, math.ceil(timeout) + 1),
        (resource.RLIMIT_NPROC, 0),
        (resource.RLIMIT_NOFILE, CHILD_RESULT_FD + 1),
    ):
        try:
            resource.setrlimit(limit, (value, value))
        except (ValueError, OSError):
            pass  # a limit the platform refuses; the audit hook and the deadline remain
    try:
        lock_down(config["seccomp"])
    except OSError:
        write_all(CHILD_RESULT_FD, b'["crash", "worker error: seccomp filter refused"]')
        os._exit(0)
    try:
        stream = io.BytesIO(payload)
        kind, entry_point, spec = marshal.load(stream)
        run = run_check if kind == "check" else run_cases
        message = run(entry_point, spec, marshal.load(stream), config)
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


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a live process, from /proc/<pid>/stat (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(b")") + 2 :].split()  # the name may hold spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def over_budget(pid: int, timeout: float, start: float) -> bytes | None:
    """b"cpu" once the child has used its CPU budget (the wall clock where /proc is missing),
    b"wall" past the backstop, None while it may go on."""
    elapsed = time.monotonic() - start
    if elapsed > wall_limit(timeout):
        return b"wall"
    if (cpu_seconds(pid) if HAS_PROC else elapsed) > timeout:
        return b"cpu"
    return None


def run_one(payload: bytes, timeout: float, cap: int, config: dict) -> tuple[bytes, bytes]:
    """Fork a child for one program and collect its message within its CPU budget."""
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
    start = time.monotonic()
    chunks, size, status, data = [], 0, None, b""
    while status is None:
        if not select.select([read_fd], [], [], CPU_POLL)[0]:
            data = over_budget(pid, timeout, start) or b""
            status = TIMEOUT if data else None
            continue
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        size += len(chunk)
        if size > cap:
            status = TOO_BIG
        chunks.append(chunk)
    os.close(read_fd)
    while status is None:  # the pipe closed: wait for the exit, still within the budget
        done, exit_status = os.waitpid(pid, os.WNOHANG)
        if done:
            running[0] = 0
            if os.WIFEXITED(exit_status) and os.WEXITSTATUS(exit_status) == 0 and chunks:
                return RESULT, b"".join(chunks)
            return DIED, describe_exit(exit_status).encode()
        data = over_budget(pid, timeout, start) or b""
        if data:
            status = TIMEOUT
        else:
            time.sleep(0.0002)
    kill_group(pid)
    os.waitpid(pid, 0)
    running[0] = 0
    return status, data


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
    os.environ.pop("PYTHONHASHSEED", None)  # it has done its work; the child sees no environment
    for module in PRELOAD:  # as 'nobody' the interpreter's files may not be readable
        __import__(module)
    config["safe_builtins"] = {name: getattr(builtins, name) for name in config["builtins"]}
    config["all_builtins"] = dict(vars(builtins))
    config["seccomp"] = seccomp_filter()
    config["max_fd"] = max(request_fd, reply_fd, 16) + 1
    memory = config["memory_mb"] * 1024 * 1024
    for limit, value in (
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_FSIZE, 0),
        (resource.RLIMIT_CORE, 0),
    ):
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
        seq, timeout, cap, length = REQUEST.unpack(header)
        payload = read_exact(request_fd, length)
        if payload is None:
            return
        status, data = run_one(payload, timeout, cap, config)
        write_all(reply_fd, REPLY.pack(seq, status, len(data)) + data)


if __name__ == "__main__":
    main()
