"""The hardware model (`rvm hw`): the int and fixed instructions as reversible gate circuits.

circuit.py   the gate IR (flat gate arrays, inversion, the builder realizations emit into)
build.py     an instruction's circuit at a width, from isa/gates.py (cached)
_sim.pyx     the bit-sliced simulator kernel and the ASAP depth pass
sim.py       simulating a circuit on register values, with the ancilla and source checks
verify.py    checking realizations against isa/arith.py, exhaustively or at random
cosim.py     running a program with every instruction done by its circuit, compared with the
             interpreter after every step, forward and backward
report.py    gate counts, depth, ancillas, garbage and the Landauer bound; tables and JSON
chart.py     gate counts against width, drawn to a file
real.py      RevLib .real import and export
cli.py       the `rvm hw` verbs
"""
