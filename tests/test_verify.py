"""The bytecode verifier: a valid program passes; every rule rejects a mutated program with a
message naming the pc (or the table entry) and the problem."""
from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isa.functions import CMP_ALWAYS, CMP_GE, CMP_LT, FN1_BY_NAME, cond_word
from isa.table import OP_BY_NAME, OPS, ROW_WIDTH
from isa.types import FIXED, FLOAT, INT, LNS
from rvm.errors import FormatError, InvalidBytecode
from rvm.program import (
    INPUT,
    OUTPUT,
    Arg,
    CallSite,
    Const,
    Function,
    Global,
    Local,
    Param,
    Program,
    Trace,
    XEntry,
    operand,
)
from rvm.verify import check, verify


# ---- a small hand-built program ------------------------------------------------------------
def G(a):
    return operand(0, a)


def L(o):
    return operand(1, o)


def P(i):
    return operand(2, i)


def X(i):
    return operand(3, i)


def N(i):
    return operand(4, i)


def ins(name, *ops):
    row = [OP_BY_NAME[name].code, *ops]
    assert len(row) <= ROW_WIDTH
    return row + [0] * (ROW_WIDTH - len(row))


ALWAYS = cond_word(CMP_ALWAYS, INT)
GE_INT = cond_word(CMP_GE, INT)
LT_INT = cond_word(CMP_LT, INT)
SIN = FN1_BY_NAME["sin"].id

# static memory: n:int@0  out:int@1  x:fixed[3]@2..4  i:int@5 | two:int@6  c:fixed[2]@7..8
N_, OUT, XA, I_, TWO, C0 = 0, 1, 2, 5, 6, 7


def sample_program() -> Program:
    """Two functions exercising every operand mode, calls, traces and an if/else."""
    f_code = [
        ins("begin", 0),                               # 0
        ins("add.i", P(0), P(2)),                      # 1  a += k
        ins("add.i", L(0), N(1)),                      # 2  t += len(b)
        ins("jmp", GE_INT, L(0), G(TWO), 6),           # 3  if t < two (else at 6)
        ins("add.x", X(0), L(1)),                      # 4    b[t] += u
        ins("jmp", ALWAYS, 0, 0, 8),                   # 5    jmp fi
        ins("join", ALWAYS, 0, 0, 3),                  # 6  else:
        ins("sub.x", X(0), L(1)),                      # 7    b[t] -= u
        ins("join", LT_INT, L(0), G(TWO), 5),          # 8  fi t < two
        ins("addfn.x", L(1), G(C0), SIN),              # 9  u += sin(c[0])
        ins("subfn.x", L(1), G(C0), SIN),              # 10 u -= sin(c[0])
        ins("rotl.i", P(0), 5),                        # 11
        ins("rotr.i", P(0), 5),                        # 12
        ins("trace", 0),                               # 13
        ins("sub.i", L(0), N(1)),                      # 14
        ins("end", 0),                                 # 15
    ]
    main_code = [
        ins("begin", 1),                               # 16
        ins("call", 0),                                # 17 f(i, x, n)
        ins("uncall", 0),                              # 18
        ins("call", 1),                                # 19 f(out, x, two)
        ins("uncall", 1),                              # 20
        ins("cvt.xi", G(XA), G(N_)),                   # 21 x[0] += fixed(n)
        ins("uncvt.xi", G(XA), G(N_)),                 # 22
        ins("addmul.x", G(XA + 1), G(C0), G(C0 + 1)),  # 23 x[1] += c[0] * c[1]
        ins("submul.x", G(XA + 1), G(C0), G(C0 + 1)),  # 24
        ins("add.x", X(1), G(C0)),                     # 25 x[i] += c[0]
        ins("sub.x", X(1), G(C0)),                     # 26
        ins("push", G(I_)),                            # 27
        ins("pop", G(I_)),                             # 28
        ins("assert", LT_INT, G(I_), G(TWO)),          # 29
        ins("nop"),                                    # 30
        ins("end", 1),                                 # 31
    ]
    code = np.array(f_code + main_code, dtype=np.int64)
    n = len(code)
    lines = np.zeros((n, 3), dtype=np.int32)
    lines[:, 1] = np.arange(1, n + 1)
    lines[:, 2] = 1
    return Program(
        fraction_bits=32,
        code=code,
        globals=[Global("n", INT, N_, None, INPUT, [5]),
                 Global("out", INT, OUT, None, OUTPUT),
                 Global("x", FIXED, XA, 3),
                 Global("i", INT, I_, None)],
        consts=[Const("two", INT, TWO, None, [2]),
                Const("c", FIXED, C0, 2, [1 << 31, 3 << 30])],
        functions=[Function("f", 0, 15,
                            [Param("a", INT, False, True), Param("b", FIXED, True, True),
                             Param("k", INT, False, False)],
                            [Local("t", INT, 0, None), Local("u", FIXED, 1, None)], 2),
                   Function("main", 16, 31, [], [], 0)],
        main=1,
        xtab=[XEntry(P(1), -1, L(0)), XEntry(G(XA), 3, G(I_))],
        callsites=[CallSite(0, [Arg(G(I_)), Arg(G(XA), 3), Arg(G(N_))]),
                   CallSite(0, [Arg(G(OUT)), Arg(G(XA), 3), Arg(G(TWO))])],
        traces=[Trace("t is", [L(0), P(2)])],
        lines=lines,
        files=["sample.rasm"],
        labels={6: "else", 8: "fi", 16: "main"},
    )


