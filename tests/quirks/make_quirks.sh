#!/usr/bin/env bash
# Regenerates the checked-in quirk corpus, tests/quirks/cases/<case>/{model.onnx,test_data_set_0/*.pb}: the models and
# inputs from gen_quirks.py, the expected outputs from ONNX Runtime (tests/e2e/ort_reference.js, graph optimizations
# disabled; at its default level 'all' for the ort_all_* cases). Run by hand after changing gen_quirks.py (the test suite never runs it):
#     NODE_PATH=bench/node_modules tests/quirks/make_quirks.sh [CASE ...]
# Needs Debian's /usr/bin/python3 (onnx + numpy) and node with onnxruntime-node (bench/ installs one).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
cases="$here/cases"
if [ "$#" -eq 0 ]; then
  rm -rf "$cases"
fi
mkdir -p "$cases"
"$PYTHON" "$here/gen_quirks.py" "$cases" "$@"
for d in "$cases"/*/; do
  name="$(basename "$d")"
  if [ "$#" -gt 0 ] && [[ ! " $* " == *" $name "* ]]; then continue; fi
  opt=disabled
  [[ $name == ort_all_* ]] && opt=all
  node "$here/../e2e/ort_reference.js" "$d/model.onnx" "$d/test_data_set_0" --opt "$opt" >/dev/null ||
    { echo "make_quirks: ONNX Runtime failed on $name" >&2; exit 1; }
done
echo "make_quirks: $(ls "$cases" | wc -l) cases in $cases"
