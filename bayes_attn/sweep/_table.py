"""Sweeps over width and temperature: many independent jobs, one table (paper Fig. 2c/2e).

A sweep is a list of :class:`~bayes_attn.sweep._executors.Job` records, one per ``(kind, width, temperature)`` with
``kind`` ``"theory"`` or ``"sample"``. Each job writes one netCDF file into ``OUT/widths/`` (atomically), tagged with a
hash of everything its result depends on (task, network at the job's width, a digest of the data, temperature, sampler
and comparison settings, package versions); a rerun loads finished files instead of recomputing them (an interrupted
sweep resumes), recomputes a file whose tag differs (made with other settings, or under another job's name), and
recomputes a corrupt file with a warning. The jobs run in this process or on Dask (``executor``): a sampling job's seed
is :func:`~bayes_attn.sweep._executors.job_seed` of the sampler seed, width and temperature, so results do not depend on
which worker ran a job or when.

With several temperatures, the best temperature per width is chosen by the accuracy on the task's validation set (never
the test set), separately for the finite-width theory and for the GP limit; ``sweep.nc`` stores the choice and the test
accuracy there.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import tomllib
import warnings
from pathlib import Path
from typing import cast

import numpy as np
import xarray as xr

from .. import experiment, verdict
from .._internal import checks as _checks
from .._internal import io as _io
from .._internal import outputs
from .._internal.fingerprints import data_fingerprint
from ..runs import _figures as figures
from ..runs._pipeline import gp_accuracies, theory_accuracy
from ..samplers import SAMPLERS, SamplerSettings
from ..spec import Spec, spec_from_dict
from ..stats import accuracy, binomial_se, choose_temperature, power_law_slope
from ..tasks.markov import MarkovTask
from ._executors import DaskLocal, Executor, InProcess, Job, job_seed, run_jobs
from ._temperature import CHOSEN_SPEC, best_temperature_view, choose_temperatures, chosen_spec

__all__ = ["CACHE_VERSION", "MIN_CHAINS_SE", "SWEEP_FILES", "THEORY_VARS", "alpha_sweep", "best_temperature_view",
           "run_job", "sample_job", "sweep", "sweep_jobs", "sweep_verdict", "theory_job"]

log = logging.getLogger(__name__)

CACHE_VERSION = 6
"""Bumped when the per-job files change layout or key: older files are recomputed."""

THEORY_VARS = ("U", "accuracy", "accuracy_validation", "action", "max_gradient", "hessian_min_eigenvalue", "Ua",
               "converged")

Data = tuple[np.ndarray, ...]


# ----------------------------------------------------------------------------
# one job
# ----------------------------------------------------------------------------
def _key(*parts) -> str:
    """Hash of everything a job's result depends on."""
    text = json.dumps([CACHE_VERSION, *parts], sort_keys=True, default=str)
    return _io.digest(text)


def _job_parts(spec: Spec, N: int, temperature: float, data: Data) -> list:
    """What every job's result depends on: the task, the network at the job's width ``N``, a digest of the
    data ``(x, y, x_test, y_test[, x_val, y_val])``, the temperature and the versions of the packages."""
    pairs = [data_fingerprint(data[i], data[i + 1]) for i in range(0, len(data), 2)]
    tables = spec.tables()
    return [tables["task"], tables["network"] | {"width": N}, pairs, temperature, _io.versions()]


def _theory_key(spec: Spec, N: int, temperature: float, data: Data) -> str:
    return _key("theory", *_job_parts(spec, N, temperature, data))


def _sample_key(spec: Spec, N: int, temperature: float, data: Data, settings: SamplerSettings) -> str:
    return _key("sample", *_job_parts(spec, N, temperature, data), settings.to_dict(), spec.compare.rtol,
                spec.compare.n_sigma, spec.compare.correction)


