#!/usr/bin/env bash
# One-time set-up on a fresh machine (Python 3.10+): the CPU build of torch first (a plain or
# newer torch pulls several GB of CUDA packages), then this project with its extras.
set -euo pipefail
cd "$(dirname "$0")"

# Slurm for the tests' local cluster (tests/slurm/local-cluster.sh): installed once, when missing,
# if this is root with apt-get (Debian/Ubuntu). Elsewhere the Slurm tests skip and say why
# (under CI=true they fail: tests/helpers.py missing_dependency).
slurm_packages="slurm-wlm munge slurmdbd mariadb-server"
if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null || ! command -v munged >/dev/null \
    || ! command -v mariadbd >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup.sh: installing $slurm_packages (the Slurm tests' local cluster)" >&2
    # the packages must not start system daemons: the tests start their own, on their own ports
    policy=/usr/sbin/policy-rc.d
    own_policy=0
    if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1; fi
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    apt-get install -y -q $slurm_packages >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && apt-get install -y -q $slurm_packages >/dev/null; } \
      || echo "setup.sh: could not install $slurm_packages; the Slurm tests will be skipped (fail under CI=true)" >&2
    if [ "$own_policy" = 1 ]; then rm -f "$policy"; fi
  else
    echo "setup.sh: Slurm is not installed and this is not root with apt-get; the Slurm tests will be skipped" \
      "(fail under CI=true)" >&2
  fi
fi

python -m pip install -q torch==2.13.0
python -m pip install -q -e ".[all]"
