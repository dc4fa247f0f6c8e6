"""Path kernels of the Fig. 2c Markov network (paper Fig. 2, path kernels panel).

The centred path kernels ``C[π, π]`` of the good path (same-token → uniform)
and the denoising path (random → uniform), and the GP kernel against the
renormalised kernel ``K(U)`` of the finite-width theory (N = 10, T = 0.01),
on the training sequences sorted by label.

    python inference/path_kernels.py [--out inference/results/fig2c/path_kernels.png]
"""

import argparse


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="models/markov_4paths.toml")
    p.add_argument("--out", default="inference/results/fig2c/path_kernels.png")
    a = p.parse_args()
    from bayes_attn import gp_limit, load_spec, solve_theory  # after parsing: --help imports nothing heavy
    from bayes_attn.oneshot import path_kernels

    spec = load_spec(a.spec)
    x, y, _, _ = spec.data()
    net = spec.net()
    theory = solve_theory(net, x, y, temperature=spec.temperature)
    gp = gp_limit(net, x, y, temperature=spec.temperature)
    names = spec.compare.path_names
    print(path_kernels(theory, gp, list(names) or net.path_labels[:2], a.out, names=names))


if __name__ == "__main__":
    main()