def _finished(path: Path, key: str) -> xr.Dataset | None:
    """A job's result with the tag ``key``, or ``None`` (missing, tagged otherwise, or corrupt)."""
    if not path.exists():
        return None
    try:
        ds = _io.load_dataset(path, samplers=SAMPLERS)
    except _io.CorruptFileError as err:
        warnings.warn(f"{err}; recomputing it", RuntimeWarning, stacklevel=2)
        return None
    if ds.attrs.get("settings_key") != key:
        log.info(f"{path} was made for another job or with other settings: recomputing it")
        return None
    return ds


def _tag(N: int, temperature: float) -> str:
    return f"N{N}-T{temperature!r}"


def theory_job(spec: Spec, N: int, temperature: float, folder: Path) -> Path:
    """Theory at width ``N`` and ``temperature``: ``folder/theory-N..-T...nc`` (test and validation accuracy)."""
    path = folder / f"theory-{_tag(N, temperature)}.nc"
    t0 = time.perf_counter()
    (x, y, xt, yt), val = spec.data(), spec.validation()
    key = _theory_key(spec, N, temperature, (x, y, xt, yt, *(val or ())))
    if _finished(path, key) is not None:
        return path
    point = spec.point(N, temperature, data=(x, y, xt, yt), correction="none")
    t = experiment.scan(point, [N], [temperature], gp=False).theories[(int(N), float(temperature))]  # one cell
    ds = t.to_dataset()
    ds["accuracy"] = theory_accuracy(t, xt, yt)
    ds["accuracy_validation"] = np.nan if val is None else theory_accuracy(t, *val)  # NaN: the task has none
    ds["converged"] = not t.problems  # converged, and to a minimum
    ds.attrs.update(settings_key=key, seconds=time.perf_counter() - t0)
    return _io.save(ds, path)


def sample_job(spec: Spec, N: int, temperature: float, folder: Path, settings: SamplerSettings,
               progress_bar: bool) -> Path:
    """Sampling at width ``N``, ``temperature``, compared with the theory: ``folder/sampled-N..-T...nc``."""
    path = folder / f"sampled-{_tag(N, temperature)}.nc"
    t0 = time.perf_counter()
    x, y, xt, yt = spec.data()
    key = _sample_key(spec, N, temperature, (x, y, xt, yt), settings)
    if _finished(path, key) is not None:
        return path
    result = experiment.evaluate(spec.point(N, temperature, data=(x, y, xt, yt), sampler=settings,
                                          progress_bar=progress_bar))
    post = result.posterior  # the theory corrected (§8), compared both corrected and at leading order
    post.save(folder / f"posterior-{_tag(N, temperature)}.nc")
    ds = result.comparison.to_dataset()
    chain_means = cast(xr.DataArray, post.tree["posterior"]["f_test"]).mean("draw").values  # [chain, test]
    ds["accuracy_per_chain"] = ("chain", [accuracy(m, yt) for m in chain_means])
    ds.attrs.update(settings_key=key, seconds=time.perf_counter() - t0, sampler_settings=post.tree.attrs["settings"])
    return _io.save(ds, path)


def run_job(job: Job) -> str:
    """Run one sweep job (a module-level function, so that Dask workers can run it); returns its file."""
    p = job.params
    spec = spec_from_dict(tomllib.loads(p["spec"]), root=p.get("root", "."))
    folder = Path(p["folder"])
    if p["kind"] == "theory":
        return str(theory_job(spec, p["width"], p["temperature"], folder))
    settings = spec.sampler.replace(seed=job.seed)
    return str(sample_job(spec, p["width"], p["temperature"], folder, settings, p.get("progress_bar", False)))