def problems_of(p) -> str:
    with pytest.raises(InvalidBytecode) as ei:
        verify(p)
    assert not isinstance(ei.value, FormatError)
    return "\n".join(ei.value.problems)


def rejects(p, *fragments) -> str:
    text = problems_of(p)
    for frag in fragments:
        assert frag in text, f"{frag!r} not in:\n{text}"
    return text


def mutated(**changes):
    p = sample_program()
    for k, v in changes.items():
        setattr(p, k, v)
    return p


def with_row(pc, row):
    p = sample_program()
    p.code[pc] = row
    return p


# ---- valid programs ------------------------------------------------------------------------
def test_sample_program_is_valid():
    p = sample_program()
    assert check(p) == []
    verify(p)


def test_minimal_program_is_valid():
    p = Program(0, np.array([ins("begin", 0), ins("end", 0)]), [], [],
                [Function("main", 0, 1, [], [], 0)], 0)
    verify(p)


def test_program_without_lines_is_valid():
    verify(mutated(lines=None))


def test_example_programs_verify():
    """Whatever the assembler makes of programs/*.rasm passes the verifier."""
    from pathlib import Path

    from assembler import assemble_file
    paths = sorted((Path(__file__).resolve().parent.parent / "programs").glob("*.rasm"))
    assert len(paths) >= 8
    for path in paths:
        assert check(assemble_file(path)) == [], path


# ---- instruction words ---------------------------------------------------------------------
def test_unknown_opcode():
    rejects(with_row(1, [len(OPS) + 5, 0, 0, 0, 0, 0]), "pc 1 (opcode", "unknown opcode")
    rejects(with_row(1, [-1, 0, 0, 0, 0, 0]), "pc 1 (opcode -1)")


def test_unused_slot_must_be_zero():
    rejects(with_row(1, ins("add.i", P(0), P(2))[:3] + [7, 0, 0]),
            "pc 1 (add.i): unused slot 3 is 7")
    rejects(with_row(30, ins("nop")[:5] + [1]), "pc 30 (nop): unused slot 5")


def test_g_address_outside_static_memory():
    rejects(with_row(21, ins("cvt.xi", G(XA), G(9))), "pc 21 (cvt.xi): operand 2",
            "G address 9 is outside static memory")


def test_write_to_constant():
    rejects(with_row(21, ins("cvt.xi", G(C0), G(N_))), "pc 21 (cvt.xi): operand 1",
            "writes constant 'c'")
    rejects(with_row(27, ins("push", G(TWO))), "pc 27 (push)", "writes constant 'two'")


