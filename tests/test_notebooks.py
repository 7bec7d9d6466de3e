"""The example notebooks (examples/*.ipynb) run on a real kernel with nbclient, error-free,
and show rvm's rich displays."""
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed: pip install -e "
                               "'.[interop]'")
nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed: pip install -e "
                               "'.[interop]'")
pytest.importorskip("ipykernel", reason="ipykernel is not installed: pip install -e '.[interop]'")

ROOT = Path(__file__).resolve().parent.parent


def execute(name: str, env: dict | None = None) -> nbformat.NotebookNode:
    nb = nbformat.read(ROOT / "examples" / name, as_version=4)
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT / "examples")}}
                                ).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return nb


def outputs(nb, kind: str) -> list[str]:
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if kind == "stream" and out.get("output_type") == "stream":
                found.append(out["text"])
            elif kind in out.get("data", {}):
                found.append(out["data"][kind])
    return found


def test_tour():
    nb = execute("tour.ipynb")
    html = "\n".join(outputs(nb, "text/html"))
    text = "\n".join(outputs(nb, "stream"))
    assert "y = 49" in text and "x = 7" in text          # %%rasm forward and --reverse
    assert "n = 12" in text                              # %rvm run
    assert 'class="op"' in html and "rvm Result" in html and "rvm Derivatives" in html
    assert "rvm trace report" in html and "data:image/png" in html
    assert "rvm hardware report" in html


def test_train_petersen():
    nb = execute("train_petersen.ipynb", {"RVM_NOTEBOOK_STEPS": "300"})
    assert outputs(nb, "image/png")                      # the loss curves, inline
    assert "rvm Derivatives" in "\n".join(outputs(nb, "text/html"))
