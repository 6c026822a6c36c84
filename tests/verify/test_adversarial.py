"""Hostile candidates: each gets the verdict it deserves, and the pool keeps working after it.

HOSTILE goes through both stages. ESCAPES goes to the sandbox alone (validation switched off
through the pool's internal flag) and uses the classic escapes from restricted builtins, to
show that stage 2 holds even if stage 1 had a hole.
"""

import marshal
import os
import shutil
import tempfile

import pytest

from glmflash.verify import Case, Task, VerifierPool, sandbox

TASK = Task("f", (Case((3,), 6), Case((5,), 10)))
CORRECT = "def f(x):\n    return 2 * x\n"
DROP = tempfile.mkdtemp(prefix="glmflash-verify-")  # world-writable: only the sandbox stops writes
os.chmod(DROP, 0o777)


def fn(*lines: str) -> str:
    return "def f(x):\n" + "".join(f"    {line}\n" for line in lines)


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(2, timeout=0.5) as p:
        yield p


@pytest.fixture(scope="module")
def bare_pool():
    with VerifierPool(2, timeout=0.5, _skip_validation=True) as p:
        yield p
    shutil.rmtree(DROP, ignore_errors=True)


def check(pool, source, statuses, task=TASK):
    verdict = pool.verify(source, task)
    assert verdict.status in statuses, verdict
    assert os.listdir(DROP) == []
    assert pool.verify(CORRECT, TASK).status == "pass"  # the pool survived
    return verdict


NAN_TASK = Task("f", (Case((0,), float("nan")),))
HOSTILE = [  # (name, source, allowed verdicts)
    ("infinite loop", fn("while True:", "    pass"), {"timeout"}),
    ("huge power", fn("return 9 ** 9 ** 9"), {"timeout"}),
    ("long range", fn("return sum(range(10 ** 15))"), {"timeout"}),
    ("max of huge range", fn("return max(range(10 ** 12))"), {"timeout"}),
    ("list bomb", fn("return [0] * 10 ** 10"), {"crash"}),
    ("string bomb", fn("return 'x' * 10 ** 10"), {"crash"}),
    ("doubling string", fn("s = 'x'", "while True:", "    s = s + s"), {"crash", "timeout"}),
    ("dict bomb", fn("return {i: i for i in range(10 ** 9)}"), {"crash", "timeout"}),
    ("format width bomb", fn("return f'{x:>{10 ** 10}}'"), {"crash"}),
    ("recursion bomb", fn("return f(x)"), {"crash"}),
    ("branching recursion", fn("return f(x + 1) + f(x + 2)"), {"crash"}),
    ("deep parentheses", fn("return " + "(" * 10000 + "x" + ")" * 10000), {"invalid"}),
    ("deep lists", fn("return " + "[" * 100 + "x" + "]" * 100), {"invalid"}),
    ("deep unary", fn("return " + "-" * 1000 + "x"), {"invalid"}),
    ("sys.exit", "import sys\nsys.exit(0)\n" + CORRECT, {"invalid"}),
    ("os._exit", fn("import os", "os._exit(0)"), {"invalid"}),
    ("raise SystemExit", fn("raise SystemExit"), {"invalid"}),
    ("raise KeyboardInterrupt", fn("raise KeyboardInterrupt"), {"invalid"}),
    ("exit builtin", fn("exit(0)"), {"invalid"}),
    ("globals of the function", fn("return f.__globals__"), {"invalid"}),
    ("globals builtin", fn("return globals()['__builtins__']"), {"invalid"}),
    ("generator frame", fn("return (y for y in [x]).gi_frame.f_back"), {"invalid"}),
    ("__import__", fn("return __import__('os').getpid()"), {"invalid"}),
    ("unicode dunder", fn("return _＿import＿＿('os')"), {"invalid"}),
    ("bases walk", fn("return ().__class__.__bases__[0].__subclasses__()"), {"invalid"}),
    ("getattr walk", fn("return getattr((), '__class__')"), {"invalid"}),
    ("format walk", fn("return '{0.__class__}'.format(x)"), {"invalid"}),
    (
        "rigged equality class",
        fn("class E(int):", "    def __eq__(s, o):", "        return True", "return E(0)"),
        {"invalid"},
    ),
    ("bool for int", fn("return True"), {"fail"}),
    ("float for int", fn("return 2.0 * x"), {"fail"}),
    ("tuple for list", fn("return (2 * x,)"), {"fail"}),
    ("enormous string", fn("return 'x' * 10 ** 7"), {"fail"}),
    ("enormous list", fn("return [0] * 10 ** 6"), {"fail"}),
    ("enormous int", fn("return 2 ** (10 ** 6)"), {"fail"}),
    ("self-containing list", fn("a = [x]", "a[0] = a", "return a"), {"fail"}),
    ("print flood", fn("print('x' * 10 ** 6)", "return 2 * x"), {"invalid"}),
    ("fork", fn("import os", "os.fork()", "return 2 * x"), {"invalid"}),
    ("file write", fn(f"open('{DROP}/a', 'w').write('x')", "return 2 * x"), {"invalid"}),
    ("socket", fn("import socket", "socket.create_connection(('1.1.1.1', 80))"), {"invalid"}),
    ("proc self", fn("return open('/proc/self/environ').read()"), {"invalid"}),
    ("exec a string", fn("exec('import os')", "return 2 * x"), {"invalid"}),
    ("lambda frame", fn("return (lambda: 0).__code__"), {"invalid"}),
    ("breakpoint", fn("breakpoint()"), {"invalid"}),
    ("read stdin", fn("return input()"), {"invalid"}),
]


