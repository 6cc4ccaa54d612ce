#!/usr/bin/env bash
# SDSAT on CPU in minutes (docs/sdsat.md): trains a tiny Llama from scratch on a
# predictable language, fine-tunes it with adaptive tokens (finetune.py) and
# checks acceptance, unchanged plain behaviour and exactness (demo.py).
#   tools/sdsat/demo.sh [WORK_DIR] [--quick]      # default WORK_DIR: /tmp/sdsat-demo
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-/tmp/sdsat-demo}
shift || true
py=/usr/bin/python3; [[ -x $py ]] || py=python3
exec "$py" "$here/demo.py" --work "$work" "$@"
