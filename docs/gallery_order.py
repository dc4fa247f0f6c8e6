"""The gallery's order (``sphinx_gallery_conf["within_subsection_order"]`` in docs/conf.py): the quick start first,
then your own network and arrays, a network from query and key weights, the samplers and their calibration, the
finite-width correction, sweeps (also on a Dask cluster), saved results and a run folder read with ArviZ."""

from __future__ import annotations

from pathlib import Path

ORDER = (
    "plot_quickstart.py",
    "plot_own_network.py",
    "plot_own_arrays.py",
    "plot_trained_qk.py",
    "plot_samplers.py",
    "plot_sbc.py",
    "plot_correction.py",
    "plot_sweep.py",
    "plot_sweep_dask.py",
    "plot_saved_results.py",
    "plot_run_folder_arviz.py",
    "plot_fig3_results.py",
)
"""Every example of examples/, in the gallery's order (tests/test_examples.py checks that it lists them all)."""


class ExampleOrder:
    """Sort key of sphinx-gallery: an example's place in :data:`ORDER` (an example not listed stops the build)."""

    def __init__(self, src_dir: str | Path) -> None:
        self.src_dir = src_dir

    def __call__(self, filename: str | Path) -> int:
        name = Path(filename).name
        if name not in ORDER:
            raise ValueError(f"{name} has no place in the gallery: add it to ORDER in docs/gallery_order.py")
        return ORDER.index(name)

    def __repr__(self) -> str:
        return "ExampleOrder"
