#!/usr/bin/env bash
# The one command on a lent GPU machine (benchmarks/README.md, "On a lent GPU"), from the repository root with the
# wheels of scripts/gpu-wheels in .whl/: installs them, prints the devices, runs the sampler and theory tests on the
# GPU (capped), then benchmarks/gpu.py (GPU against this machine's CPU) in the time left, all within one budget.
#
#   bash benchmarks/gpu.sh [gpu.py options]              # e.g. --stages wishart theory; --quick (tiny sizes)
#   JAX_PLATFORMS=cpu GPU_SH_TESTS=0 bash benchmarks/gpu.sh --quick   # the dry run (tests/test_benchmarks.py)
#
# Environment: OUT (the results' folder, default a new temporary one): gpu.json, gpu_device.log, gpu_cpu.log,
# gpu_tests.xml (JUnit, each test's JAX backend as a property), gpu_tests.log; GPU_SH_TOTAL_S (the whole script's
# wall seconds, default 450); GPU_SH_TESTS=0 (no tests); GPU_SH_TEST_S (the tests' cap, default 100);
# GPU_SH_TEST_MARK (default "not slow"); GPU_SH_TEST_PATHS (default: the sampler, theory, posterior, GP and kernel
# tests); GPU_SH_SITE (where the wheels go, default /tmp/site); PYTHON (python3).
# A failing step is reported and the next one runs; the exit status is gpu.py's.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
SITE=${GPU_SH_SITE:-/tmp/site}
export OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
echo "== gpu.sh: $(date -Is), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), OUT=$OUT," \
     "JAX_PLATFORMS=${JAX_PLATFORMS:-}"
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    && export PYTHONPATH="$SITE" && echo "wheels installed into $SITE ($(ls .whl | wc -l), $(elapsed) s)" \
    || echo "gpu.sh: the wheels did not install; going on without them"
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$ROOT"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader
  nvidia-smi | grep -m1 "CUDA Version" || true
else
  echo "nvidia-smi: none"
fi
"$PY" -c "import jax, jaxlib, numpyro, numpy; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'numpyro',
numpyro.__version__, 'numpy', numpy.__version__); print('default backend:', jax.default_backend(), jax.devices())" \
  || echo "gpu.sh: jax does not start"
"$PY" -c "import arviz, arviz_stats, netCDF4, tomli_w, bayes_attn, bayes_attn.posterior; print('imports: arviz',
arviz.__version__, 'netCDF4', netCDF4.__version__, 'bayes_attn from', bayes_attn.__file__)" \
  || echo "gpu.sh: a package does not import (the wheels?)"

if [ "${GPU_SH_TESTS:-1}" != 0 ]; then
  # one GPU shared by 4 pytest workers: no process takes most of its memory up front
  XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH="$PYTHONPATH:$ROOT/benchmarks" \
    timeout -s INT -k 15 "${GPU_SH_TEST_S:-100}" "$PY" -m pytest -q -n 4 --dist loadgroup -p gpu_pytest \
    -m "${GPU_SH_TEST_MARK:-not slow}" -p no:cacheprovider --junitxml "$OUT/gpu_tests.xml" \
    ${GPU_SH_TEST_PATHS:-tests/samplers tests/theory tests/test_posterior.py tests/test_gp.py tests/test_kernels.py} \
    > "$OUT/gpu_tests.log" 2>&1
  code=$?
  tail -n 15 "$OUT/gpu_tests.log" | cut -c1-300
  echo "== tests: exit $code$([ $code = 124 ] && echo ' (stopped at the cap)'), at $(elapsed) s"
fi

budget=$(( ${GPU_SH_TOTAL_S:-450} - $(elapsed) - 30 ))
[ "$budget" -lt 60 ] && budget=60
echo "== gpu.py: budget $budget s"
timeout -k 10 $(( budget + 45 )) "$PY" benchmarks/gpu.py --budget-s "$budget" --out "$OUT/gpu.json" "$@"
code=$?
echo "== gpu.py: exit $code; gpu.sh done in $(elapsed) s; in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $code
