"""The package's public surface: no global side effects at import, no private names used outside it, the theory
document it ships."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bayes_attn import cli

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, os, sys
before = dict(os.environ)
import jax
import bayes_attn
import bayes_attn.runs._figures, bayes_attn.runs._pipeline, bayes_attn.cli
print(json.dumps({
    "x64": bool(jax.config.jax_enable_x64),
    "env_changed": sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)),
    "pyplot": "matplotlib.pyplot" in sys.modules,
}))
"""


@pytest.mark.slow
def test_import_changes_no_global_state():
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("OPENBLAS_NUM_THREADS", "JAX_ENABLE_X64")}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    state = json.loads(out.stdout.strip().splitlines()[-1])
    assert state == {"x64": False, "env_changed": [], "pyplot": False}


INTERNAL = "bayes_attn._internal"
"""The package's plumbing: its own tests and scripts may import it; nothing else private."""


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` (``bayes_attn.theory._objective``) names a module file of the package."""
    parts = dotted.split(".")
    return parts[0] == "bayes_attn" and (ROOT.joinpath(*parts).with_suffix(".py").is_file()
                                         or ROOT.joinpath(*parts, "__init__.py").is_file())


def _private(dotted: str, modules_ok: bool) -> bool:
    """A private dotted name: allowed are :data:`INTERNAL`, and with ``modules_ok`` the private implementation
    modules (``bayes_attn.theory._objective``), not a private name inside one."""
    if (dotted + ".").startswith(INTERNAL + "."):
        return False
    if modules_ok and _is_module(dotted):
        return False
    return any(p.startswith("_") and not p.startswith("__") for p in dotted.split("."))


def _private_uses(path: Path, modules_ok: bool = False) -> list[str]:
    """``from bayes_attn... import _name``, ``import bayes_attn._mod`` and ``<bayes_attn module>._name`` in a file
    (:data:`INTERNAL` aside; with ``modules_ok``, the private implementation modules aside)."""
    tree = ast.parse(path.read_text())
    aliases: dict[str, str] = {}  # a name bound by an import → what it names (``ba`` → ``bayes_attn``)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "bayes_attn":
            found += [node.module] if _private(node.module, modules_ok) else []
            for a in node.names:
                if a.name.startswith("_") and _private(f"{node.module}.{a.name}", modules_ok):
                    found.append(f"{node.module}.{a.name}")
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "bayes_attn":
                    found += [a.name] if _private(a.name, modules_ok) else []
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "bayes_attn"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base, chain = node.value, [node.attr]
            while isinstance(base, ast.Attribute):
                base, chain = base.value, [base.attr, *chain]
            if isinstance(base, ast.Name) and base.id in aliases:
                if not _private(".".join([aliases[base.id], *chain]), modules_ok):
                    continue  # ``ba.theory._solve``, a private module, where modules are allowed
                found.append(f"{base.id}...{node.attr}")
    return found


WHITE_BOX = {"tests": True, "benchmarks": True, "inference": False, "examples": False}
"""Folder → whether it may import the private implementation modules (``bayes_attn.theory._objective``): the tests
and the benchmarks that measure an implementation choice test the code behind the public names; the scripts and
examples users run use the public surface only (issue 71)."""


@pytest.mark.parametrize("folder", list(WHITE_BOX))
def test_scripts_and_tests_use_only_public_names(folder):
    bad = {str(p.relative_to(ROOT)): u for p in sorted((ROOT / folder).rglob("*.py"))
           if (u := _private_uses(p, WHITE_BOX[folder]))}
    assert not bad, bad


def test_private_name_detector_can_fail(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import bayes_attn as ba\nfrom bayes_attn import _io\nfrom bayes_attn.posterior import _x\n"
                 "ba.theory._newton.x\nba.theory._solve._y\n"
                 "from bayes_attn._internal import outputs\nimport bayes_attn._internal.io\n"
                 "from bayes_attn.theory import _objective\nfrom bayes_attn.theory._objective import _helper\n")
    assert len(_private_uses(f)) == 8  # the plumbing of bayes_attn._internal is allowed
    assert sorted(_private_uses(f, modules_ok=True)) == [  # a private module, not a private name in it
        "ba..._y", "bayes_attn._io", "bayes_attn.posterior._x", "bayes_attn.theory._objective._helper"]


SAMPLE_WITH_PROGRESS_BAR = """
import numpyro
numpyro.set_host_device_count(2)
import jax, numpy as np
import bayes_attn as ba
rng = np.random.default_rng(0)
net = ba.Network([rng.normal(size=(2, 4, 4))], 3)
x, y = rng.normal(size=(6, 3, 4)), np.where(rng.random(6) < 0.5, -1.0, 1.0)
settings = ba.SamplerSettings(name="wishart", num_chains=2, num_warmup=10, num_samples=10, chain_method="parallel")
post = ba.sample_posterior(net, x, y, temperature=0.1, x_test=x[:2], sampler=settings, progress_bar=True)
print(jax.config.jax_enable_x64, post.tree["posterior"]["U"].dtype, post.tree.attrs["dtype"])
"""


@pytest.mark.slow
def test_float64_sampling_with_progress_bar_in_a_float32_process():
    """Host callbacks (the progress bar) run on other threads: they must see float64 too, and the
    caller's float32 default comes back afterwards."""
    env = {k: v for k, v in __import__("os").environ.items() if k != "JAX_ENABLE_X64"}
    out = subprocess.run([sys.executable, "-c", SAMPLE_WITH_PROGRESS_BAR], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "float64", "float64"]


# The one-way flow (task → network → theory | posterior → compare → jobs → command): each group may
# import only from the groups before it (and itself).
LAYERS = [
    {"_internal", "stats"},
    {"kernels", "network", "tasks"},
    {"gp", "theory", "samplers"},
    {"diagnostics", "verdict", "posterior", "calibration"},
    {"comparison"},
    {"experiment"},
    {"spec"},
    {"runs"},
    {"sweep", "oneshot"},
    {"_internal.arguments", "cli"},
    {"__main__"},
]


def _layer(module: str) -> int:
    """The layer of ``module`` (``bayes_attn.x...``): that of its first two names below the package if a layer
    lists them (``_internal.arguments``), else of its first."""
    parts = module.split(".")[1:] or [module]
    for key in (".".join(parts[:2]), parts[0]):
        found = [i for i, group in enumerate(LAYERS) if key in group]
        if found:
            return found[0]
    raise KeyError(module)


def _imports(module: str, source: str) -> set[str]:
    """Absolute ``bayes_attn.x`` modules imported by ``source``, the text of ``module`` (relative imports resolved)."""
    package = module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [mod] if node.module else [f"{mod}.{a.name}" for a in node.names]
            else:
                names = [node.module] if node.module else []
            found.update(n for n in names if n.startswith("bayes_attn."))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("bayes_attn."))
    return found


def test_no_module_imports_up_the_flow():
    upward = []
    for path in sorted((ROOT / "bayes_attn").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        if rel.parts == ("bayes_attn", "__init__"):
            continue
        here = _layer(".".join(rel.parts))
        module = ".".join(rel.parts)
        upward += [f"{module} -> {m}" for m in _imports(module, path.read_text()) if _layer(m) > here]
    assert not upward, upward


def test_upward_import_detector_can_fail():
    found = _imports("bayes_attn.theory._solve", "from ..runs import pipeline\nfrom . import _result\n")
    assert found == {"bayes_attn.runs", "bayes_attn.theory._result"}
    assert _layer("bayes_attn.runs") > _layer("bayes_attn.theory._solve")


def test_docstrings_cite_the_theory_document_the_repository_has():
    """The package cites ``docs/theory.md §n``; ``THEORY.md`` (the reference it was written from) does not ship."""
    assert (ROOT / "docs" / "theory.md").is_file()
    stale = [str(p.relative_to(ROOT)) for p in (ROOT / "bayes_attn").rglob("*.py") if "THEORY.md" in p.read_text()]
    assert stale == []


def test_theory_documentation_ships_and_is_pointed_to(capsys):
    doc = (ROOT / "docs" / "theory.md").read_text()
    for section in ("Network", "Attention paths", "Order parameters", "action", "GP limit", "Head scores",
                    "Wishart", "Omniglot", "Laplace"):
        assert section.lower() in doc.lower(), section
    for command in ("theory", "prune"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        out = capsys.readouterr().out
        assert "THEORY.md" not in out and "docs/theory.md" in out


def _module_file(name: str) -> Path | None:
    """The file of ``bayes_attn.x.y`` (a module, a package's ``__init__``, or the module holding an attribute)."""
    parts = name.split(".")
    for n in (len(parts), len(parts) - 1):
        base = ROOT.joinpath(*parts[:n])
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
        if (base / "__init__.py").is_file():
            return base / "__init__.py"
    return None


def _import_graph() -> dict[str, set[str]]:
    """The package's import graph between files (every import, also those inside functions)."""
    graph = {}
    for path in sorted((ROOT / "bayes_attn").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found = {_module_file(m) for m in _imports(module, path.read_text())}
        graph[str(path.relative_to(ROOT))] = {str(f.relative_to(ROOT)) for f in found if f not in (None, path)}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles a depth-first search of ``graph`` meets (each once, from where it was entered)."""
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_no_import_circle():
    """No module imports, directly or through others, one that imports it (package ``__init__`` files that
    gather their own submodules aside)."""
    cycles = [c for c in _cycles(_import_graph()) if not any(p.endswith("__init__.py") for p in c)]
    assert cycles == []


def test_import_circle_detector_can_fail():
    graph = {"a.py": {"b.py"}, "b.py": {"c.py"}, "c.py": {"a.py"}, "d.py": {"a.py"}}
    assert _cycles(graph) == [["a.py", "b.py", "c.py"]]
    graph = _import_graph()
    assert "bayes_attn/oneshot/_model.py" in graph["bayes_attn/oneshot/_training.py"]


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 500, 80
"""The house's sizes: a module a reader can hold, a function that fits on a screen."""


def _oversized(source: str, name: str) -> list[str]:
    """``name`` when ``source`` has over :data:`MAX_MODULE_LINES` lines, and each function over
    :data:`MAX_FUNCTION_LINES` (``def`` to its last line, docstring included)."""
    out = [f"{name}: {source.count(chr(10))} lines"] if source.count("\n") > MAX_MODULE_LINES else []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION_LINES:
                out.append(f"{name}:{node.lineno} {node.name}: {n} lines")
    return out


def test_no_module_over_500_lines_and_no_function_over_80():
    found = [o for p in sorted((ROOT / "bayes_attn").rglob("*.py"))
             for o in _oversized(p.read_text(), str(p.relative_to(ROOT)))]
    assert not found, found


def test_size_check_can_fail():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert _oversized(f"def f():\n{body}\n", "m.py") == [f"m.py:1 f: {MAX_FUNCTION_LINES + 1} lines"]
    assert _oversized("\n" * (MAX_MODULE_LINES + 1), "m.py") == [f"m.py: {MAX_MODULE_LINES + 1} lines"]
    assert _oversized(f"def f():\n{body[: body.rindex(chr(10))]}\n", "m.py") == []


MAX_PARAMETERS, MAX_LONG_SIGNATURES = 8, 3
"""Settings travel as values (issue 61): at most this many functions take more than 8 parameters."""
SETTINGS_AS_VALUES = {"runs/_pipeline.py": ("run", "sample_run"), "sweep/_table.py": ("sweep", "alpha_sweep"),
                      "posterior.py": ("sample_posterior", "check_sampling")}
"""The jobs and the sampler: no ``**`` settings in their signatures."""


def _long_signatures(source: str, name: str) -> list[str]:
    """``name:line f (n)`` of each function of ``source`` with more than :data:`MAX_PARAMETERS` parameters
    (positional and keyword-only; ``self`` and ``cls`` aside)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            n = len([p for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")])
            out += [f"{name}:{node.lineno} {node.name} ({n})"] if n > MAX_PARAMETERS else []
    return out


def test_settings_travel_as_values():
    long = [o for p in sorted((ROOT / "bayes_attn").rglob("*.py"))
            for o in _long_signatures(p.read_text(), str(p.relative_to(ROOT)))]
    assert len(long) <= MAX_LONG_SIGNATURES, long
    for module, names in SETTINGS_AS_VALUES.items():
        tree = ast.parse((ROOT / "bayes_attn" / module).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in names:
                assert node.args.kwarg is None, f"{module} {node.name} takes **{node.args.kwarg.arg}"


def test_signature_check_can_fail():
    assert _long_signatures("def f(a, b, c, d, e, f, g, h, i):\n    pass\n", "m.py") == ["m.py:1 f (9)"]
    assert _long_signatures("class C:\n    def f(self, a, b, c, d, e, f, g, h):\n        pass\n", "m.py") == []


def _public_modules() -> list[Path]:
    """The modules of ``bayes_attn`` no part of whose dotted name starts with ``_`` (``__init__`` files aside)."""
    return [p for p in sorted((ROOT / "bayes_attn").rglob("*.py"))
            if not any(part.startswith("_") for part in p.relative_to(ROOT / "bayes_attn").with_suffix("").parts)]


def _declared_all(source: str) -> list[str] | None:
    """The names of a module's top-level ``__all__`` (a literal list or tuple), ``None`` without one."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [e.value for e in node.value.elts]  # type: ignore[attr-defined]
    return None


def test_every_public_module_says_what_is_public():
    """Public = listed in ``__all__`` (issue 61): every public module has one, and each name it lists is
    defined or imported there."""
    missing, undefined = [], []
    for path in _public_modules():
        names = _declared_all(path.read_text())
        if names is None:
            missing.append(str(path.relative_to(ROOT)))
            continue
        tree = ast.parse(path.read_text())
        bound = {a.asname or a.name.split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                 for a in n.names}
        bound |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        targets = [t for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                   for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]
        bound |= {e.id for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])
                  if isinstance(e, ast.Name)}
        bound |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        undefined += [f"{path.relative_to(ROOT)}: {name}" for name in names if name not in bound]
    assert not missing, missing
    assert not undefined, undefined


MAX_TOP_MODULES = 12
"""Modules directly in ``bayes_attn/`` (``__init__`` and ``__main__`` aside): the science and the command; the
plumbing lives in ``bayes_attn/_internal/`` (issue 61)."""


def test_the_top_of_the_package_fits_on_a_screen():
    top = sorted(p.name for p in (ROOT / "bayes_attn").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_no_public_name_is_also_a_module_of_the_same_package():
    """``bayes_attn.compare`` is the function (its module is ``comparison``): in no package is a public name that
    is not a module also the name of one of its modules, so that importing the module cannot replace the name."""
    import importlib
    import types

    clashes = []
    for init in sorted((ROOT / "bayes_attn").rglob("__init__.py")):
        folder = init.parent
        dotted = ".".join(folder.relative_to(ROOT).parts)
        package = importlib.import_module(dotted)
        modules = {p.stem for p in folder.glob("*.py")}
        modules |= {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
        clashes += [f"{dotted}.{n}" for n in set(getattr(package, "__all__", [])) & modules
                    if not isinstance(getattr(package, n), types.ModuleType)]
    assert not clashes, clashes


TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore(?!\[[a-z-]+(,\s*[a-z-]+)*\])")
"""A ``# type: ignore`` comment without its error codes (``# type: ignore[attr-defined]`` names one)."""


def _untagged_type_ignores(source: str, name: str) -> list[str]:
    """``name:line`` of each ``# type: ignore`` in ``source`` that names no error code."""
    return [f"{name}:{i}" for i, line in enumerate(source.splitlines(), 1) if TYPE_IGNORE.search(line)]


def test_every_type_ignore_names_its_code():
    """mypy silences only the errors named: a bare ``# type: ignore`` would hide any other error on its line."""
    found = [o for p in sorted((ROOT / "bayes_attn").rglob("*.py"))
             for o in _untagged_type_ignores(p.read_text(), str(p.relative_to(ROOT)))]
    assert not found, found


def test_type_ignore_check_can_fail():
    source = ("x = 1  # type: ignore\ny = 2  # type:ignore  # why\nz = 3  # type: ignore[attr-defined]\n"
              "w = 4  # type: ignore[arg-type, return-value]\n")
    assert _untagged_type_ignores(source, "m.py") == ["m.py:1", "m.py:2"]


def test_make_clean_removes_only_what_the_build_made():
    """``make clean`` (dry run) removes the environment and caches, never ``runs/`` (the commands' results)."""
    import shlex
    import shutil

    if shutil.which("make") is None:
        pytest.skip("no make")
    out = subprocess.run(["make", "-n", "clean"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    removed = [w.removeprefix("./").rstrip("/") for line in out.splitlines() if line.startswith("rm ")
               for w in shlex.split(line)[1:] if not w.startswith("-")]
    assert ".venv" in removed and ".pytest_cache" in removed, out
    assert not any(w == "runs" or w.startswith("runs/") or w in ("", "*") for w in removed), out


def test_version_is_the_installed_metadatas():
    """``bayes_attn.__version__`` is the installed distribution's version, which is pyproject.toml's."""
    import tomllib
    from importlib import metadata

    import bayes_attn

    assert bayes_attn.__version__ == metadata.version("bayes_attn")
    assert bayes_attn.__version__ == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_project_files_of_a_package():
    """``LICENSE`` is the MIT licence pyproject.toml names; ``CITATION.cff`` cites the package at its version and
    the paper it implements; ``CHANGELOG.md`` has an entry for the version."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    licence = (ROOT / "LICENSE").read_text()
    assert project["license"] == "MIT" and licence.startswith("MIT License") and "the bayes_attn authors" in licence
    yaml = pytest.importorskip("yaml")  # PyYAML comes with the test extra's Dask
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and str(cff["version"]) == project["version"] and cff["license"] == "MIT"
    paper = cff["preferred-citation"]
    assert paper["title"].startswith("Dissecting the Interplay of Attention Paths") and paper["year"] == 2024
    assert [a["family-names"] for a in paper["authors"]] == ["Tiberi", "Mignacco", "Irie", "Sompolinsky"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog and f"## [{project['version']}] - " in changelog