def test_reading_a_constant_is_fine():
    p = with_row(21, ins("cvt.xi", G(XA), G(TWO)))
    p.code[22] = ins("uncvt.xi", G(XA), G(TWO))
    verify(p)


def test_l_offset_outside_frame():
    rejects(with_row(2, ins("add.i", L(2), N(1))), "pc 2 (add.i): operand 1",
            "L offset 2 is outside the frame of 'f' (size 2)")


def test_l_operand_in_frameless_main():
    rejects(with_row(27, ins("push", L(0))), "pc 27 (push)", "outside the frame of 'main'")


def test_parameter_number_out_of_range():
    rejects(with_row(1, ins("add.i", P(0), P(3))), "pc 1 (add.i): operand 2",
            "parameter 3 does not exist")
    rejects(with_row(2, ins("add.i", L(0), N(7))), "pc 2 (add.i)", "parameter 7 does not exist")


def test_parameter_in_main():
    rejects(with_row(27, ins("push", P(0))), "pc 27 (push)", "parameter 0 does not exist")


def test_n_operand_is_never_a_target():
    rejects(with_row(2, ins("add.i", N(1), L(0))), "pc 2 (add.i): operand 1", "read-only")


def test_n_operand_of_scalar_parameter():
    rejects(with_row(2, ins("add.i", L(0), N(0))), "pc 2 (add.i)", "is not an array")


def test_p_operand_to_array_parameter_where_a_cell_is_needed():
    rejects(with_row(1, ins("add.i", P(1), P(2))), "pc 1 (add.i): operand 1",
            "parameter 'b' is an array where a cell is needed")


def test_write_to_parameter_not_declared_written():
    rejects(with_row(1, ins("add.i", P(2), P(0))), "pc 1 (add.i): operand 1",
            "writes parameter 'k', which is not declared written")


def test_invalid_operand_mode():
    rejects(with_row(2, ins("add.i", L(0), operand(6, 0))), "pc 2 (add.i): operand 2",
            "invalid operand mode 6")
    rejects(with_row(2, ins("add.i", L(0), -8)), "pc 2 (add.i): operand 2", "negative payload")


def test_x_index_out_of_range():
    rejects(with_row(25, ins("add.x", X(2), G(C0))), "pc 25 (add.x): operand 1",
            "xtab index 2 is out of range")


def test_xtab_static_base_outside_memory():
    p = sample_program()
    p.xtab[1] = XEntry(G(XA), 30, G(I_))
    rejects(p, "xtab[1]: base: G array [2, 32) is outside static memory",
            "pc 25 (add.x): operand 1 (y): uses invalid xtab[1]")


def test_xtab_static_base_across_objects():
    p = sample_program()
    p.xtab[1] = XEntry(G(XA), 4, G(I_))
    rejects(p, "pc 25 (add.x)", "is not inside one global or constant")


def test_xtab_index_word_must_be_scalar_mode():
    p = sample_program()
    p.xtab[1] = XEntry(G(XA), 3, X(0))
    rejects(p, "xtab[1]: index word", "not a scalar operand")


def test_xtab_index_must_be_int():
    p = sample_program()
    p.xtab[1] = XEntry(G(XA), 3, G(XA))
    rejects(p, "pc 25 (add.x): operand 1", "xtab[1] index has type fixed, not int")


def test_xtab_parameter_base_needs_length_minus_one():
    p = sample_program()
    p.xtab[0] = XEntry(P(1), 3, L(0))
    rejects(p, "xtab[0]: base: a parameter array has length -1")


def test_xtab_parameter_base_must_be_an_array():
    p = sample_program()
    p.xtab[0] = XEntry(P(0), -1, L(0))
    rejects(p, "pc 4 (add.x): operand 1", "xtab[0] base: parameter 'a' is not an array")


def test_xtab_local_base_outside_frame():
    p = sample_program()
    p.xtab[0] = XEntry(L(1), 5, L(0))
    rejects(p, "pc 4 (add.x): operand 1", "L array [1, 6) is outside the frame of 'f'")


