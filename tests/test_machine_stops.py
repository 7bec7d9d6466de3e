"""Breakpoints and watched cells stop the machine in both directions (the debugger's stops)."""
import pytest

import rvm
from rvm.machine import Machine

FIB = "programs/rfib.rasm"


def machine():
    m = Machine(rvm.load(FIB))
    m.reset({"n": 10})
    return m


def test_breakpoint_stops_every_time_in_both_directions():
    m = machine()
    pc = next(pc for pc, name in m.program.labels.items() if name == "if2.fi")
    m.set_breakpoints([pc])
    forward = []
    while m.advance(+1) == "break":
        assert m.pc == pc
        forward.append(m.t)
    assert m.status == "end" and len(forward) > 3
    backward = []
    while m.advance(-1) == "break":
        backward.append(m.t)
    assert m.status == "start" and m.read("n") == 10
    # backward stops before running the same instruction's inverse: one step later in t
    assert sorted(backward) == [t + 1 for t in forward]


def test_watch_reports_each_write_and_its_writer_in_both_directions():
    m = machine()
    m.set_watch([m.address_of("out")])
    values = []
    while m.advance(+1) == "watch":
        index, pc = m.watch_hit
        assert index == 0 and m.program.op_at(pc).name == "inc.i"
        values.append(m.read("out"))
    assert values == list(range(1, 56))
    back = []
    while m.advance(-1) == "watch":
        back.append(m.read("out"))
    assert back == list(range(54, -1, -1))


def test_limit_and_clearing():
    m = machine()
    m.set_breakpoints([])
    assert m.advance(+1, max_steps=5) == "limit" and m.t == 5
    assert m.advance(+1) == "boundary"
    with pytest.raises(IndexError):
        m.set_breakpoints([10 ** 6])
    with pytest.raises(IndexError):
        m.address_of("out", 1)


def test_breakpoint_at_mains_first_instruction_stops_on_entry_both_ways():
    m = Machine(rvm.load("programs/oscillator.rasm"))
    m.reset({"steps": 3})
    main = m.program.functions[m.program.main]
    first, last = main.begin + 1, main.end - 1
    assert first < last
    m.set_breakpoints([first, last])
    assert m.advance(+1) == "break" and m.pc == first and m.t == 1
    assert m.advance(+1) == "break" and m.pc == last
    assert m.advance(+1) == "boundary" and m.status == "end"
    assert m.advance(-1) == "break" and m.pc == last       # entering main from the end
    assert m.advance(-1) == "break" and m.pc == first
    assert m.advance(-1) == "boundary" and m.status == "start"
