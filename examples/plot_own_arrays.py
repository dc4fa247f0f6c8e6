"""
Your own arrays: the command and the API side by side
=====================================================

Data and attention of your own go to the ``bayes-attn`` command as two
``.npz`` files and a spec of kind ``task.kind = "arrays"`` (docs/own-data.md,
docs/spec.md). The same arrays go to the API as plain NumPy arrays. Here both
run on a small hidden-Markov-chain task (docs/theory.md §6) with the four
attention paths of Fig. 2c, and give the same theory.
"""

# %%
# The two files: ``data.npz`` (``x [P, T, N0]``, ``y [P]``, ``x_test``,
# ``y_test``, here also a validation set) and ``attention.npz`` (``W_l``, one
# ``[H_l, N0, N0]`` array per layer), beside the spec.
import contextlib
import io
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import bayes_attn as ba
from bayes_attn import cli
from bayes_attn.tasks.markov import MarkovTask

folder = Path(tempfile.mkdtemp())
task = MarkovTask(feature_dim=8, seq_len=5, n_train=40, n_test=100, seed=3)
x, y, x_test, y_test = task.generate()  # x: [40, 6, 14]
x_val, y_val = task.validation()
np.savez(
    folder / "data.npz",
    x=x,
    y=y,
    x_test=x_test,
    y_test=y_test,
    x_val=x_val,
    y_val=y_val,
)
layers = [["same_token", "random"], ["uniform", "random"]]
attention = task.network(
    layers, width=10, beta=2.0
).attention  # [H_l, N0, N0] per layer
np.savez(
    folder / "attention.npz", **{f"W_{l}": w for l, w in enumerate(attention, start=1)}
)
(folder / "spec.toml").write_text("""
name = "mine"
temperature = 0.1

[task]
kind = "arrays"
file = "data.npz"

[network]
attention = "attention.npz"
width = 10

[sampler]
name = "wishart"
num_chains = 4
""")

# %%
# The command: ``bayes-attn run spec.toml --out OUT --samples 300 --warmup 200``
# (here through :func:`bayes_attn.cli.main`, as the shell would call it). It
# solves the theory, samples, compares and writes its files into ``OUT``; its
# report ends with the headline verdict.
out = folder / "run"
report = io.StringIO()
with contextlib.redirect_stdout(report):
    status = cli.main(
        [
            "run",
            str(folder / "spec.toml"),
            "--out",
            str(out),
            "--samples",
            "300",
            "--warmup",
            "200",
            "--no-progress",
        ]
    )
print(
    next(line for line in report.getvalue().splitlines() if line.startswith("headline"))
)
print(
    "exit status",
    status,
    "; wrote",
    sorted(p.name for p in out.iterdir() if not p.name.startswith(".")),
)
command_theory = ba.load_theory(out / "theory.nc")
command_post = ba.load_posterior(out / "posterior.nc")

# %%
# The API on the same arrays: the network from the attention, the theory with
# its finite-width correction (§8), the posterior with the same sampler
# settings, and the comparison.
net = ba.Network(attention, widths=10, variances=1.0)
theory = ba.solve_theory(net, x, y, temperature=0.1, correction="laplace")
settings = ba.SamplerSettings(
    name="wishart", num_chains=4, num_warmup=200, num_samples=300
)
post = ba.sample_posterior(
    net, x, y, temperature=0.1, x_test=x_test, sampler=settings, progress_bar=False
)
comparison = ba.compare(theory, post, x_test, y_test)
print(comparison.verdict)
gap = np.abs(theory.U - command_theory.U).max()
print(f"largest difference between the two theories' U: {gap:.1e}")

# %%
# The diagonal of ``U`` per path (the weight each path gets, §4): the theory
# of the command and of the API on one another, and the sampled means with
# their Monte-Carlo standard errors; then the predictor on the test set.
paths = net.path_labels
k = np.arange(len(paths))
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
left.plot(k, np.diag(command_theory.U), "s", ms=10, mfc="none", label="theory, command")
left.plot(k, np.diag(theory.U), "x", ms=8, label="theory, API")
for shift, (name, p) in zip(
    (-0.12, 0.12), [("command", command_post), ("API", post)], strict=True
):
    table = p.summary().table.loc[
        [f"U[{q}, {q}]" for q in paths]
    ]  # ArviZ's mean and MCSE
    left.errorbar(
        k + shift,
        table["mean"],
        yerr=table["mcse_mean"],
        fmt=".",
        capsize=3,
        label=f"sampled, {name}",
    )
left.set(
    xticks=k,
    xticklabels=paths,
    xlabel="attention path",
    ylabel="U (diagonal)",
    title="Order parameter, N = 10",
)
left.legend(fontsize=8)
mean, _ = theory.predict(x_test)
sampled, _ = post.predict(x_test)
right.plot(mean, sampled, ".", alpha=0.6)
right.axline((0, 0), slope=1, color="grey", lw=0.8)
right.set(
    xlabel="theory's predictor mean",
    ylabel="sampled predictor mean",
    title="Test set, API",
)
plt.show()