def test_xtab_write_to_constant_array():
    p = sample_program()
    p.xtab[1] = XEntry(G(C0), 2, G(I_))
    rejects(p, "pc 25 (add.x): operand 1", "writes constant array 'c'")


def test_xtab_index_invalid_in_context():
    p = sample_program()
    p.xtab[1] = XEntry(G(XA), 3, L(0))       # main has no frame
    rejects(p, "pc 25 (add.x)", "xtab[1] index: L offset 0 is outside the frame of 'main'")


def test_k_out_of_range():
    rejects(with_row(11, ins("rotl.i", P(0), 64)), "pc 11 (rotl.i): operand 2 (k)",
            "bit count 64 is not in 0..63")
    rejects(with_row(12, ins("rotr.i", P(0), -1)), "pc 12 (rotr.i)", "bit count -1")


def test_fn_id_out_of_range():
    rejects(with_row(9, ins("addfn.x", L(1), G(C0), 99)), "pc 9 (addfn.x): operand 3 (fn)",
            "function id 99")


def test_fn_not_defined_for_type():
    p = sample_program()
    p.code[1] = ins("addfn.i", P(0), P(2), FN1_BY_NAME["exp"].id)
    rejects(p, "pc 1 (addfn.i): operand 3 (fn): function exp does not exist for int")


def test_invalid_condition_word():
    rejects(with_row(29, ins("assert", 7, G(I_), G(TWO))), "pc 29 (assert): invalid condition")
    rejects(with_row(29, ins("assert", 64 | 1, G(I_), G(TWO))), "pc 29 (assert)",
            "invalid condition word")
    rejects(with_row(29, ins("assert", -1, G(I_), G(TWO))), "pc 29 (assert)",
            "invalid condition word")


def test_condition_operand_type_must_match_condition_type():
    rejects(with_row(29, ins("assert", cond_word(CMP_LT, FIXED), G(I_), G(TWO))),
            "pc 29 (assert): operand 2 (a): cell has type int, assert needs fixed")


def test_always_condition_operands_must_be_zero_or_valid():
    rejects(with_row(5, ins("jmp", ALWAYS, G(99), 0, 8)), "pc 5 (jmp): operand 2",
            "G address 99 is outside static memory")
    verify(with_row(5, ins("jmp", ALWAYS, G(XA), G(N_), 8)))     # valid words, any type


def test_pc_operand_outside_function():
    rejects(with_row(3, ins("jmp", GE_INT, L(0), G(TWO), 20)), "pc 3 (jmp): operand 4 (pc)",
            "pc 20 is outside the function 'f'")
    rejects(with_row(3, ins("jmp", GE_INT, L(0), G(TWO), 500)), "pc 3 (jmp)",
            "pc 500 is outside the code")


def test_callsite_index_out_of_range():
    rejects(with_row(17, ins("call", 2)), "pc 17 (call)", "callsite index 2 is out of range")


def test_trace_index_out_of_range():
    rejects(with_row(13, ins("trace", 1)), "pc 13 (trace): operand 1 (trace)",
            "trace index 1 is out of range")


def test_trace_operand_invalid_in_context():
    p = sample_program()
    p.code[30] = ins("trace", 0)         # trace 0 reads L(0), P(2): not in main
    rejects(p, "pc 30 (trace): operand 1 (trace): trace 0 operand 0: L offset 0",
            "trace 0 operand 1: parameter 2 does not exist")


def test_func_operand_must_be_own_index():
    rejects(with_row(15, ins("end", 1)), "pc 15 (end): operand 1 (func): names function 1")
    rejects(with_row(0, ins("begin", 5)), "pc 0 (begin)", "function index 5 is out of range")


# ---- operand types -------------------------------------------------------------------------
def test_global_operand_type_mismatch():
    rejects(with_row(23, ins("addmul.x", G(XA + 1), G(TWO), G(C0 + 1))),
            "pc 23 (addmul.x): operand 2 (a): cell has type int, addmul.x needs fixed")


def test_local_operand_type_mismatch():
    rejects(with_row(2, ins("add.i", L(1), N(1))),
            "pc 2 (add.i): operand 1 (y): cell has type fixed, add.i needs int")