def sweep_jobs(spec: Spec, folder: Path, widths, sample_widths, temperatures, *,
               progress_bar: bool = False) -> list[Job]:
    """The jobs of a sweep: theory at ``widths × temperatures``, sampling at ``sample_widths × temperatures``.

    A sampling job's seed is ``job_seed(spec.sampler.seed, kind="sample", width=N, temperature=temp)`` at
    each temperature ``temp``.
    """
    common = {"spec": spec.to_toml(), "root": str(Path(spec.root).resolve()), "folder": str(folder)}
    jobs = [Job(f"theory-{_tag(N, temp)}", common | {"kind": "theory", "width": N, "temperature": temp}, 0)
            for temp in temperatures for N in widths]
    for temp in temperatures:
        for N in sample_widths:
            seed = job_seed(spec.sampler.seed, kind="sample", width=N, temperature=temp)
            params = common | {"kind": "sample", "width": N, "temperature": temp, "progress_bar": progress_bar}
            jobs.append(Job(f"sample-{_tag(N, temp)}", params, seed))
    return jobs


# ----------------------------------------------------------------------------
# gathering
# ----------------------------------------------------------------------------
def _theory_table(files: dict[tuple[int, float], Path], widths, temperatures) -> xr.Dataset:
    rows = []
    for temp in temperatures:
        per_width = []
        for N in widths:
            t = _io.load_dataset(files[N, temp])
            if not bool(t["converged"]):
                warnings.warn(f"the theory at N={N}, temperature={temp} did not converge (max |dS/dU| = "
                              f"{float(t['max_gradient']):.2g}): its numbers are not a solution", RuntimeWarning,
                              stacklevel=3)
            per_width.append(t[list(THEORY_VARS)].assign(seconds=t.attrs["seconds"]))
        rows.append(xr.concat(per_width, dim=xr.DataArray(widths, dims="width", name="width"), coords="minimal",
                              compat="override"))
    th = xr.concat(rows, dim=xr.DataArray(temperatures, dims="temperature", name="temperature"), coords="minimal",
                   compat="override")
    return th.rename({v: f"{v}_theory" for v in ("U", "accuracy", "accuracy_validation", "converged")}).rename(
        seconds="theory_seconds")


MIN_CHAINS_SE = 3
"""Fewest chains for a standard error over chains (with two, their spread is too often zero or meaningless)."""


def _sampled_table(sampled: list[xr.Dataset], sample_widths: list[int]) -> xr.Dataset:
    """Per-width comparisons gathered along ``sample_width``."""
    sw = xr.DataArray(sample_widths, dims="sample_width", name="sample_width")
    keep = ["U_sampled", "U_mcse", "U_theory", "check_value", "check_mcse", "check_noise_floor", "check_gap",
            "check_passed", "accuracy"]
    s = xr.concat([d[keep] for d in sampled], dim=sw, coords="minimal", compat="override")
    out = s[["U_sampled", "U_mcse", "check_value", "check_mcse", "check_noise_floor", "check_gap", "check_passed"]]
    out["U_theory_at_sample_width"] = s["U_theory"]
    extra = ["U_sd_theory", "U_sd_sampled", "alternative_U_theory"] + [
        f"alternative_check_{k}" for k in ("value", "mcse", "noise_floor", "gap", "passed")]
    if all(v in d for d in sampled for v in extra):  # leading and corrected theory side by side
        alt = xr.concat([d[extra] for d in sampled], dim=sw, coords="minimal", compat="override")
        out = out.merge(alt)
        out["alternative_verdict"] = ("sample_width", [d.attrs["alternative_verdict"] for d in sampled])
    out["accuracy_sampled"] = s["accuracy"].sel(predictor="sampled", drop=True)
    out["accuracy_sampled_se"] = ("sample_width", [
        float(d["accuracy_per_chain"].std(ddof=1) / np.sqrt(d.sizes["chain"])) if d.sizes["chain"] >= MIN_CHAINS_SE
        else np.nan for d in sampled
    ])
    out["accuracy_sampled_se"].attrs["note"] = (f"standard error over chains; NaN (unavailable) with fewer than "
                                                f"{MIN_CHAINS_SE} chains")
    settings = [json.loads(d.attrs["sampler_settings"]) for d in sampled]
    out["sampler_seed"] = ("sample_width", [s["seed"] for s in settings])
    out["chain_method"] = ("sample_width", [s["chain_method"] for s in settings])
    out["verdict"] = ("sample_width", [d.attrs["verdict"] for d in sampled])
    out["verdict_record"] = ("sample_width", [d.attrs["verdict_record"] for d in sampled])
    out["verdict_record"].attrs["note"] = "each point's verdict as bayes_attn.verdict.Verdict.to_json wrote it"
    out["sample_seconds"] = ("sample_width", [d.attrs["seconds"] for d in sampled])
    return out


