"""The Bennett time/space tracer (`rvm trace`, docs/trace.md).

A step program's `main` computes s_{i+1} from s_i; a schedule of moves (compute step i,
uncompute step i, copy out s_N) runs it N times with few checkpoints, on the real machine
(`machine_run`) or in the pebble-game cost model (`pebble`, `plan`).  Strategies
(`strategies`): Bennett 1973, Bennett 1989, Knill's optimum (`knill`), periodic checkpoints,
and Revolve (`revolve`) as the irreversible reference.  `report` makes the rows, `plots` the
pictures, `cli` the verb.
"""
