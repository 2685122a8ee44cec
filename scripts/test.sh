#!/usr/bin/env bash
# Set up everything from a clean checkout and run the whole test suite (what CI runs):
#   1. Debian packages for the real services the tests start (slurmdbd, slapd, RabbitMQ, …);
#   2. Python 3.12/3.13 + Poetry + the locked dependencies (scripts/setup.sh);
#   3. ruff, then pytest. Extra arguments go to pytest (e.g. -k user, -x).
# Set CHEETO_TEST_MONGO_URI to run the suite on a real MongoDB replica set instead of the
# embedded store.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-system-deps.sh
scripts/setup.sh
.venv/bin/ruff check cheeto_like tests bench
exec .venv/bin/pytest "$@"