def test_parameter_operand_type_mismatch():
    rejects(with_row(1, ins("add.x", P(0), L(1))),
            "pc 1 (add.x): operand 1 (y): cell has type int, add.x needs fixed")


def test_indexed_operand_type_from_base():
    rejects(with_row(4, ins("add.i", X(0), L(0))),
            "pc 4 (add.i): operand 1 (y): cell has type fixed, add.i needs int")


def test_conversion_types_are_dst_src():
    rejects(with_row(21, ins("cvt.ix", G(XA), G(N_))),
            "pc 21 (cvt.ix): operand 1 (y): cell has type fixed, cvt.ix needs int",
            "pc 21 (cvt.ix): operand 2 (a): cell has type int, cvt.ix needs fixed")


def test_n_operand_is_int():
    rejects(with_row(4, ins("add.x", X(0), N(1))),
            "pc 4 (add.x): operand 2 (a): cell has type int, add.x needs fixed")


def test_untyped_ops_take_any_type():
    p = sample_program()
    p.code[27], p.code[28] = ins("push", G(XA + 2)), ins("pop", G(XA + 2))
    verify(p)


# ---- functions and structure ---------------------------------------------------------------
def test_gap_between_functions():
    p = sample_program()
    p.functions[0].end = 14
    p.code[14] = ins("end", 0)
    rejects(p, "pcs 15..15 are not inside any function")


def test_overlapping_functions():
    p = sample_program()
    p.functions[1].begin = 15
    rejects(p, "function 'main': range [15, 31] overlaps another function")


def test_function_range_outside_code():
    p = sample_program()
    p.functions[1].end = 40
    rejects(p, "function 'main': range [begin 16, end 40] is not inside the code",
            "pcs 16..31 are not inside any function")


def test_begin_missing():
    rejects(with_row(16, ins("nop")), "pc 16 (nop): function 'main' starts here, needs 'begin'")


def test_end_missing():
    rejects(with_row(15, ins("nop")), "pc 15 (nop): function 'f' ends here, needs 'end'")


def test_begin_end_inside_a_body():
    rejects(with_row(30, ins("end", 1)), "pc 30 (end): end inside the body of function 'main'")
    rejects(with_row(30, ins("begin", 1)), "pc 30 (begin): begin inside the body")


def test_main_index_invalid():
    rejects(mutated(main=2), "main 2 is not a function index")
    rejects(mutated(main=-1), "main -1 is not a function index")


def test_main_with_parameters():
    rejects(mutated(main=0), "main function 'f' has parameters")


def test_duplicate_function_names():
    p = sample_program()
    p.functions[1].name = "f"
    rejects(p, "function name 'f' is declared more than once")


def test_local_outside_frame():
    p = sample_program()
    p.functions[0].locals.append(Local("w", INT, 1, 4))
    rejects(p, "function 'f': local 'w': cells [1, +4) are outside the frame (size 2)")


def test_overlapping_locals():
    p = sample_program()
    p.functions[0].locals.append(Local("w", INT, 1, None))
    rejects(p, "function 'f': local 'w' at [1, 2) overlaps local 'u'")


def test_bad_parameter():
    p = sample_program()
    p.functions[0].params[0] = Param("a", 9, False, True)
    rejects(p, "function 'f': parameter 0: invalid type 9")


# ---- forks and joins -----------------------------------------------------------------------
def test_jmp_target_must_be_a_join():
    rejects(with_row(3, ins("jmp", GE_INT, L(0), G(TWO), 7)),
            "pc 3 (jmp): pc operand 7 is not a join (it is sub.x)")


def test_join_must_name_its_jmp():
    p = sample_program()
    p.code[6] = ins("join", ALWAYS, 0, 0, 5)
    rejects(p, "pc 3 (jmp): the join at 6 names 5, not 3", "pc 6 (join): the jmp at 5 names 8")


def test_join_source_must_be_a_jmp():
    rejects(with_row(8, ins("join", LT_INT, L(0), G(TWO), 7)),
            "pc 8 (join): pc operand 7 is not a jmp", "pc 5 (jmp): the join at 8 names 7")


