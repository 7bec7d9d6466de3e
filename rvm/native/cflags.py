"""C compiler flags shared by the extension build (setup.py) and the native code of
rvm/native: -fwrapv, int cells wrap by definition; -ffp-contract=off, no fused multiply-add,
so float results match isa/arith.py, the interpreter and the native code bit for bit.
(setup.py reads this file with runpy: it must not import anything from rvm.)"""
CFLAGS = ["-O2", "-fwrapv", "-ffp-contract=off", "-fno-strict-aliasing"]
