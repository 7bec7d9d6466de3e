"""`rvm debug` at its interactive prompt, driven through a pseudo-terminal (pexpect): the
prompt shows t and the direction, stops print what the screen should show, `set` asks for
confirmation, Ctrl-C interrupts a long run and the session goes on."""
from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def spawn(*args: str):
    child = pexpect.spawn(sys.executable, ["-m", "rvm.cli", "debug", *args], cwd=str(ROOT),
                          encoding="utf-8", timeout=20, dimensions=(40, 120),
                          env={"TERM": "xterm-256color", "PATH": "/usr/bin:/bin",
                               "PYTHONPATH": str(ROOT)},
                          # a test run started in the background inherits SIGINT ignored,
                          # and Python then installs no KeyboardInterrupt handler
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return child


def screen(child) -> str:
    """What the terminal showed since the last expect, without colour codes."""
    return ANSI.sub("", child.before or "")


def test_interactive_session_shows_stops_and_prompt():
    child = spawn("programs/rfib.rasm", "n=5")
    try:
        child.expect_exact("(rdb t=0 >) ")
        assert "=>   10 func main() {" in screen(child)
        child.sendline("break if2.fi")
        child.expect_exact("(rdb t=0 >) ")
        child.sendline("c")
        child.expect_exact("(rdb t=38 >) ")
        shown = screen(child)
        assert "Breakpoint 1 (if2.fi)" in shown
        assert "programs/lib/rfib.rasm:17" in shown and "join if2.endthen if n <= 2" in shown
        assert "changed: out 0 -> 1" in shown
        child.sendline("")                            # an empty line repeats `c`
        child.expect_exact("(rdb t=54 >) ")
        child.sendline("direction toggle")
        child.expect_exact("(rdb t=54 <) ")
        child.sendline("s")                           # now steps backward
        child.expect_exact("(rdb t=53 <) ")
        assert "Stepped 1 instruction backward" in screen(child)
        child.sendline("rs")                          # against the direction: forward
        child.expect_exact("(rdb t=54 <) ")
        child.sendline("list")
        child.expect_exact("(rdb t=54 <) ")
        assert re.search(r"=>B\s+17\s+\} fi n <= 2", screen(child))
        child.sendline("set n = 7")
        child.expect_exact("(y or n) ")
        child.sendline("n")
        child.expect_exact("(rdb t=54 <) ")
        assert "not changed" in screen(child)
        child.sendline("p n")
        child.expect_exact("(rdb t=54 <) ")
        assert "n = 1" in screen(child)
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_ctrl_c_interrupts_a_long_run():
    child = spawn("programs/accumulate.rasm", "n=2000000000")
    try:
        child.expect_exact("(rdb t=0 >) ")
        child.sendline("continue")
        child.expect_exact("continue")
        import time
        time.sleep(0.5)
        child.sendintr()
        child.expect(r"\(rdb t=(\d+) >\) ")
        t = int(child.match.group(1))
        assert "Interrupted after" in screen(child) and t > 1000
        child.sendline("reverse-stepi 3")
        child.expect_exact(f"(rdb t={t - 3} >) ")
        child.sendline("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