def test_unconditional_jmp_must_be_followed_by_join_or_end():
    p = sample_program()
    # swap the order so `jmp always` is followed by a data instruction
    p.code[4], p.code[5] = p.code[5].copy(), p.code[4].copy()
    text = rejects(p, "pc 4 (jmp): an unconditional jmp must be followed by a join or an end")
    assert "pc 3 (jmp)" not in text


def test_unconditional_join_must_follow_jmp_or_begin():
    p = sample_program()
    p.code[6], p.code[7] = p.code[7].copy(), p.code[6].copy()
    p.code[3, 4] = 7              # re-pair the moved join
    p.code[5] = ins("jmp", ALWAYS, 0, 0, 8)
    rejects(p, "pc 7 (join): an unconditional join must follow a jmp or a begin")


def test_unconditional_jmp_before_end_and_join_after_begin_are_fine():
    p = Program(0, np.array([ins("begin", 0), ins("join", ALWAYS, 0, 0, 3), ins("nop"),
                             ins("jmp", ALWAYS, 0, 0, 1), ins("end", 0)]), [], [],
                [Function("main", 0, 4, [], [], 0)], 0)
    verify(p)
    p.code[2] = ins("jmp", ALWAYS, 0, 0, 3)
    p.code[3] = ins("join", ALWAYS, 0, 0, 2)
    p.code[1] = ins("nop")
    verify(p)   # jmp always right before its join


# ---- calls ---------------------------------------------------------------------------------
def test_callsite_function_invalid():
    p = sample_program()
    p.callsites[0].func = 7
    rejects(p, "callsite 0: func 7 is not a function index",
            "pc 17 (call): uses invalid callsite 0")


def test_callsite_arity():
    p = sample_program()
    p.callsites[1].args.pop()
    rejects(p, "callsite 1: 2 arguments for 'f', which has 3 parameters",
            "pc 19 (call): uses invalid callsite 1")


def test_array_argument_for_scalar_parameter():
    p = sample_program()
    p.callsites[0].args[0] = Arg(G(XA), 3)
    rejects(p, "callsite 0: argument 0 (parameter 'a'): an array is passed to a scalar parameter")


def test_scalar_argument_for_array_parameter():
    p = sample_program()
    p.callsites[0].args[1] = Arg(G(XA))
    rejects(p, "callsite 0: argument 1 (parameter 'b'): a cell is passed to an array parameter")


def test_array_argument_outside_static_memory():
    p = sample_program()
    p.callsites[0].args[1] = Arg(G(XA), 12)
    rejects(p, "callsite 0: argument 1 (parameter 'b'): G array [2, 14) is outside static")


def test_array_argument_word_mode():
    p = sample_program()
    p.callsites[0].args[1] = Arg(X(1), 3)
    rejects(p, "callsite 0: argument 1 (parameter 'b') word 11 is not an array word")


def test_constant_bound_to_written_parameter():
    p = sample_program()
    p.callsites[1].args[0] = Arg(G(TWO))
    rejects(p, "pc 19 (call): callsite 1 argument 0: writes constant 'two'",
            "bound to parameter 'a' of 'f', which it may write")


def test_constant_array_bound_to_written_parameter():
    p = sample_program()
    p.consts[1] = Const("c", FIXED, C0, 2, [1, 2])
    p.globals[2] = Global("x", FIXED, XA, 3)
    p.callsites[1].args[1] = Arg(G(C0), 2)
    rejects(p, "pc 19 (call): callsite 1 argument 1: writes constant array 'c'")


def test_n_operand_cannot_be_passed_by_reference():
    p = sample_program()
    p.code[13] = ins("call", 2)
    p.callsites.append(CallSite(0, [Arg(P(0)), Arg(P(1), -1), Arg(N(1))]))
    rejects(p, "callsite 2: argument 2 (parameter 'k'): an array length (N operand) has no "
               "cell", "pc 13 (call): uses invalid callsite 2")


