"""The documentation runs as printed: every `rvm` command and every Python block in README.md
and docs/*.md is run, and the output a doc shows is checked.

Conventions (for writers of the docs):

* Commands: each line of a ```sh, ```bash or ```console block that starts with `rvm ` (or
  `$ rvm `) runs, in file order; `&&` chains commands; a line ending in `\\` continues on the
  next; other lines (pip, python, pytest) are not run.  Each one must exit 0, unless its
  comment says `exits N`.
* Shown output: a command's trailing comment `# prints TEXT` requires TEXT in what the
  command printed (stdout and stderr, runs of spaces counted as one); `# prints A ... B`
  requires A and B.  Other comments are prose.
* Python: the ```python blocks of one file run in order in one namespace, as a reader would
  type them.  A line `EXPR  # -> TEXT` checks the value of the last expression on it (or, on
  a line of its own, of the statement above): equal to TEXT when TEXT is a Python literal
  (floats to 1e-9 relative), else TEXT must appear in its repr.
* `<!-- norun -->` on the line before a block's opening fence skips the block (for what CI
  cannot run: installs, benchmarks, long runs, files the reader brings).
* The blocks of one file share a temporary directory, which holds links to programs/,
  tests/ and examples/ and an empty docs/img/, so outputs land in the temporary directory
  and a command can read what an earlier one of the same file wrote.
"""
from __future__ import annotations

import ast
import contextlib
import glob
import io
import math
import os
import re
import shlex
import subprocess
import sys
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
SHELL = {"sh", "bash", "console", "shell"}
NORUN = "<!-- norun -->"


@dataclass
class Block:
    lang: str
    line: int                          # line of the opening fence
    text: str
    skip: bool


@dataclass
class Command:
    argv_text: str
    line: int
    prints: list[str] = field(default_factory=list)
    status: int = 0


def blocks(path: Path) -> list[Block]:
    out, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"\s*```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        prev = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        out.append(Block(lang, start + 1, "\n".join(lines[start + 1:j]), prev == NORUN))
        i = j + 1
    return out


def commands(block: Block) -> list[Command]:
    out, pending, first = [], "", 0
    for k, raw in enumerate(block.text.splitlines()):
        line = raw.rstrip()
        if pending:
            line = pending + " " + line.lstrip()
        else:
            first = block.line + 1 + k
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        pending = ""
        text = line.strip()
        if text.startswith("$ "):
            text = text[2:]
        if not text.startswith("rvm "):
            continue
        code, comment = _split_comment(text)
        cmd = Command(code, first)
        if comment:
            m = re.search(r"\bexits (\d+)", comment)
            if m:
                cmd.status = int(m.group(1))
            m = re.search(r"\bprints (.*)", comment)
            if m:
                cmd.prints = [p.strip() for p in m.group(1).split(" ... ") if p.strip()]
        out.append(cmd)
    return out


