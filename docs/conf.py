"""Sphinx configuration of the bayes_attn docs: ``make docs`` builds them into docs/_build/html (warnings as errors)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import bayes_attn

os.environ.setdefault("MPLBACKEND", "Agg")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import spec_reference  # noqa: E402  (docs/spec_reference.py, beside this file)

project = "bayes_attn"
author = "the bayes_attn developers"
release = version = "0.1.0"
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx_gallery.gen_gallery",
    "sphinxarg.ext",
]
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_generated", "auto_examples/*.ipynb", "auto_examples/*.py", "auto_examples/*.zip"]
html_theme = "pydata_sphinx_theme"
html_title = "bayes_attn"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # a dataclass's "Attributes:" as fields of its page, not a second description of each
sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "within_subsection_order": "gallery_order.ExampleOrder",  # docs/gallery_order.py: the quick start first
}


DATA = {"SAMPLERS": "bayes_attn.samplers.registry.SAMPLERS"}
"""Where the public data names are defined (their docstrings live there)."""


def _api_pages() -> None:
    """One page per public name of ``bayes_attn.__all__`` (docs/api/<name>.rst), written before the build."""
    folder = HERE / "api"
    folder.mkdir(exist_ok=True)
    for name in bayes_attn.__all__:
        obj = getattr(bayes_attn, name)
        kind = ("automodule" if type(obj).__name__ == "module" else "autoclass" if isinstance(obj, type)
                else "autofunction" if callable(obj) else "autodata")
        target = (obj.__name__ if kind == "automodule" else DATA[name] if kind == "autodata"
                  else f"bayes_attn.{name}")
        own = [n for n in getattr(obj, "__all__", []) if n not in bayes_attn.__all__]  # a module's, not those paged
        # a sampler's settings are indexed on the samplers page, as bayes_attn.samplers.SamplerSettings
        indexed = "   :no-index:\n" if getattr(obj, "__module__", "").startswith("bayes_attn.samplers") else ""
        options = {"autoclass": "   :members:\n" + indexed, "autodata": "   :no-value:\n",
                   "automodule": f"   :members: {', '.join(own)}\n"}.get(kind, "")
        text = f"{name}\n{'=' * len(name)}\n\n.. {kind}:: {target}\n{options}"
        page = folder / f"{name}.rst"
        if not page.exists() or page.read_text() != text:
            page.write_text(text)


_api_pages()
spec_reference.write_tables(HERE / "_generated" / "spec")  # the tables docs/spec.md includes