def test_unwritten_parameter_passed_on_to_written_parameter():
    p = sample_program()
    p.code[13] = ins("call", 2)
    p.callsites.append(CallSite(0, [Arg(P(2)), Arg(P(1), -1), Arg(P(0))]))
    rejects(p, "pc 13 (call): callsite 2 argument 0: writes parameter 'k', which is not "
               "declared written")


def test_recursive_call_with_parameters_is_valid():
    p = sample_program()
    p.code[13] = ins("call", 2)
    p.callsites.append(CallSite(0, [Arg(P(0)), Arg(P(1), -1), Arg(P(2))]))
    verify(p)


def test_argument_type_mismatch():
    p = sample_program()
    p.callsites[0].args[2] = Arg(G(XA + 1))
    rejects(p, "pc 17 (call): callsite 0 argument 2: fixed passed to int parameter 'k'")


def test_local_array_argument_outside_frame():
    p = sample_program()
    p.code[13] = ins("call", 2)
    p.callsites.append(CallSite(0, [Arg(P(0)), Arg(L(1), 4), Arg(P(2))]))
    rejects(p, "pc 13 (call): callsite 2 argument 1", "L array [1, 5) is outside the frame")


# ---- static memory -------------------------------------------------------------------------
def test_overlapping_globals():
    p = sample_program()
    p.globals[3] = Global("i", INT, 4, None)
    rejects(p, "global 'i' at [4, 5) overlaps global 'x' at [2, 5)")


def test_constant_outside_constant_region():
    p = sample_program()
    p.consts[0] = Const("two", INT, 3, None, [2])
    rejects(p, "constant 'two': cells [3, 4) are outside the constant region [6, 9)")


def test_global_outside_global_region():
    p = sample_program()
    p.globals[3] = Global("i", INT, 6, None)
    rejects(p, "global 'i': cells [6, 7) are outside the global region [0, 6)")


def test_invalid_global_type_and_role():
    p = sample_program()
    p.globals[1] = Global("out", 7, OUT, None, "sideways")
    rejects(p, "global 'out': invalid type 7", "global 'out': invalid role 'sideways'")


def test_default_of_wrong_length():
    p = sample_program()
    p.globals[0].default = [1, 2]
    rejects(p, "global 'n': default needs 1 values, has 2")
    p.globals[0].default = [1 << 64]
    rejects(p, "global 'n': default values must be int64 words")


def test_constant_values_of_wrong_length():
    p = sample_program()
    p.consts[1].values = [1]
    rejects(p, "constant 'c': needs 2 values, has 1")


def test_duplicate_global_names():
    p = sample_program()
    p.globals[3].name = "n"
    rejects(p, "global name 'n' is declared more than once")


def test_absurd_static_size_is_rejected_without_allocating():
    p = sample_program()
    p.globals[2] = Global("x", FIXED, XA, 1 << 40)
    rejects(p, "length 1099511627776 is not None or an integer in 0..")


# ---- top level -----------------------------------------------------------------------------
def test_lines_shape():
    rejects(mutated(lines=np.zeros((3, 3), dtype=np.int32)), "lines must be an integer array "
            "of shape (32, 3)")


def test_fraction_bits():
    rejects(mutated(fraction_bits=63), "fraction_bits 63 is not an integer in 0..62")
    rejects(mutated(fraction_bits=-1), "fraction_bits -1")


def test_labels_inside_code():
    rejects(mutated(labels={32: "past"}), "label 'past': pc 32 is outside the code")
    rejects(mutated(labels={-1: "before"}), "label 'before': pc -1")


def test_code_array_shape():
    p = sample_program()
    p.code = np.zeros((4, 5), dtype=np.int64)
    rejects(p, "code must be an int64 array of shape (n, 6)")
    p.code = sample_program().code.astype(np.int32)
    rejects(p, "code must be an int64 array")