def _slopes(ds: xr.Dataset) -> dict[str, float]:
    """Fitted power-law slopes of the noise-corrected gaps against 1/N (see :func:`power_law_slope`)."""
    out: dict[str, float] = {}
    inv = 1.0 / ds["sample_width"].values
    prefixes = [""] + (["alternative_"] if "alternative_check_gap" in ds else [])
    for prefix in prefixes:
        for name, key in (("U (relative Frobenius)", "U"), ("predictor mean (relative L2)", "mean")):
            c = ds.sel(check=name)
            slope, se, used = power_law_slope(inv, c[f"{prefix}check_gap"].values, c[f"{prefix}check_mcse"].values,
                                              c[f"{prefix}check_noise_floor"].values)
            k = f"{prefix}slope_{key}"
            out |= {k: slope, f"{k}_se": se, f"{k}_points": int(used.sum())}
    return out


def _failures(outcomes) -> list[dict]:
    failed = [{"job": o.job.name, "error": o.error} for o in outcomes if not o.ok]
    for f in failed:
        log.warning(f"job {f['job']} failed: {f['error']}")
    return failed


def _provenance(spec: Spec, data, validation) -> dict:
    x, y, xt, yt = data
    return {"spec": spec.to_toml(), "name": spec.name, "sampler_settings": json.dumps(spec.sampler.to_dict()),
            "data_fingerprint": json.dumps({"train": data_fingerprint(x, y), "test": data_fingerprint(xt, yt),
                                            "validation": validation and data_fingerprint(*validation)}),
            "path_names": json.dumps(spec.compare.path_names), "n_train": int(len(y))}


def _portable(spec: Spec) -> Spec:
    """The spec with ``chain_method="auto"`` made ``"sequential"``, which every worker can run (one device
    suffices), so that a job's draws do not depend on where it ran."""
    if spec.sampler.chain_method != "auto":
        return spec
    return dataclasses.replace(spec, sampler=spec.sampler.replace(chain_method="sequential"))


def _check_widths(name: str, widths, at_least_one: str | None = None) -> list[int]:
    """Sorted distinct widths; ``at_least_one``: refuse an empty list (the text says where the widths come from)."""
    out = sorted({_checks.width(name, w) for w in widths})
    if at_least_one is not None and not out:
        raise ValueError(f"{name} must hold at least one width{at_least_one}, got []")
    return out


def _check_sampling(spec: Spec, sample_widths, temps, executor: Executor | None) -> None:
    """Refuse before the first job what a sampling job would (:func:`bayes_attn.experiment.check`, as ``run``
    does), at every sampled width; the memory where the jobs run on this machine (not on another's workers)."""
    here = executor is None or isinstance(executor, (InProcess, DaskLocal))
    data = spec.data() if sample_widths else None
    for N in sample_widths:
        for i, temp in enumerate(temps):  # the memory does not depend on the temperature: checked once per width
            experiment.check(spec.point(N, temp, data=data, sampler=spec.sampler), memory_check=here and i == 0)


def _check_temperatures(temperatures) -> list[float]:
    temps = sorted({_checks.positive("temperatures", t) for t in temperatures})
    if not temps:
        raise ValueError("temperatures must hold at least one positive number")
    return temps


