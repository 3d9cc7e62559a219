#!/usr/bin/env bash
# Builds torch_monarch for CUDA on a GPU machine and runs the GPU tests, the
# doctor and the CUDA benchmarks: world 1 (per-op overhead vs ProcessGroupNCCL)
# and world 2 on one GPU (the host-staged route vs ProcessGroupGloo's CUDA path).
# Uses the machine's torch (CUDA) and NCCL wheel as they are: nothing is
# downloaded. Logs go to $OUT (default /tmp/monarch-gpu-logs).
#
#   bash test/gpu/run_on_device.sh            # build, tests, doctor, benchmark
#   SKIP_BENCH=1 bash test/gpu/run_on_device.sh       # no benchmark
#   RUN_CPU_TESTS=1 bash test/gpu/run_on_device.sh    # also host-tensor tests with this build
#   TESTS="test/gpu/test_cuda_host_staged.py" bash test/gpu/run_on_device.sh  # only these test files
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/monarch-gpu-logs}"
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
status=0

step() { echo "=== $* ($(date +%T))" | tee -a "$OUT/summary.txt"; }

step "environment"
{ nvidia-smi -L; "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'; nproc; } 2>&1 | tee "$OUT/env.txt"

step "build (GPU_PLATFORM=cuda)"
# setup.py refuses a compiler that would link libstdc++ statically (the GPU
# machine's default /opt/gcc does): fall back to the system's g++.
if ! [[ "$(${CXX:-c++} -print-file-name=libstdc++.so)" == /* ]] && [ -x /usr/bin/g++ ]; then
  export CXX=/usr/bin/g++ CC=/usr/bin/gcc
  echo "CXX=$CXX (the default compiler has no shared libstdc++)" | tee -a "$OUT/summary.txt"
fi
# In place and without pip: pip's editable install wants to fetch setuptools
# into an isolated build environment, and the GPU machine has no network.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! GPU_PLATFORM=cuda MAX_JOBS="$(nproc)" "$PYTHON" setup.py build_ext --inplace > "$OUT/build.txt" 2>&1; then
  tail -50 "$OUT/build.txt"
  echo "build failed" | tee -a "$OUT/summary.txt"
  exit 1
fi
grep "torch_monarch build" "$OUT/build.txt" | tee -a "$OUT/summary.txt"

step "doctor"
"$PYTHON" -m torch_monarch.doctor 2>&1 | tee "$OUT/doctor.txt"

if [ -z "${SKIP_BENCH:-}" ]; then
  step "benchmark: --device cuda --world-size 1 --quick"
  timeout 200 "$PYTHON" benchmarks/collectives.py --device cuda --world-size 1 --quick > "$OUT/bench.txt" 2> "$OUT/bench-progress.txt" || status=1
  grep -v '^JSON' "$OUT/bench.txt" | tee -a "$OUT/summary.txt"
  step "benchmark: --device cuda --world-size 2 --peer gloo (both ranks on GPU 0)"
  CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" timeout 300 "$PYTHON" benchmarks/collectives.py --device cuda \
    --world-size 2 --peer gloo --ops "${BENCH_OPS:-allreduce}" --sizes "${BENCH_SIZES:-64K,1M,4M,16M,64M}" \
    > "$OUT/bench-shared.txt" 2> "$OUT/bench-shared-progress.txt" || status=1
  grep -v '^JSON' "$OUT/bench-shared.txt" | tee -a "$OUT/summary.txt"
fi

step "GPU tests"
# One pytest per file, so that a crash in one does not hide the others; C++
# logs at INFO and NCCL warnings go into the same log.
for file in ${TESTS:-test/gpu/test_*.py}; do
  echo "--- $file" >> "$OUT/gpu-tests.txt"
  MONARCH_LOG_LEVEL="${MONARCH_LOG_LEVEL:-INFO}" NCCL_DEBUG="${NCCL_DEBUG:-WARN}" \
    timeout "${TEST_BUDGET_S:-300}" "$PYTHON" -X faulthandler -m pytest "$file" -v -s -rf --timeout 150 \
    >> "$OUT/gpu-tests.txt" 2>&1 || status=1
done
grep -E "^--- |PASSED|FAILED|SKIPPED|ERROR|passed|failed|rank [01]:|stuck|shrunk|communicator init|Fatal|kill:|stop:|abort:" \
  "$OUT/gpu-tests.txt" | tee -a "$OUT/summary.txt"

if [ -n "${RUN_CPU_TESTS:-}" ]; then
  step "CPU collectives with the CUDA build"
  "$PYTHON" -m pytest test/test_p2p.py -q -x > "$OUT/cpu-tests.txt" 2>&1 || status=1
  tail -3 "$OUT/cpu-tests.txt" | tee -a "$OUT/summary.txt"
fi
step "done (status $status)"
exit $status
