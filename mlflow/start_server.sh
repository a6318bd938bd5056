#!/usr/bin/env bash
# Start an MLflow tracking server on the local sqlite store that `marl train` writes by default,
# with the same pinned artifact folder, and wait until it answers. Usage: mlflow/start_server.sh [PORT]
set -euo pipefail
port="${1:-5000}"
db="${MARL_MLFLOW_DB:-$PWD/mlflow.db}"
artifacts="${MARL_MLFLOW_ARTIFACTS:-$PWD/mlruns}"
mlflow server --backend-store-uri "sqlite:///$db" --default-artifact-root "$artifacts" \
  --host 127.0.0.1 --port "$port" --workers 1 &
pid=$!
for _ in $(seq 1 60); do
  if curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
    echo "MLflow server ready at http://127.0.0.1:$port (pid $pid)"; wait "$pid"; exit $?
  fi
  sleep 1
done
echo "MLflow server did not answer on port $port within 60 s" >&2
kill "$pid" 2>/dev/null || true
exit 1
