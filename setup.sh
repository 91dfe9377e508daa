#!/usr/bin/env bash
# One-time set-up on a fresh machine (Python 3.10+): the CPU build of torch first (a plain or
# newer torch pulls several GB of CUDA packages), then this project with its extras.
set -euo pipefail
cd "$(dirname "$0")"
python -m pip install -q torch==2.13.0
python -m pip install -q -e ".[all]"
