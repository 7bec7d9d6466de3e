"""Peer implementations of the issue-4 benchmark tasks, driven by benchmarks/peers.py.

One module per task (t1_accumulate, t2_bessel, t4_umm, t5_petersen, t3_memory), each giving
the same computation in every peer (rvm, C -O2 hand adjoint, plain Python hand adjoint, numpy,
autograd, PyTorch eager, JAX jit); `engine` times and checks them; `report` prints tables and
writes JSON and the chart.  C sources live in peers/c/ and are compiled at run time.
"""
