#!/usr/bin/env bash
# Set up from a clean checkout, start the embedded store, seed a small demo site and show
# it. Everything lives under .demo/ (config, store data); each run starts from scratch.
# The embedded store keeps running afterwards so you can explore:
#   export CHEETO_CONFIG=$PWD/.demo/config.yaml; .venv/bin/cheeto ng user show -u alice -s farm
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
scripts/setup.sh
DEMO=$ROOT/.demo
export CHEETO_CONFIG=$DEMO/config.yaml
cheeto() { "$ROOT/.venv/bin/cheeto" "$@"; }

if [ -f "$CHEETO_CONFIG" ]; then cheeto db stop -q || true; fi
rm -rf "$DEMO"
mkdir -p "$DEMO"
cat > "$CHEETO_CONFIG" <<CONF
mongo:
  default:
    database: demo
    embedded:
      path: $DEMO/store
      port: ${CHEETO_DEMO_PORT:-27217}
CONF

step() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }
step "seeding the demo site (the embedded store starts on first use)"
cheeto ng group seed-access-status --json >/dev/null
cheeto ng site new -s farm --fqdn farm.hpc.example.org -q
cheeto ng site alias add -s farm caesfarm -q
cheeto ng group new generic -g hpc-users --gid 5000 -q
cheeto ng site sticky add group -s farm -g hpc-users -q
cheeto ng user new generic -u alice --email alice@example.org --fullname "Alice Liddell" \
  --uid 2001 --type admin --access login-ssh slurm root-ssh -q
cheeto ng user new generic -u bob --email bob@example.org --fullname "Bob Builder" \
  --uid 2002 --access login-ssh slurm -q
cheeto ng user new generic -u carol --email carol@example.org --fullname "Carol Danvers" \
  --uid 2003 --access login-ssh -q
cheeto ng user new system -u hpc-svc -q
for u in alice bob carol hpc-svc; do cheeto ng user add site -u "$u" -s farm -q; done
cheeto ng group new from-sponsor -u alice -s farm -q
cheeto ng group add member -g alicegrp -u bob -s farm -q
cheeto ng group add slurmer -g alicegrp -u bob -s farm -q
cheeto ng user status -u carol -s farm --status inactive --reason "left the lab" -q

step "cheeto ng site show -s farm"
cheeto ng site show -s farm
step "cheeto ng user list -s farm"
cheeto ng user list -s farm
printf '\nThe embedded store is still running. Explore with:\n  export CHEETO_CONFIG=%s\n  %s/.venv/bin/cheeto ng user show -u bob -s farm\nStop it with: .venv/bin/cheeto db stop\n' \
  "$CHEETO_CONFIG" "$ROOT" >&2
