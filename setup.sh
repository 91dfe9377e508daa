#!/usr/bin/env bash
# One-time set-up on a fresh machine (Python 3.11+), idempotent:
# 1. torch 2.13.0, unless installed: where no NVIDIA GPU is found, the CPU build from PyTorch's CPU
#    index (PyPI's Linux wheel is the CUDA build, which pulls several GB of CUDA packages), and
#    where that index is out of reach, torch from the usual index (PyPI: the CUDA build);
# 2. this project with its extras (`pip install -e ".[all]"`);
# 3. as root with apt-get: Slurm (the tests' local cluster), Chromium (the docs' browser check) and
#    tcmalloc (the node's allocator: launch/process/allocator.py), when missing.
set -euo pipefail
cd "$(dirname "$0")"

# Slurm for the tests' local cluster (tests/slurm/local-cluster.sh) and Chromium with its driver
# for the docs' browser check (tests/site_browser.py): installed once, when missing, if this is
# root with apt-get (Debian/Ubuntu). Elsewhere those tests skip and say why (under CI=true they
# fail: tests/helpers.py missing_dependency).
apt_packages="slurm-wlm munge slurmdbd mariadb-server"
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  apt_packages="$apt_packages chromium chromium-driver"
fi
no_tcmalloc=0
if ! { ldconfig -p 2>/dev/null || true; } | grep -q libtcmalloc_minimal.so.4; then
  apt_packages="$apt_packages libtcmalloc-minimal4"
  no_tcmalloc=1
fi
if [ "$no_tcmalloc" = 1 ] || ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null || ! command -v munged >/dev/null \
    || ! command -v mariadbd >/dev/null || ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup.sh: installing $apt_packages (the tests' local Slurm cluster, the docs' browser check, the node's allocator)" >&2
    # the packages must not start system daemons: the tests start their own, on their own ports
    policy=/usr/sbin/policy-rc.d
    own_policy=0
    if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1; fi
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    apt-get install -y -q $apt_packages >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && apt-get install -y -q $apt_packages >/dev/null; } \
      || echo "setup.sh: could not install $apt_packages; the Slurm and browser tests will be skipped (fail under CI=true)" >&2
    if [ "$own_policy" = 1 ]; then rm -f "$policy"; fi
  else
    echo "setup.sh: Slurm or Chromium is not installed and this is not root with apt-get; their tests will be skipped" \
      "(fail under CI=true)" >&2
  fi
fi

torch_pin="torch==2.13.0"  # the Dockerfile's TORCH_VERSION is the same (tests/test_dockerfile.py)
if ! TORCH_PIN=$torch_pin python -c 'import os, sys, torch
sys.exit(torch.__version__.split("+")[0] != os.environ["TORCH_PIN"].split("==")[1])' 2>/dev/null; then
  if ! command -v nvidia-smi >/dev/null \
      && python -m pip install -q --timeout 10 --retries 1 "$torch_pin" --index-url https://download.pytorch.org/whl/cpu; then
    echo "setup.sh: installed $torch_pin, the CPU build (no NVIDIA GPU found)" >&2
  else
    python -m pip install -q "$torch_pin"
  fi
fi
python -m pip install -q -e ".[all]"