# ----------------------------------------------------------------------------
# the sweeps
# ----------------------------------------------------------------------------
def sweep(spec: Spec, out: str | Path, *, widths=None, sample_widths=None, temperatures=None,
          executor: Executor | None = None, progress_bar: bool = True, force: bool = False) -> xr.Dataset:
    """Theory at ``widths`` and sampling (``spec.sampler``) at ``sample_widths``, at one temperature or a grid;
    writes ``sweep.nc``.

    Args:
        spec: the run specification; ``widths``/``sample_widths`` default to its ``[compare]`` lists.
        temperatures: default ``[spec.temperature]``; with several, the best temperature per width is
            chosen on the validation set (``sample_widths`` must then be among ``widths``).
        executor: where the jobs run (:mod:`bayes_attn.sweep._executors`; default: this process).

    Per-job results go to ``out/widths/`` as they finish (a rerun resumes);
    ``sweep.nc`` and the figures replace the previous ones together when the
    sweep ends; with several temperatures, so does ``chosen.toml``, the given spec at the pooled temperature
    (:mod:`bayes_attn.sweep._temperature`). Failed jobs are listed in ``sweep.nc`` (``failed_jobs``) and
    the finished ones are kept; the table then covers what finished. The
    sweep's verdict (attribute ``verdict``, see :func:`sweep_verdict`) is
    ``"inconclusive"`` when the sampler's diagnostics failed at some sampled
    width (variable ``verdict`` per width); the figures mark those points.
    ``force``: write into a non-empty folder this package did not write.
    """
    out = Path(out)
    widths = _check_widths("widths", spec.compare.widths if widths is None else widths,
                           at_least_one=" (--widths, or compare.widths in the spec)")
    sample_widths = _check_widths("sample_widths",
                                  spec.compare.sample_widths if sample_widths is None else sample_widths)
    temps = _check_temperatures([spec.temperature] if temperatures is None else temperatures)
    if len(temps) > 1 and not set(sample_widths) <= set(widths):
        raise ValueError(f"with several temperatures, sample_widths must be among widths {widths}, got {sample_widths}")
    given, spec = spec, _portable(spec)
    data, validation = spec.data(), spec.validation()
    if len(temps) > 1 and validation is None:
        raise ValueError(f"temperatures: several temperatures are chosen among on a validation set, and "
                         f"{getattr(spec.task, 'file', 'the task')} holds none (add x_val and y_val), got {temps}")
    _check_sampling(spec, sample_widths, temps, executor)
    with outputs.output_folder(out, force=force, command="sweep", files=SWEEP_FILES) as stage:
        folder = outputs.cache_folder(stage.folder, "widths")
        jobs = sweep_jobs(spec, folder, widths, sample_widths, temps, progress_bar=progress_bar and executor is None)
        outcomes = run_jobs(run_job, jobs, executor, progress=progress_bar)
        failed = _failures(outcomes)
        done = {(o.job.params["kind"], o.job.params["width"], o.job.params["temperature"]): Path(o.value)
                for o in outcomes if o.ok}
        ds = _assemble(spec, done, widths, sample_widths, temps, data, validation)
        ds.attrs.update(_provenance(spec, data, validation), failed_jobs=json.dumps(failed),
                        verdict=sweep_verdict(ds).value)
        stage.record.update(failed_jobs=failed, jobs=len(jobs), verdict=ds.attrs["verdict"])
        _io.save(ds, stage.path("sweep.nc"))
        _sweep_figures(ds, spec, stage)
        if "pooled_temperature" in ds:
            stage.path(CHOSEN_SPEC).write_text(chosen_spec(given, ds).to_toml())
    return ds


def sweep_verdict(ds: xr.Dataset) -> verdict.Verdict:
    """The sweep's headline (:func:`bayes_attn.verdict.combine`): inconclusive where some sampled point's
    verdict is (its reason ``N=…, T=…``) or some width's theory is not a solution (:func:`_unsolved_points`),
    disagree where some sampled point disagrees, else agree; ``theory only`` without sampled widths."""
    unsolved = verdict.of_theory(_unsolved_points(ds))
    if "verdict" not in ds:
        return verdict.combine([unsolved], sampled=False)
    stored = "verdict_record" if "verdict_record" in ds else "verdict"  # a sweep.nc written before the records
    points = [verdict.Verdict.from_json(v).at(point) for point, v in _sampled_points(ds, stored)]
    return verdict.combine([*points, unsolved])