def _split_comment(text: str) -> tuple[str, str]:
    """The command and its trailing `# comment` (a # inside quotes is not a comment)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].strip(), text[i + 1:].strip()
    return text.strip(), ""


def _squash(s: str) -> str:
    return re.sub(r"[ \t]+", " ", s)


def run_rvm(code: str, cwd: Path) -> tuple[int, str]:
    """Run one command line in-process (pipes and redirections go to a shell)."""
    if re.search(r"[|<>]", code.replace("->", "")):
        exe = f"{shlex.quote(sys.executable)} -m rvm.cli"
        shell = re.sub(r"(^|&&\s*|\|\s*|;\s*)rvm ", lambda m: m.group(1) + exe + " ", code)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        p = subprocess.run(["bash", "-c", shell], cwd=cwd, capture_output=True, text=True,
                           env=env, timeout=120)
        return p.returncode, p.stdout + p.stderr
    from rvm.cli import main

    status, printed = 0, []
    for part in code.split("&&"):
        argv = []
        for word in shlex.split(part.strip()):
            hits = sorted(glob.glob(word)) if any(c in word for c in "*?[") else []
            argv.extend(hits or [word])
        assert argv[0] == "rvm", part
        buf = io.StringIO()
        old_in = sys.stdin
        sys.stdin = io.StringIO("")          # an interactive verb meets end of input
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                try:
                    status = main(argv[1:])
                except SystemExit as e:
                    status = e.code if isinstance(e.code, int) else 1
        finally:
            sys.stdin = old_in
        printed.append(buf.getvalue())
        if status:
            break
    return status, "".join(printed)


def _literal_equal(want, got) -> bool:
    if hasattr(got, "tolist"):
        got = got.tolist()
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(_literal_equal(want[k], got[k]) for k in want)
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(want) == len(got) and all(_literal_equal(a, b) for a, b in zip(want, got))
    if isinstance(want, float) or isinstance(got, float):
        try:
            return math.isclose(float(want), float(got), rel_tol=1e-9, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return want == got


def run_python(block: Block, cwd: Path, where: str, env: dict) -> None:
    """Run a Python block statement by statement in `env`; check `# -> TEXT` values."""
    source = block.text
    tree = ast.parse(source)
    lines = source.splitlines()
    expected: dict[int, str] = {}            # end line of the statement -> shown value
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.string.startswith("# ->"):
            row = tok.start[0]
            if lines[row - 1][:tok.start[1]].strip():
                expected[row] = tok.string[4:].strip()
            else:                            # on a line of its own: the statement above
                above = [n.end_lineno for n in tree.body if n.end_lineno < row]
                if above:
                    expected[max(above)] = tok.string[4:].strip()
    last_on_line = {n.end_lineno: n for n in tree.body}
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for node in tree.body:
                lineno = block.line + node.lineno
                want = expected.get(node.end_lineno) if last_on_line[node.end_lineno] is node \
                    else None
                if want is not None:
                    assert isinstance(node, ast.Expr), f"{where}:{lineno}: `# ->` after a statement"
                if isinstance(node, ast.Expr):
                    value = eval(compile(ast.Expression(node.value), where, "eval"), env)
                    if want is None:
                        continue
                    try:
                        literal = ast.literal_eval(want)
                    except (ValueError, SyntaxError):
                        assert want in repr(value), f"{where}:{lineno}: {value!r}, shown {want}"
                    else:
                        assert _literal_equal(literal, value), \
                            f"{where}:{lineno}: {value!r}, shown {want}"
                else:
                    exec(compile(ast.Module([node], []), where, "exec"), env)
    finally:
        os.chdir(old)


def _workdir(tmp: Path) -> Path:
    for name in ("programs", "tests", "examples"):
        (tmp / name).symlink_to(ROOT / name)
    (tmp / "docs" / "img").mkdir(parents=True)
    return tmp


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_doc_runs_as_printed(path, tmp_path):
    cwd = _workdir(tmp_path)
    rel = path.relative_to(ROOT)
    failures, timings = [], []
    namespace: dict = {"__name__": "__docs__"}
    old = os.getcwd()
    for b in blocks(path):
        if b.skip:
            continue
        if b.lang in SHELL:
            for cmd in commands(b):
                t0 = time.perf_counter()
                os.chdir(cwd)
                try:
                    status, out = run_rvm(cmd.argv_text, cwd)
                finally:
                    os.chdir(old)
                timings.append((time.perf_counter() - t0, cmd.argv_text))
                where = f"{rel}:{cmd.line}: {cmd.argv_text}"
                if "Traceback (most recent call last)" in out:
                    failures.append(f"{where}: a traceback\n{out[-2000:]}")
                elif status != cmd.status:
                    failures.append(f"{where}: exit {status}, expected {cmd.status}\n{out[-1500:]}")
                for text in cmd.prints:
                    if _squash(text) not in _squash(out):
                        failures.append(f"{where}: does not print {text!r}\n{out[-1500:]}")
        elif b.lang == "python":
            t0 = time.perf_counter()
            try:
                run_python(b, cwd, f"{rel}:{b.line}", namespace)
            except Exception as e:        # report every block, not only the first failure
                failures.append(f"{rel}:{b.line}: python block: {type(e).__name__}: {e}")
            timings.append((time.perf_counter() - t0, f"python block at line {b.line}"))
    slow = [f"{t:.1f} s {c}" for t, c in sorted(timings, reverse=True)[:3] if t > 5]
    assert not failures, "\n\n".join(failures) + ("\n\nslowest: " + "; ".join(slow) if slow else "")


def test_the_conventions_parse(tmp_path):
    """The parser of this file on a sample: norun, continuation, prints, exit, comments."""
    import textwrap
    sample = textwrap.dedent("""\
        <!-- norun -->
        ```sh
        rvm run skipped.rasm
        ```

        ```console
        $ rvm run programs/rfib.rasm n=10    # prints out = 55
        rvm run a.rasm \\
            --json                           # exits 3
        pip install rvm
        rvm run 'x#y'                        # prints A ... B
        ```
        """)
    p = tmp_path / "sample.md"
    p.write_text(sample)
    bs = blocks(p)
    assert [b.skip for b in bs] == [True, False]
    cmds = commands(bs[1])
    assert [(c.argv_text, c.prints, c.status) for c in cmds] == [
        ("rvm run programs/rfib.rasm n=10", ["out = 55"], 0),
        ("rvm run a.rasm --json", [], 3),
        ("rvm run 'x#y'", ["A", "B"], 0)]
