"""`in_fresh_process`: results and exceptions come back; the child dies with its parent."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glmflash.processes import in_fresh_process


def test_the_result_comes_back_from_another_process():
    assert in_fresh_process(os.getpid) != os.getpid()
    assert in_fresh_process(divmod, 17, 5) == (3, 2)


def test_an_exception_comes_back_with_its_type_and_the_childs_traceback():
    with pytest.raises(ValueError, match="invalid literal") as info:
        in_fresh_process(int, "seventeen")
    assert "Traceback" in str(info.value.__cause__)


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie has died)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_child_dies_when_its_parent_is_killed():
    """A parent killed with SIGKILL cannot stop its stage's process: the kernel must."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from glmflash.processes import in_fresh_process; "
            "in_fresh_process(time.sleep, 120)",
        ]
    )
    kids: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while not (kids := children(parent.pid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert kids, "the parent started no process"
        time.sleep(3)  # past the child's start-up, into time.sleep
        kids = children(parent.pid)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while any(alive(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(k) for k in kids)
    finally:
        parent.kill()
        for k in filter(alive, kids):  # a failed test leaves no sleeper behind
            os.kill(k, signal.SIGKILL)
