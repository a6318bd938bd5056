#!/usr/bin/env bash
# GPU smoke check: the whole stack on a CUDA device, for sessions lent a GPU machine.
#
# CI has no GPU, so nothing else runs the CUDA paths (device placement of the constrained-decoding
# mask, the critic, the learner's recomputed logprobs). This script trains tool_use and a 3-agent
# mappo run on `cuda` with short budgets and then runs the test suite there (device `auto` picks
# cuda). It measures no learning: budgets are seconds. Wheels the GPU image lacks travel in .whl/
# (a GPU image without them installs them from there); on an ordinary GPU box, `pip install -e .` replaces that step.
#
#     bash benchmarks/gpu_smoke.sh            # writes logs under ${OUT:-runs/gpu-smoke}
set -u
OUT=${OUT:-runs/gpu-smoke}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "wheel install failed"; exit 1; }
    export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi -L
python3 - <<'EOF'
import torch, transformers, trl, mlflow, pettingzoo
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__,
      "trl", trl.__version__, "mlflow", mlflow.__version__, "pettingzoo", pettingzoo.__version__)
EOF
uri="sqlite:///$OUT/smoke.db"
status=0
step() {  # name, then the marl train flags
    local name=$1; shift
    local t0=$SECONDS
    python3 -m marl.cli train --tracking-uri "$uri" --experiment gpu-smoke --run-name "$name" --policy.device cuda "$@" \
        >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "== $name rc=$rc $((SECONDS - t0)) s"
    grep -E "device|run_id|success_rate|tokens_per_s|Error|error:" "$OUT/$name.log" | tail -12
    [ $rc -eq 0 ] || { tail -40 "$OUT/$name.log"; status=1; }
}
step tool-grpo --sft.seconds 30 --rl.seconds 30 --eval-episodes 10
step info-mappo --scenario info_split --agents 3 --algo mappo --sft.seconds 30 --rl.seconds 30 --eval-episodes 6
t0=$SECONDS
# Parallel workers where pytest-xdist is installed; the step-budget tests run on the CPU, 2 threads each.
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8")
OMP_NUM_THREADS=2 timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -q $workers -rf -p no:cacheprovider tests \
    >"$OUT/pytest.log" 2>&1
echo "== pytest rc=$? $((SECONDS - t0)) s"
tail -30 "$OUT/pytest.log"
exit $status
