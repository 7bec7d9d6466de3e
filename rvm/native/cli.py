"""`rvm native`: the C that rvm/native generates for a program's gradient, and its build."""
from __future__ import annotations

import argparse
import sys
from typing import Any

EPILOG = """\
examples:
  rvm native programs/besselj_rec.rasm -o besselj_rec.c   # the generated C
  rvm native programs/petersen.rasm --build               # compile (or find) it in the cache

rvm.grad_fn compiles this code by itself after a few calls (docs/ad.md, "Native code").
exit codes: 0 success; 1 the program is not covered (`trace`) or the C
compiler failed; 2 usage error.
"""


def register(sub: Any) -> None:
    s = sub.add_parser(
        "native", help="print (or build) the C of a program's forward run and adjoint sweep",
        description="Generate the C that rvm.grad_fn runs for PROGRAM's gradient "
                    "(rvm/native): the forward run and the adjoint sweep of every function, "
                    "computed by the interpreter's own arithmetic, bit for bit its results.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    s.add_argument("program", help=".rasm or .rbc file")
    s.add_argument("-o", "--output", help="write the C here (default stdout)")
    s.add_argument("--build", action="store_true",
                   help="compile it into the cache ($RVM_CACHE_DIR, else ~/.cache/rvm/native) "
                        "and print the library's path instead")
    s.set_defaults(func=cmd_native)


def cmd_native(a: argparse.Namespace) -> int:
    from rvm import native
    from rvm.cli import _write_text, load_program

    prog = load_program(a.program)
    try:
        if a.build:
            nat = native.compile_program(prog)
            how = "built" if nat.built else "found in the cache"
            print(f"{nat.path} ({how} in {nat.seconds:.2f} s)")
        else:
            _write_text(native.generate(prog), a.output)
    except native.Unsupported as e:
        print(f"rvm native: {a.program} is not covered: {e}", file=sys.stderr)
        return 1
    except native.BuildError as e:
        print(f"rvm native: {e}", file=sys.stderr)
        return 1
    return 0