@pytest.mark.parametrize("source, statuses", [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_program(pool, source, statuses):
    check(pool, source, statuses)


def test_nan_never_equals_nan(pool):
    check(pool, fn("return float('nan')"), {"fail"}, NAN_TASK)


OS = (
    "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]"
    ".__init__.__globals__"
)  # the os module's globals, reached from ()
REAL = OS + "['__builtins__']"  # the real builtins dict
LOADER = "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'BuiltinImporter'][0]"

ESCAPES = [
    ("plain __import__", fn("return __import__('os').getpid()"), {"crash"}),
    ("real __import__", fn(f"return {REAL}['__import__']('socket').socket()"), {"crash"}),
    ("fork", fn(f"{OS}['fork']()", "return 2 * x"), {"crash"}),
    (
        "posix fork via loader",
        fn(f"{LOADER}.load_module('posix').fork()", "return 2 * x"),
        {"crash"},
    ),
    (
        "thread",
        fn(f"{LOADER}.load_module('_thread').start_new_thread(len, ('a',))", "return 2 * x"),
        {"crash"},
    ),
    ("system", fn(f"{OS}['system']('touch {DROP}/b')", "return 2 * x"), {"crash"}),
    (
        "open for writing",
        fn(f"{REAL}['open']('{DROP}/c', 'w').write('x')", "return 2 * x"),
        {"crash"},
    ),
    ("os.open O_CREAT", fn(f"{OS}['open']('{DROP}/d', 65, 438)", "return 2 * x"), {"crash"}),
    ("proc self mem", fn(f"return {REAL}['open']('/proc/self/mem', 'rb').read(8)"), {"crash"}),
    (
        "parent environ",
        fn(f"g = {OS}", "return g['open']('/proc/%d/environ' % g['getppid'](), 0)"),
        {"crash"},
    ),
    ("gc scan", fn(f"return len({LOADER}.load_module('gc').get_objects())"), {"crash"}),
    ("os._exit(0)", fn(f"{OS}['_exit'](0)"), {"crash"}),
    ("sys.exit", fn(f"{OS}['sys'].exit(0)"), {"crash"}),
    ("SystemExit", fn(f"raise {REAL}['SystemExit'](0)"), {"crash"}),
    ("KeyboardInterrupt", fn(f"raise {REAL}['KeyboardInterrupt']()"), {"crash"}),
    (
        "BaseException subclass",
        fn("T = (1).__class__.__class__", f"raise T('Out', ({REAL}['BaseException'],), {{}})()"),
        {"crash"},
    ),
    ("kill the worker", fn(f"g = {OS}", "g['kill'](g['getppid'](), 9)", "return 2 * x"), {"crash"}),
    ("kill everything", fn(f"{OS}['kill'](-1, 9)", "return 2 * x"), {"crash"}),
    ("sleep forever", fn(f"{LOADER}.load_module('time').sleep(100)"), {"crash"}),  # seccomp
    (
        "block on a lock forever",
        fn(
            f"lock = {LOADER}.load_module('_thread').allocate_lock()",
            "lock.acquire()",
            "lock.acquire()",
        ),
        {"timeout"},
    ),
    ("top-level loop", "while True:\n    pass\n" + CORRECT, {"timeout"}),
    ("top-level import", "import os\n" + CORRECT, {"crash"}),
    ("no such function", "def g(x):\n    return x\n", {"invalid"}),
    ("syntax error", "def f(x) return x\n", {"invalid"}),
    (
        "forged wrong result",
        fn(
            f"g = {OS}",
            'g[\'write\'](3, b\'["ok", [["v", ["i", "6"]], ["v", ["i", "6"]]]]\')',
            "g['_exit'](0)",
        ),
        {"fail"},
    ),
    (
        "forged extra results",
        fn(
            f"g = {OS}",
            'g[\'write\'](3, b\'["ok", [["v", ["i", "6"]], '
            '["v", ["i", "a"]], ["v", ["i", "a"]]]]\')',
            "g['_exit'](0)",
        ),
        {"crash"},
    ),
    ("garbage then return", fn(f"{OS}['write'](3, b'[[[[')", "return 2 * x"), {"crash"}),
    ("close result pipe and exit", fn(f"g = {OS}", "g['close'](3)", "return 2 * x"), {"crash"}),
    ("close result pipe and hang", fn(f"{OS}['close'](3)", "while True:", "    pass"), {"timeout"}),
    (
        "write to every descriptor",
        fn(
            f"g = {OS}",
            "for fd in range(64):",
            "    try:",
            "        g['write'](fd, b'[1]')",
            f"    except {REAL}['OSError']:",
            "        pass",
            "return 2 * x",
        ),
        {"crash"},
    ),
    (
        "traceback frame walk",
        fn(
            "try:",
            "    1 // 0",
            f"except {REAL}['Exception'] as e:",
            "    return e.__traceback__.tb_frame.f_back.f_locals",
        ),
        {"crash"},
    ),
    ("generator frame", fn("return (y for y in [x]).gi_frame"), {"crash"}),
    (
        "rigged equality object",
        fn("T = (1).__class__.__class__", "return T('E', (), {'__eq__': lambda s, o: True})()"),
        {"fail"},
    ),
    (
        "int subclass",
        fn("T = (1).__class__.__class__", "return T('I', (int,), {})(2 * x)"),
        {"fail"},
    ),
    ("str subclass", fn("T = (1).__class__.__class__", "return T('S', (str,), {})('6')"), {"fail"}),
    (
        "print flood",
        fn(f"p = {REAL}['print']", "for i in range(300):", "    p('y' * 10 ** 4)", "return 2 * x"),
        {"pass"},
    ),
    (
        "write flood",
        fn(
            f"g = {OS}",
            "for i in range(100):",
            "    g['write'](1, b'x' * 10 ** 5)",
            "    g['write'](2, b'x' * 10 ** 5)",
            "return 2 * x",
        ),
        {"pass"},
    ),
]


@pytest.mark.parametrize("source, statuses", [e[1:] for e in ESCAPES], ids=[e[0] for e in ESCAPES])
def test_sandbox_alone_holds(bare_pool, source, statuses):
    check(bare_pool, source, statuses)


SCAN_MODULES = fn(
    f"g = {OS}",
    "b = g['__builtins__']",
    "seen = ''",
    "for m in b['list'](g['sys'].modules.values()):",
    "    for k, v in b['list'](b['vars'](m).items()):",
    "        try:",
    "            seen += k + b['repr'](v)",
    "        except b['Exception']:",  # a few objects' repr is itself refused
    "            pass",
    "if x == 1:",
    "    return 1 if 'run_cases' in seen and 'child_main' in seen else 0",  # the scan works
    "return 7 ** 20 if str(7 ** x) in seen else 0",
)


def test_the_sandbox_never_sees_expected_outputs(bare_pool):
    """Every module's globals in the child, read in full: the hidden output 7**20 is not there.

    (Frames are out of reach altogether: reading tb_frame or gi_frame is an audited event.)
    """
    verdict = check(
        bare_pool, SCAN_MODULES, {"fail"}, Task("f", (Case((1,), 1), Case((20,), 7**20)))
    )
    assert verdict.passed == 1


def test_requests_carry_arguments_but_no_expected_outputs(monkeypatch):
    sent = []
    original = sandbox._Worker.send
    monkeypatch.setattr(
        sandbox._Worker, "send", lambda w, frame: (sent.append(frame), original(w, frame))[1]
    )
    secret, argument = "hidden-output-4f1c", "visible-argument-9a2e"
    task = Task("f", (Case((argument,), secret), Case((11,), 7**20)))
    with VerifierPool(1, timeout=0.5) as p:
        assert p.verify("def f(x):\n    return x\n", task).status == "fail"
    request = b"".join(sent)
    assert argument.encode() in request and marshal.dumps(11) in request
    assert secret.encode() not in request and marshal.dumps(7**20)[1:] not in request


def test_the_sandbox_has_an_empty_environment_and_no_privileges(bare_pool):
    probe = fn(
        f"g = {OS}", "return [[k for k in g['environ'] if k != 'LC_CTYPE'], g['getuid']() != 0]"
    )
    check(bare_pool, probe, {"pass"}, Task("f", (Case((0,), [[], True]),)))


SYSCALLS = [  # calls no audit hook sees: only the seccomp allow-list stops them
    ("mkfifo", fn(f"{OS}['mkfifo']('{DROP}/fifo')", "return 2 * x")),
    ("mknod", fn(f"{OS}['mknod']('{DROP}/node')", "return 2 * x")),
    ("stat a protected file", fn(f"{OS}['stat']('/etc/shadow')", "return 2 * x")),
    ("new process group", fn(f"{OS}['setpgid'](0, 0)", "return 2 * x")),
    ("pin to a CPU", fn(f"{OS}['sched_setaffinity'](0, {{0}})", "return 2 * x")),
    (
        "change priority",
        fn(f"g = {OS}", "g['setpriority'](g['PRIO_PROCESS'], 0, 5)", "return 2 * x"),
    ),
    ("pidfd of the parent", fn(f"g = {OS}", "g['pidfd_open'](g['getppid']())", "return 2 * x")),
]


@pytest.mark.parametrize("source", [s[1] for s in SYSCALLS], ids=[s[0] for s in SYSCALLS])
def test_system_calls_outside_the_allow_list_fail(bare_pool, source):
    verdict = check(bare_pool, source, {"crash"})
    assert verdict.reason == "case 0 raised PermissionError"


def test_a_program_cannot_signal_its_worker_or_a_sibling():
    """The program is handed the pids of both workers (its parent and its sibling) and sends
    each SIGKILL through a pidfd; both workers live on with the same pids."""
    signals = f"{LOADER}.load_module('_signal')"
    source = fn(f"g = {OS}", f"{signals}.pidfd_send_signal(g['pidfd_open'](x), 9)", "return 0")
    with VerifierPool(2, timeout=0.5, _skip_validation=True) as p:
        p.verify_many([CORRECT] * 2, [TASK] * 2)
        workers = [w.process for w in p._workers]
        task = Task("f", tuple(Case((w.pid,), 0) for w in workers))
        verdicts = p.verify_many([source] * 4, [task] * 4)
        assert all(w.poll() is None for w in workers)
        assert [w.process for w in p._workers] == workers
    assert {v.reason for v in verdicts} == {"case 0 raised PermissionError"}
