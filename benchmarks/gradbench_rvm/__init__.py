"""rvm as a GradBench tool (issue 20): the programs/gradbench/*.rasm programs sized to each
input (programs.py) and the JSON-lines protocol of GradBench's tools (tool.py:
`python benchmarks/gradbench_rvm/tool.py`, the way GradBench runs its Python tools)."""