def _unsolved_points(ds: xr.Dataset) -> list[str]:
    """``"N=…, T=…: the theory is not a solution"`` for every width whose reported theory did not converge to a
    minimum: at its one temperature, or with a temperature grid at none of them."""
    if "converged_theory" not in ds:
        return []
    ok = ds["converged_theory"]
    if "temperature" in ok.dims:
        bad = ~ok.any("temperature")
        return [f"N={int(N)}: the theory is not a solution at any temperature" for N in ok["width"].values[bad.values]]
    temp = float(ds["temperature"]) if "temperature" in ds.coords else float("nan")
    failed = ok["width"].values[~ok.values.astype(bool)]
    return [f"N={int(N)}, T={temp:g}: the theory is not a solution" for N in failed]


def _sampled_points(ds: xr.Dataset, name: str) -> list[tuple[str, str]]:
    """``("N=…, T=…", ds[name] there)`` of every sampled point of ``ds``."""
    temps = np.atleast_1d(ds["temperature"].values)
    return [(f"N={int(N)}, T={float(temps[j]):g}", str(v)) for i, N in enumerate(ds["sample_width"].values)
            for j, v in enumerate(np.atleast_1d(ds[name].isel(sample_width=i).values))]


def _test_set_errors(ds: xr.Dataset, n_test: int) -> None:
    """Beside each accuracy's sampling error, the test set's own: the binomial standard error on ``n_test``
    examples (``accuracy_theory_test_se``, ``accuracy_sampled_test_se``), each named in its attributes."""
    for acc in ("accuracy_theory", "accuracy_sampled"):
        if acc in ds:
            ds[f"{acc}_test_se"] = xr.apply_ufunc(binomial_se, ds[acc], kwargs={"n": n_test})
            ds[f"{acc}_test_se"].attrs.update(
                long_name="test-set error", note=f"binomial standard error of the accuracy on the {n_test} test "
                "examples: how far another test set of this size could move it")
    if "accuracy_sampled_se" in ds:
        ds["accuracy_sampled_se"].attrs["long_name"] = "sampling error"


def _assemble(spec: Spec, done: dict, widths, sample_widths, temps, data, validation) -> xr.Dataset:
    """``sweep.nc``'s table from the finished jobs (widths with a failed job at some temperature are left out)."""
    _, _, xt, yt = data
    widths = [N for N in widths if all(("theory", N, temp) in done for temp in temps)]
    sample_widths = [N for N in sample_widths if all(("sample", N, temp) in done for temp in temps)]
    gps = experiment.scan(spec.point(data=data, correction="none"), [], temps).gps
    gp_acc = [gp_accuracies(spec, gps[temp], xt, yt) for temp in temps]
    gp_val = [np.nan if validation is None else accuracy(gps[temp].predict(validation[0])[0], validation[1])
              for temp in temps]
    ds = xr.Dataset(
        {"accuracy_gp": (("temperature", "gp_model"), [list(a.values()) for a in gp_acc]),
         "accuracy_gp_validation": ("temperature", gp_val)},
        coords={"gp_model": list(gp_acc[0]), "temperature": temps},
    )
    if widths:
        files = {(N, temp): done["theory", N, temp] for N in widths for temp in temps}
        ds = ds.merge(_theory_table(files, widths, temps))
    if sample_widths:
        per_temp = [_sampled_table([_io.load_dataset(done["sample", N, temp]) for N in sample_widths], sample_widths)
                 for temp in temps]
        ds = ds.merge(xr.concat(per_temp, dim=xr.DataArray(temps, dims="temperature", name="temperature"),
                                coords="minimal", compat="override"))
    _test_set_errors(ds, len(yt))
    if "alternative_check_gap" in ds:
        ds.attrs.update(correction=spec.compare.correction,
                        alternative_correction="none" if spec.compare.correction == "laplace" else "laplace")
    if len(temps) == 1:
        ds = ds.squeeze("temperature")  # keeps ``temperature`` as a scalar coordinate
        if sample_widths:
            ds.attrs.update(_slopes(ds))
        ds.attrs["temperature"] = temps[0]
        return ds
    if widths:
        ds = choose_temperatures(ds, len(validation[1]))
    i = choose_temperature(gp_val)
    ds["best_temperature_gp"] = temps[i]
    ds["accuracy_gp_at_best"] = ds["accuracy_gp"].isel(temperature=i)
    ds.attrs["temperatures"] = json.dumps(temps)
    return ds


