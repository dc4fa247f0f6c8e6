#!/usr/bin/env bash
# Paper Fig. 3 at the paper's size on one GPU: models/omniglot_paper.toml (2 layers x 4 heads,
# N0 = 192, width 512, d_qk 128, Adam with L2 5e-5, lr 3e-4, batch 128, at most 40960 steps; rotations as
# new classes and early stopping on validation, as the CPU spec's validation comparison chose),
# then theory, sampling, head scores, pruning and the spread of rho, into inference/results/fig3_paper/.
#
#   bash inference/fig3_gpu.sh [extra bayes-attn prune options, e.g. --retrain]
#   SPEC=models/omniglot_2x8.toml OUT=inference/results/fig3_paper_2x8 bash inference/fig3_gpu.sh
#
# Needs jax with CUDA (pip install -U "jax[cuda12]") in the environment; the data are the shipped
# data/omniglot. Not run yet (no GPU was available). Expected time on one H200, estimated, not measured:
#   - training: ~39 GFLOP per step (forward + backward, 8 heads of 512x512 value maps over
#     128 x 48 tokens); at an assumed 10 % of the H200's ~60 TFLOP/s float32, ~7 ms per step, so
#     ~5 min for 40960 steps, plus ~10 min of episode tokens built on the CPU (80 epochs of
#     65536 episodes). Checked against a measured CPU step (benchmarks/bench_paper_step.py,
#     results/paper_step.json): this model takes 0.89 s per step on 2 CPU cores (1.85 cores used), i.e. the
#     CPU delivers ~44 GFLOP/s at the estimate's 39 GFLOP, a plausible rate, and 40960 steps would take ~10 h
#     there; the CPU spec's model takes 0.15 s (5.7x less). Early stopping may end the training sooner;
#   - theory scan: 49 solves at P = 600, 16 paths: ~20 s each on the shared CPU, a few s on the GPU;
#   - sampling (wishart, N = 10 and 100, 2 chains x (300 warm-up + 300 draws)): ~0.2 s per gradient on the CPU
#     at this size, ~10-20x less on the GPU;
#   so about 30-45 min in all (2x8: the theory and sampling grow ~16x; allow 2-3 h).
set -euo pipefail
cd "$(dirname "$0")/.."
SPEC=${SPEC:-models/omniglot_paper.toml}
OUT=${OUT:-inference/results/fig3_paper}
python -c "import jax; print('jax devices:', jax.devices())"
start=$(date +%s)
python -m bayes_attn.cli prune "$SPEC" --out "$OUT" "$@"
echo "wall time: $(( $(date +%s) - start )) s (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
