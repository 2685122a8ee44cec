#!/usr/bin/env bash
# Install the Debian packages that the test-service harness (tests/services) needs:
# Slurm accounting (munge + MariaDB + slurmdbd + sacctmgr) and a one-node cluster
# (slurmctld + slurmd, for live job tests), OpenLDAP (slapd + client tools),
# the headers to build the `bonsai` LDAP client from its sdist, RabbitMQ and git, plus
# ssh-keygen and openssl (the container entrypoint and API TLS tests make keys), zsh
# (the completion tests run the zsh script in a real zsh), and Chromium with its
# chromedriver (the dashboard's browser tests drive them; nothing downloads a browser),
# and wrk (bench/api.py's load generator; it falls back to httpx without it), and the
# submit-time quota check's runtime: slurmctld's job_submit/lua plugin (Debian's
# slurm-wlm-basic-plugins, Lua 5.1) with lua-dbi-sqlite3 to read the head node's table,
# and Prometheus (promtool checks and unit-tests deploy/prometheus/cheeto-rules.yml and
# the dashboard's queries; a test scrapes the demo stack with a throwaway prometheus).
#
# Only what is missing is installed, so a second run is quick and prints one summary line.
# Presence is judged by a binary or header that each package provides, not by dpkg state,
# because a half-configured package that still ships the file is good enough for tests.
# The harness starts its own daemons; /usr/sbin/policy-rc.d keeps apt from starting any.
set -euo pipefail

# package -> file whose presence shows that the package is usable
declare -A PROBE=(
  [slurmdbd]=cmd:slurmdbd
  [slurmctld]=cmd:slurmctld
  [slurmd]=cmd:slurmd
  [slurm-client]=cmd:sacctmgr
  [munge]=cmd:munged
  [mariadb-server]=cmd:mariadbd
  [mariadb-client]=cmd:mariadb
  [slapd]=cmd:slapd
  [ldap-utils]=cmd:ldapadd
  [libldap-dev]=file:/usr/include/ldap.h
  [libsasl2-dev]=file:/usr/include/sasl/sasl.h
  [gcc]=cmd:gcc
  [rabbitmq-server]=file:/usr/lib/rabbitmq/bin/rabbitmq-server
  [git]=cmd:git
  [openssh-client]=cmd:ssh-keygen
  [openssl]=cmd:openssl
  [zsh]=cmd:zsh
  [chromium]=cmd:chromium
  [chromium-driver]=cmd:chromedriver
  [wrk]=cmd:wrk
  [slurm-wlm-basic-plugins]=file:/usr/share/doc/slurm-wlm-basic-plugins/copyright
  [lua-dbi-sqlite3]=file:/usr/share/lua/5.1/DBI.lua
  [sqlite3]=cmd:sqlite3
  [prometheus]=cmd:promtool
)
# Install order is fixed so the apt command line is stable and readable.
ORDER=(slurmdbd slurmctld slurmd slurm-client munge mariadb-server mariadb-client slapd ldap-utils
       libldap-dev libsasl2-dev gcc rabbitmq-server git openssh-client openssl zsh
       chromium chromium-driver wrk slurm-wlm-basic-plugins lua-dbi-sqlite3 sqlite3 prometheus)

present() {  # $1: probe spec "cmd:NAME" or "file:PATH"
  local kind=${1%%:*} what=${1#*:}
  case $kind in
    cmd) PATH="$PATH:/usr/sbin:/sbin" command -v "$what" >/dev/null 2>&1 ;;
    file) [ -e "$what" ] ;;
  esac
}

missing=()
for pkg in "${ORDER[@]}"; do
  present "${PROBE[$pkg]}" || missing+=("$pkg")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-system-deps: all ${#ORDER[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "install-system-deps: need root or passwordless sudo to install: ${missing[*]}" >&2
  exit 2
fi

# apt's chatter goes to a log that is shown only when something fails.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
apt_get() {
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@" >>"$log" 2>&1 || {
    cat "$log" >&2
    echo "install-system-deps: apt-get $1 failed (packages: ${missing[*]})" >&2
    exit 1
  }
}
start=$(date +%s)
apt_get update -qq
apt_get install -y -qq --no-install-recommends "${missing[@]}"

# Debian's prometheus postinst enables the service and starts it on :9090 wherever no
# policy-rc.d forbids it. Nothing here wants a system Prometheus (tests start their own
# on a free loopback port), so one we just installed is stopped and disabled through the
# package's own unit or init script. A Prometheus that was already there is left alone.
stop_system_prometheus() {
  local running
  if [ -d /run/systemd/system ]; then
    "${SUDO[@]}" systemctl disable --now prometheus.service >>"$log" 2>&1 || true
    running=(systemctl is-active --quiet prometheus.service)
  else
    "${SUDO[@]}" /etc/init.d/prometheus stop >>"$log" 2>&1 || true
    "${SUDO[@]}" update-rc.d prometheus disable >>"$log" 2>&1 || true
    running=("${SUDO[@]}" /etc/init.d/prometheus status)
  fi
  if "${running[@]}" >/dev/null 2>&1; then
    echo "install-system-deps: the prometheus service still runs; stop it" \
         "(systemctl stop prometheus, or /etc/init.d/prometheus stop)" >&2
    exit 1
  fi
}
case " ${missing[*]} " in
  *" prometheus "*) stop_system_prometheus ;;
esac
echo "install-system-deps: installed ${missing[*]} in $(( $(date +%s) - start ))s"