SWEEP_FILES = ("sweep.nc", "accuracy_vs_width.png", "finite_size.png", "order_parameter_sd.png", CHOSEN_SPEC)
"""Every file :func:`sweep` may write into its folder (besides ``manifest.json`` and the ``widths/`` cache)."""


def _sweep_figures(ds: xr.Dataset, spec: Spec, stage: outputs.Staging) -> None:
    if "width" not in ds.dims:
        return
    view = best_temperature_view(ds).assign_attrs(path_names=spec.compare.path_names)
    figures.sweep_accuracy(view, stage.path("accuracy_vs_width.png"))
    if "sample_width" in ds.dims and "temperature" not in ds.dims:
        figures.finite_size(view, stage.path("finite_size.png"))
        if "U_sd_theory" in ds:
            figures.order_parameter_sd(ds, stage.path("order_parameter_sd.png"))


def alpha_sweep(spec: Spec, out: str | Path, *, alpha: float, widths, temperature: float | None = None,
                progress_bar: bool = True) -> xr.Dataset:
    """Theory against sampling along ``P = alpha N`` (the limit the theory is exact in, docs/theory.md §4).

    At each width ``N`` the task gets ``P = round(alpha N)`` training sequences
    (the test set is unchanged); writes ``alpha_sweep.nc`` with the gaps of
    every check along ``sample_width`` and their fitted slopes. Resumable like :func:`sweep`.
    """
    out = Path(out)
    alpha = _checks.positive("alpha", alpha)
    widths = _check_widths("widths", widths, at_least_one="")
    temperature = spec.temperature if temperature is None else _checks.positive("temperature", temperature)
    task = spec.task
    if not isinstance(task, MarkovTask):
        raise ValueError(f"alpha_sweep draws P = alpha N training sequences at each width, which needs task.kind = "
                         f"'markov', got {spec.kind!r}")
    spec = _portable(spec)
    specs = {N: dataclasses.replace(spec, task=dataclasses.replace(task, n_train=max(2, int(round(alpha * N)))))
             for N in widths}
    for N, s in specs.items():
        _check_sampling(s, [N], [temperature], None)
    with outputs.output_folder(out, command="alpha-sweep", files=("alpha_sweep.nc",)) as stage:
        outputs.cache_folder(stage.folder, "widths")
        sampled, n_train = [], []
        for N, s in specs.items():
            seed = job_seed(spec.sampler.seed, kind="sample", width=N, temperature=temperature)
            settings = spec.sampler.replace(seed=seed)
            path = sample_job(s, N, temperature, stage.folder / "widths", settings, progress_bar)
            sampled.append(_io.load_dataset(path))
            n_train.append(s.task.n_train)
        ds = _sampled_table(sampled, widths).assign_coords(n_train=("sample_width", n_train))
        ds.attrs.update(_slopes(ds), alpha=float(alpha), temperature=temperature, name=spec.name, spec=spec.to_toml())
        _io.save(ds, stage.path("alpha_sweep.nc"))
    return ds

