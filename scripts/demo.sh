#!/usr/bin/env bash
# Set up from a clean checkout, seed a demo site and run the whole daemon on it:
# `cheeto daemon up` starts the embedded store, a broker (a private RabbitMQ node when
# rabbitmq-server is installed, else kombu's filesystem transport), the hub worker, the
# site worker for farm, beat, the REST API and Flower, then prints their URLs and the
# generated credentials, and the web dashboard's URL with three demo logins (bob, a user
# with a quota, weeks of usage, pending requests and a partition to submit to; alice, an
# operator and the sponsor who decides bob's requests; dana, an admin). Ctrl-C stops
# everything. State lives
# under .demo/ and each run starts from scratch. Extra arguments go to `cheeto daemon up`
# (e.g. --broker filesystem).
#
# While it runs, from another terminal:
#   export CHEETO_CONFIG=$PWD/.demo/config.yaml
#   .venv/bin/cheeto ng user list -s farm
#   .venv/bin/cheeto daemon status
#   .venv/bin/cheeto daemon enqueue sympa_export --wait --config .demo/run/config.yaml
# (enqueue needs the stack's own broker, which .demo/run/config.yaml names)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
scripts/setup.sh
DEMO=$ROOT/.demo
CHEETO=$ROOT/.venv/bin/cheeto

state=$DEMO/run/stack.json
if [ -f "$state" ]; then
  pid=$(sed -n 's/^ *"pid": \([0-9]*\),*$/\1/p' "$state")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    echo "a demo stack is already running (pid $pid); stop it with Ctrl-C or kill $pid" >&2
    exit 1
  fi
fi
if [ -f "$DEMO/config.yaml" ]; then "$CHEETO" db stop -q --config "$DEMO/config.yaml" || true; fi
rm -rf "$DEMO"
mkdir -p "$DEMO/sympa"
cat > "$DEMO/config.yaml" <<CONF
mongo:
  default:
    database: demo
    embedded:
      path: $DEMO/store
      port: ${CHEETO_DEMO_PORT:-27217}
daemon:
  default:
    sites: [farm]
    tasks:
      sympa: {schedule: 60, output_dir: $DEMO/sympa}   # farm's list, every minute
      slurm_sync: {apply: false}   # a site worker for farm; runs only when enqueued
api:
  default:
    port: ${CHEETO_DEMO_API_PORT:-8000}
CONF

exec "$CHEETO" daemon up --config "$DEMO/config.yaml" --seed-demo --run-dir "$DEMO/run" "$@"