def test_every_problem_is_reported():
    p = sample_program()
    p.code[1] = ins("add.i", P(2), P(0))          # unwritten param written
    p.code[11] = ins("rotl.i", P(0), 99)          # k out of range
    p.code[23] = ins("addmul.x", G(XA + 1), G(TWO), G(C0 + 1))   # type
    p.fraction_bits = 70
    with pytest.raises(InvalidBytecode) as ei:
        verify(p)
    e = ei.value
    assert len(e.problems) == 4, e.problems
    msg = str(e)
    assert msg.startswith("program failed verification")
    for frag in ("pc 1 (add.i)", "pc 11 (rotl.i)", "pc 23 (addmul.x)", "fraction_bits 70"):
        assert frag in msg


def test_not_a_program():
    with pytest.raises(InvalidBytecode, match="not a Program"):
        verify("hello")


# ---- fuzz ----------------------------------------------------------------------------------
SAMPLE = sample_program()
_INTERESTING = st.one_of(
    st.integers(-3, 100),
    st.builds(operand, st.integers(0, 7), st.integers(0, 12)),
    st.sampled_from([-(1 << 63), (1 << 63) - 1, 1 << 40, -8, len(OPS), len(OPS) - 1]),
    st.integers(-(1 << 63), (1 << 63) - 1),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(SAMPLE.code) - 1), st.integers(0, ROW_WIDTH - 1),
                          _INTERESTING), min_size=1, max_size=6))
def test_fuzz_code_words(mutations):
    p = copy.deepcopy(SAMPLE)
    for pc, slot, value in mutations:
        p.code[pc, slot] = value
    try:
        verify(p)
    except InvalidBytecode as e:
        assert e.problems and all(isinstance(s, str) for s in e.problems)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_side_tables(data):
    p = copy.deepcopy(SAMPLE)
    value = data.draw(st.one_of(_INTERESTING, st.none(), st.booleans(), st.text(max_size=3),
                                st.just([]), st.just([1, 2])))
    target = data.draw(st.sampled_from([
        ("xtab", "base"), ("xtab", "length"), ("xtab", "index"),
        ("callsites", "func"), ("callsites", "args"), ("globals", "addr"),
        ("globals", "length"), ("globals", "type"), ("globals", "default"),
        ("consts", "addr"), ("consts", "length"), ("consts", "values"),
        ("functions", "begin"), ("functions", "end"), ("functions", "frame_size"),
        ("functions", "params"), ("functions", "locals"), ("traces", "operands"),
        ("traces", "message")]))
    table, attr = target
    items = getattr(p, table)
    idx = data.draw(st.integers(0, len(items) - 1))
    setattr(items[idx], attr, value)
    try:
        verify(p)
    except InvalidBytecode as e:
        assert e.problems


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(SAMPLE.code) - 1),
                          st.sampled_from(sorted(OP_BY_NAME))), min_size=1, max_size=4))
def test_fuzz_opcodes(mutations):
    """Replacing opcodes (operands kept) gives verify or InvalidBytecode, nothing else."""
    p = copy.deepcopy(SAMPLE)
    for pc, name in mutations:
        p.code[pc, 0] = OP_BY_NAME[name].code
    try:
        verify(p)
    except InvalidBytecode:
        pass


def test_float_and_lns_types_are_checked():
    p = Program(8, np.array([ins("begin", 0), ins("mul.l", G(0), G(1)),
                             ins("neg.f", G(2)), ins("end", 0)]),
                [Global("a", LNS, 0, None), Global("b", LNS, 1, None),
                 Global("c", FLOAT, 2, None)], [],
                [Function("main", 0, 3, [], [], 0)], 0)
    verify(p)
    p.code[2] = ins("neg.f", G(1))
    rejects(p, "pc 2 (neg.f): operand 1 (y): cell has type lns, neg.f needs float")


def test_array_argument_must_match_a_fixed_length_parameter():
    import rvm
    p = rvm.assemble("inout a: int[4]\ninout s: int\nfunc f(s: int, v: int[4]) {\n"
                     "    s += v[0]\n}\nfunc main() {\n    call f(s, a)\n}\n")
    assert check(p) == []
    p.functions[0].params[1].length = 5
    assert any("an array of 4 cells for a parameter of 5" in m for m in check(p))
    p.functions[0].params[1].length = -2
    assert any("length -2 needs an array parameter" in m for m in check(p))
