"""Every code block of the README and the docs pages is run or checked as written.

- ``bash``: each command has a rule: ``make T`` names a target of the Makefile; ``bayes-attn …`` uses only
  options its subcommand has, and a concrete line (no ``[…]``, ``|`` or ``...``) parses as a whole;
  ``python SCRIPT …`` names a script that exists and options its ``--help`` lists; ``pip install`` installs this
  repository with extras it has, or a dependency (``jax[cuda12]``); ``bash SCRIPT.sh …`` names a
  script that exists and parses (``bash -n``); ``scripts/NAME`` names an executable file there. A command without a
  rule fails the test, so that a new kind of command gets one.
- ``python``: the README's runs in tests/test_examples.py; the getting-started page's runs here (slow).
- ``toml``: parses; a ``[cluster]`` table is a valid dask-jobqueue cluster of the sweep's executors.
- ``bibtex``: balanced braces, and the title the package's ``CITATION.cff`` cites.
- A block without a language quotes output: the paragraph before it says it is an example ("for example", "for
  instance", "e.g."), since another CPU gives another chain and other digits.
- Sphinx directives (``{toctree}``, ``{argparse}``) are built, warnings as errors, by ``make docs``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bayes_attn import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "inference/README.md", ROOT / "benchmarks/README.md",
         *sorted(p for p in (ROOT / "docs").rglob("*.md")
                 if not {"_build", "_generated", "auto_examples"} & set(p.parts))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)
EXAMPLE_MARKS = ("for example", "for instance", "e.g.")


def blocks(language: str | None = None) -> list[tuple[str, str, str, str]]:
    """``(where, language, body, paragraph before)`` of every fenced block (of ``language``) in :data:`PAGES`."""
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            lang = m.group(1).strip()
            if language is None or lang == language:
                before = text[:m.start()].rstrip().split("\n\n")[-1]
                out.append((f"{page.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}", lang, m.group(2),
                            before))
    return out


def commands(body: str) -> list[str]:
    """The command lines of a shell block: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    lines = (line.split(" #")[0].strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))


def _options(parser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def _check_bayes_attn(words: list[str], line: str) -> None:
    top = cli.parser()
    subs = top._subparsers._group_actions[0].choices
    named = [w for w in words[1:] if w in subs]
    used = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", line))
    known = _options(top) | (_options(subs[named[0]]) if named else set())
    assert used <= known, f"{line!r}: {sorted(used - known)} are not options of bayes-attn {named[:1]}"
    if named and not any(c in line for c in "[]|") and "..." not in line:
        top.parse_args(words[1:])  # a concrete command parses as a whole (exits 2 on any error)


def _check_script(words: list[str], line: str) -> None:
    script = ROOT / next(w for w in words if w.endswith(".py"))
    assert script.is_file(), f"{line!r}: no script {script.relative_to(ROOT)}"
    options = re.findall(r"(?<![\w-])(--[a-z][\w-]*)", line)
    if options:  # the script's own --help lists them (a shared parser's too); every script answers it quickly
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        shown = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=300).stdout
        missing = [o for o in options if not re.search(rf"(?<![\w-]){o}(?![\w-])", shown)]
        assert not missing, f"{line!r}: {script.name} --help lists no {missing}"


