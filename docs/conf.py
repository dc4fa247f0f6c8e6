"""Sphinx configuration of the bayes_attn docs: ``make docs`` builds them into docs/_build/html (warnings as errors)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import api_reference  # noqa: E402  (docs/api_reference.py: beside this file)

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
autodoc_default_options = {"undoc-members": False}  # members: each page lists its own (docs/api_reference.py)
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


api_reference.write_pages(HERE / "api")  # one page per public name (docs/api/<name>.rst)
api_reference.write_groups(HERE / "_generated" / "api")  # the tables by workflow docs/api.md includes
