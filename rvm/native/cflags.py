"""C compiler flags shared by the extension build (setup.py) and the native code of
rvm/native: -fwrapv, int cells wrap by definition; -ffp-contract=off, no fused multiply-add,
so float results match isa/arith.py, the interpreter and the native code bit for bit;
-fno-math-errno, exp, log, sqrt and the other libm functions may not set errno, which
rvm never reads (its traps are decided from the values: a domain check before the call, a
finiteness check after it), so gcc may treat them as pure: in an adjoint sweep the inverse
`s -= exp(t)` and its partial exp(t) are one call (GradBench's lse gradient: three exp per
element become two, 424 against 509 us at n = 20000), and sqrt is one instruction.  It
changes no value: the same libm function runs, once instead of twice.
(setup.py reads this file with runpy: it must not import anything from rvm.)"""
CFLAGS = ["-O2", "-fwrapv", "-ffp-contract=off", "-fno-strict-aliasing", "-fno-math-errno"]
# the tangent library's lanes (rvm/native/tangent.py) are vector loops: built for this CPU
# (AVX2 / AVX-512 where it has them; a library is compiled at run time on the user's machine,
# and its cache key has the CPU's resolved flags); -ffp-contract=off still keeps out fused
# multiply-adds, so every number is the portable build's (tests/test_native_tangent.py).
# -fno-tree-slp-vectorize: gcc 12 ignores -ffp-contract=off where its straight-line (SLP)
# vectorizer pairs a rotation's c*x - s*y and s*x + c*y into one vfmaddsub (AVX2/AVX-512),
# which made a Hessian through irot 2 ulps off the interpreter; the lanes' loops are
# vectorized by the loop vectorizer, which this leaves on
ARCH = ["-march=native", "-fno-tree-slp-vectorize"]