def _check_pip(words: list[str], line: str) -> None:
    """``pip install`` of this repository (``.``, ``.[extras]`` with extras of pyproject.toml, ``-e``, ``-U``) or
    of one of the package's dependencies (``jax[cuda12]``): never a package named like this one from an index."""
    assert "install" in words, f"{line!r}: only pip install has a rule"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    depends = {re.split(r"[\[<>=!~ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    for arg in words[words.index("install") + 1:]:
        if arg.startswith("-"):
            continue
        local = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", arg)
        if local:
            assert set((local.group(1) or "").split(",")) - {""} <= extras, f"{line!r}: unknown extra"
        else:
            assert re.split(r"[\[<>=!~]", arg, maxsplit=1)[0].lower() in depends, f"{line!r}: installs {arg!r}"


def check_command(line: str) -> None:
    """One command of a shell block, by its rule (module docstring)."""
    words = [w for w in shlex.split(line) if not re.fullmatch(r"[A-Z_]+=\S*", w)]  # VAR=value prefixes dropped
    program = os.path.basename(words[0])
    if program == "pip" or (program.startswith("python") and words[1:3] == ["-m", "pip"]):
        _check_pip(words, line)
    elif program == "make":
        assert set(words[1:]) <= _make_targets(), f"{line!r}: not a Makefile target"
    elif program == "bayes-attn":
        _check_bayes_attn(words, line)
    elif program.startswith("python") and any(w.endswith(".py") for w in words):
        _check_script(words, line)
    elif program == "bash" and len(words) > 1 and words[1].endswith(".sh"):
        assert (ROOT / words[1]).is_file(), f"{line!r}: no script {words[1]}"
        subprocess.run(["bash", "-n", str(ROOT / words[1])], check=True)
    elif words[0].startswith("scripts/"):
        assert os.access(ROOT / words[0], os.X_OK), f"{line!r}: no executable {words[0]}"
    else:
        raise AssertionError(f"{line!r}: no rule checks a {program!r} command (tests/test_docs.py)")


SHELL = [b for lang in ("bash", "sh", "console") for b in blocks(lang)]


def test_the_pages_have_their_blocks():
    assert len(SHELL) >= 6 and blocks("python") and blocks("toml") and blocks("bibtex"), [b[0] for b in blocks()]


@pytest.mark.parametrize("where, lang, body, before", SHELL, ids=[b[0] for b in SHELL])
def test_shell_block(where, lang, body, before):
    lines = commands(body)
    assert lines, where
    for line in lines:
        check_command(line)


def test_the_rules_catch_a_wrong_command():
    """The rules fail on what they are for: an unknown option, target or script, and a command without a rule."""
    for bad in ("bayes-attn run --widht 3", "make tests", "python inference/fig9.py",
                "python inference/fig2c.py --nope", "bayes-attn sweep m.toml --executor slurm",
                "pip install bayes_attn", "python -m pip install -e '.[gpu]'", "bash benchmarks/nope.sh",
                "scripts/nope"):
        with pytest.raises((AssertionError, SystemExit)):
            check_command(bad)


@pytest.mark.parametrize("where, lang, body, before", blocks(""), ids=[b[0] for b in blocks("")])
def test_quoted_output_is_marked_as_an_example(where, lang, body, before):
    assert any(m in before.lower() for m in EXAMPLE_MARKS), f"{where}: say the output is an example: {before!r}"


@pytest.mark.parametrize("where, lang, body, before", blocks("toml"), ids=[b[0] for b in blocks("toml")])
def test_toml_block(where, lang, body, before):
    table = tomllib.loads(body)
    if "cluster" in table:
        pytest.importorskip("dask_jobqueue")  # the test extra has it
        from bayes_attn.sweep import executor_from_options

        executor_from_options("dask", cluster=table["cluster"])  # checks class and options, starts nothing


def test_bibtex_block_cites_the_paper():
    yaml = pytest.importorskip("yaml")  # PyYAML comes with the test extra's Dask
    title = yaml.safe_load((ROOT / "CITATION.cff").read_text())["preferred-citation"]["title"]
    for where, _, body, _ in blocks("bibtex"):
        assert body.count("{") == body.count("}") and body.lstrip().startswith("@"), where
        assert title in " ".join(body.split()), where


def test_the_api_reference_groups_every_page_once():
    """docs/api.md's workflows (docs/api_reference.py) hold every paged name once, and include each group's table."""
    import importlib.util

    loader = importlib.util.spec_from_file_location("api_reference", ROOT / "docs" / "api_reference.py")
    assert loader is not None and loader.loader is not None
    api = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(api)
    grouped = [n for names in api.GROUPS.values() for n in names]
    assert sorted(grouped) == sorted(api.names()), set(grouped) ^ set(api.names())
    page = (ROOT / "docs" / "api.md").read_text()
    for group in api.GROUPS:
        assert f"## {group}\n\n```{{include}} _generated/api/{api.slug(group)}.md" in page, group
        assert all(api.summary(n) for n in api.GROUPS[group]), group  # every name has its one line
    for name in api.EXTRA:
        obj, dotted = api.target(name)
        assert dotted.startswith("bayes_attn.") and obj is not None


@pytest.mark.slow
@pytest.mark.validate  # the page's whole walk-through, end to end
@pytest.mark.xdist_group("examples")  # compiles what the gallery and the README's example compile
def test_getting_started_python_block_runs(tmp_path, monkeypatch, capsys):
    """The getting-started page's Python block, in an empty folder (it writes theory.nc, posterior.nc,
    comparison.nc): it runs as written and prints the report whose verdict line the page quotes."""
    [(where, _, body, _)] = [b for b in blocks("python") if b[0].startswith("docs/getting-started.md")]
    monkeypatch.chdir(tmp_path)
    exec(compile(body, where, "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out
    assert re.search(r"^\*\*Verdict: .* theory and sampling (agree|DISAGREE)\*\*", printed, flags=re.M) or \
        "INCONCLUSIVE" in printed, printed[-2000:]
    assert {"theory.nc", "posterior.nc", "comparison.nc"} <= {p.name for p in tmp_path.iterdir()}


def test_the_public_surface_is_what_the_api_reference_lists():
    """Issue 71: every public module (no part of its dotted name private) is paged, with every name of its
    ``__all__`` on one page — its own, a top-level name's or an :data:`EXTRA` name's — so that the public names are
    the ones docs/api.md lists."""
    import importlib
    import importlib.util
    import inspect
    import pkgutil

    import bayes_attn

    loader = importlib.util.spec_from_file_location("api_reference", ROOT / "docs" / "api_reference.py")
    assert loader is not None and loader.loader is not None
    api = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(api)
    public = {m.name for m in pkgutil.walk_packages(bayes_attn.__path__, "bayes_attn.")
              if not any(p.startswith("_") for p in m.name.split(".")[1:])}
    paged_modules = {dotted for name in api.names() for obj, dotted in [api.target(name)] if inspect.ismodule(obj)}
    assert public == paged_modules, public ^ paged_modules
    unlisted = []
    for dotted in sorted(public):
        module = importlib.import_module(dotted)
        on_page = set(api.own_names(module))
        for n in module.__all__:
            top = n in bayes_attn.__all__ and getattr(bayes_attn, n) is getattr(module, n)
            if not (n in on_page or top or f"{dotted}.{n}" in api.EXTRA.values()):
                unlisted.append(f"{dotted}.{n}")
    assert not unlisted, unlisted
    assert len(public) < 25 and sum(len(importlib.import_module(m).__all__) for m in public) < 300  # issue 71: 65, 671
