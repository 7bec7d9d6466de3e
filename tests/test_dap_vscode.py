"""editors/vscode: the extension's manifest holds what VS Code needs to load a debugger
contribution (checked here without VS Code: vsce's required fields, the contribution points'
shapes and cross references, the files they name), its launch attributes are the ones
`rvm debug --dap` reads, and the TextMate grammars' patterns compile and cover every
mnemonic the example programs use."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXT = ROOT / "editors" / "vscode"
MANIFEST = json.loads((EXT / "package.json").read_text())


def test_manifest_has_what_vsce_and_vscode_require():
    m = MANIFEST
    # vsce: name (lowercase, no spaces), publisher, semver version, engines.vscode
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", m["name"])
    assert re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9-]*", m["publisher"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", m["version"])
    assert re.fullmatch(r"\^\d+\.\d+\.\d+", m["engines"]["vscode"])
    assert "Debuggers" in m["categories"]
    for name in ("README.md", "LICENSE", m["main"]):
        assert (EXT / name).is_file(), name
    c = m["contributes"]
    languages = {lang["id"] for lang in c["languages"]}
    assert languages == {"rasm", "janus"}
    for lang in c["languages"]:
        assert all(e.startswith(".") for e in lang["extensions"])
        json.loads((EXT / lang["configuration"]).read_text())
    for g in c["grammars"]:
        assert g["language"] in languages
        grammar = json.loads((EXT / g["path"]).read_text())
        assert grammar["scopeName"] == g["scopeName"]
    assert {b["language"] for b in c["breakpoints"]} == languages
    (dbg,) = c["debuggers"]
    assert dbg["type"] == "rvm" and dbg["label"]
    assert set(dbg["languages"]) <= languages
    assert dbg["runtime"] == "rvm" and dbg["runtimeArgs"] == ["debug", "--dap"]
    launch = dbg["configurationAttributes"]["launch"]
    assert launch["required"] == ["program"]
    for conf in dbg["initialConfigurations"] + [s["body"] for s in dbg["configurationSnippets"]]:
        assert conf["type"] == "rvm" and conf["request"] == "launch" and conf["name"]
        assert set(conf) - {"type", "request", "name", "debugServer"} <= \
            set(launch["properties"])
    for s in dbg["configurationSnippets"]:
        assert s["label"] and s["description"]
    assert any(e.startswith("onDebug") for e in m["activationEvents"])


def test_launch_attributes_are_the_ones_the_adapter_reads():
    source = (ROOT / "rvm" / "debug" / "dap.py").read_text()
    props = MANIFEST["contributes"]["debuggers"][0]["configurationAttributes"]["launch"][
        "properties"]
    for name in props:
        assert re.search(rf"""args\.get\("{name}"|launch_args\.get\("{name}\"""", source), name


def _patterns(node):
    if isinstance(node, dict):
        for key in ("match", "begin", "end"):
            if key in node:
                yield node[key]
        for v in node.values():
            yield from _patterns(v)
    elif isinstance(node, list):
        for v in node:
            yield from _patterns(v)


@pytest.mark.parametrize("grammar", ["rasm", "janus"])
def test_grammar_patterns_compile(grammar):
    g = json.loads((EXT / "syntaxes" / f"{grammar}.tmLanguage.json").read_text())
    pats = list(_patterns(g))
    assert len(pats) > 8
    for p in pats:
        re.compile(p)                  # the patterns use no Oniguruma-only syntax
    for inc in re.findall(r'"include": "#(\w+)"', json.dumps(g)):
        assert inc in g["repository"]


def test_rasm_grammar_knows_every_mnemonic_of_the_examples():
    from isa.table import OPS
    g = json.loads((EXT / "syntaxes" / "rasm.tmLanguage.json").read_text())
    instr = re.compile(g["repository"]["instruction"]["match"])
    for op in OPS:
        assert instr.fullmatch(op.name), op.name
    keyword = re.compile(g["repository"]["keyword"]["match"])
    for word in ("func", "local", "for", "if", "fi", "from", "until", "call", "uncall"):
        assert keyword.fullmatch(word)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_extension_main_parses_under_node():
    r = subprocess.run(["node", "--check", str(EXT / MANIFEST["main"])], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr


# The `debuggers` and `breakpoints` contribution points as VS Code declares them
# (microsoft/vscode, src/vs/workbench/contrib/debug/common/debugSchemas.ts, commit 0565a24:
# debuggersExtPoint and breakpointsExtPoint, both `additionalProperties: false`); newer
# releases add `when`, `hiddenWhen`, `deprecated`, `strings` and `uiMessages`.
_DEBUGGER_ITEM = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "type": {"type": "string"}, "label": {"type": "string"},
        "program": {"type": "string"}, "args": {"type": "array"},
        "runtime": {"type": "string"}, "runtimeArgs": {"type": "array"},
        "variables": {"type": "object"},
        "initialConfigurations": {"type": ["array", "string"]},
        "languages": {"type": "array"}, "adapterExecutableCommand": {"type": "string"},
        "configurationSnippets": {"type": "array"},
        "configurationAttributes": {"type": "object"},
        "windows": {"type": "object"}, "osx": {"type": "object"}, "linux": {"type": "object"},
    },
}
_BREAKPOINT_ITEM = {"type": "object", "additionalProperties": False,
                    "properties": {"language": {"type": "string"}}}


def test_contributions_match_vscode_extension_point_schemas():
    jsonschema = pytest.importorskip("jsonschema")
    c = MANIFEST["contributes"]
    jsonschema.validate(c["debuggers"], {"type": "array", "items": _DEBUGGER_ITEM})
    jsonschema.validate(c["breakpoints"], {"type": "array", "items": _BREAKPOINT_ITEM})
    # the launch attributes are themselves a JSON schema VS Code validates launch.json with
    launch = c["debuggers"][0]["configurationAttributes"]["launch"]
    jsonschema.Draft7Validator.check_schema({"type": "object", **launch})
    for conf in c["debuggers"][0]["initialConfigurations"]:
        jsonschema.validate({k: v for k, v in conf.items()
                             if k not in ("type", "request", "name")},
                            {"type": "object", **launch})
