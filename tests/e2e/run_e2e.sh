#!/usr/bin/env bash
# One end-to-end model test: tessera's outputs on a generated model must match ONNX Runtime's checked-in outputs.
#
#     tests/e2e/run_e2e.sh MODEL BUILD_DIR [--via-artifact] [EXTRA FLAGS...]   e.g.  run_e2e.sh resnet50 build --backends native
#
# (Re)generates BUILD_DIR/e2e/MODEL.onnx with its generator (skipped when it is newer than the generator; set
# TESSERA_E2E_REGEN=1 to force), lays out a private ONNX test case BUILD_DIR/e2e/MODEL.case.XXXXXX/{model.onnx,
# test_data_set_<k>} (removed on exit) with each test_data_set_<k> linking to tests/e2e/reference/MODEL/test_data_set_<k>, and runs
#     tessera check CASE --rtol 1e-4 --atol 1e-5 [PINS...] [EXTRA...]
# The generator is tests/e2e/gen_models.py, or bench/zoo/gen_zoo.py for a zoo model (one `gen_zoo.py --pins MODEL`
# knows); a zoo model's test pins (bench/zoo/pins.txt) become PINS, --shape flags for its symbolic inputs.
# Exit status is tessera's (0 = pass); 77 (CTest "skipped") when the Python with onnx is missing.
# Environment: TESSERA_BIN (default BUILD_DIR/bin/tessera), PYTHON (default /usr/bin/python3), TESSERA_E2E_GEN (a
# generator script to use instead, with gen_models.py's command line).
set -euo pipefail

if [ "$#" -lt 2 ]; then
  echo "usage: $0 MODEL BUILD_DIR [tessera check flags...]" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
model="$1"
build="$(cd "$2" && pwd)"
shift 2
PYTHON="${PYTHON:-/usr/bin/python3}"
tessera="${TESSERA_BIN:-$build/bin/tessera}"
ref="$here/reference/$model/test_data_set_0"

if [ ! -d "$ref" ]; then
  echo "run_e2e: no reference data for '$model' in $here/reference (see make_reference.sh)" >&2
  exit 2
fi
if [ ! -x "$tessera" ]; then
  echo "run_e2e: $tessera is not built" >&2
  exit 2
fi
if ! "$PYTHON" -c "import onnx, numpy" 2>/dev/null; then
  echo "run_e2e: $PYTHON cannot import onnx and numpy (install python3-onnx); skipping" >&2
  exit 77
fi

# Which generator: the zoo's for the models it pins (and its --shape flags with them), gen_models.py for the rest.
gen="$here/gen_models.py"
zoo_gen="$(cd "$here/../.." && pwd)/bench/zoo/gen_zoo.py"
regen_tool="tests/e2e/make_reference.sh"
pins=()
if [ -n "${TESSERA_E2E_GEN:-}" ]; then
  gen="$TESSERA_E2E_GEN"
elif [ -f "$zoo_gen" ]; then
  rc=0
  pin_line="$("$PYTHON" "$zoo_gen" --pins "$model")" || rc=$?
  case $rc in
    0) gen="$zoo_gen"; regen_tool="tests/e2e/make_reference.sh --zoo"; read -r -a pins <<<"$pin_line" ;;
    3) ;;  # not a zoo model
    *) echo "run_e2e: $zoo_gen --pins $model failed (exit $rc)" >&2; exit 2 ;;
  esac
fi

out="$build/e2e"
mkdir -p "$out"
onnx_file="$out/$model.onnx"
if [ "${TESSERA_E2E_REGEN:-0}" = 1 ] || [ ! -s "$onnx_file" ] || [ "$gen" -nt "$onnx_file" ] ||
   [ "$here/gen_models.py" -nt "$onnx_file" ]; then  # gen_zoo.py builds on gen_models.py's Builder
  start=$(date +%s%N)
  "$PYTHON" "$gen" "$out" --models "$model"
  echo "run_e2e: generated $onnx_file with $(basename "$gen") in $(( ($(date +%s%N) - start) / 1000000 )) ms"
fi

# A model that differs from the one the reference was made from (gen_models.py edited without make_reference.sh)
# makes the comparison meaningless; say so up front.
if [ -f "$here/reference/$model/model.sha256" ] && command -v sha256sum >/dev/null; then
  if [ "$(sha256sum "$onnx_file" | cut -d' ' -f1)" != "$(cat "$here/reference/$model/model.sha256")" ]; then
    echo "run_e2e: warning: $onnx_file differs from the model the reference outputs were made from" \
         "(rerun $regen_tool after changing $(basename "$gen"))" >&2
  fi
fi

# Each run lays out its own case directory: the tests of one model run in parallel, and a shared directory being
# relinked by one while another reads it is a race.
case_dir="$(mktemp -d "$out/$model.case.XXXXXX")"
trap 'rm -rf "$case_dir"' EXIT
ln -s "../$model.onnx" "$case_dir/model.onnx"
for set_dir in "$here/reference/$model"/test_data_set_*; do
  ln -s "$set_dir" "$case_dir/$(basename "$set_dir")"
done

# --via-artifact: compile the model (with the remaining flags) to a .tsr first, then check the artifact.
if [ "${1:-}" = "--via-artifact" ]; then
  shift
  tsr="$out/$model.$(echo "$*" | tr -c 'a-zA-Z0-9\n' '_').tsr"
  echo "run_e2e: $tessera compile $onnx_file -o $tsr ${pins[*]} $*"
  "$tessera" compile "$onnx_file" -o "$tsr" ${pins[@]+"${pins[@]}"} "$@" || exit $?
  echo "run_e2e: $tessera check $case_dir --model $tsr --rtol 1e-4 --atol 1e-5"
  rc=0
  "$tessera" check "$case_dir" --model "$tsr" --rtol 1e-4 --atol 1e-5 || rc=$?
  exit $rc
fi
echo "run_e2e: $tessera check $case_dir --rtol 1e-4 --atol 1e-5 ${pins[*]} $*"
rc=0
"$tessera" check "$case_dir" --rtol 1e-4 --atol 1e-5 ${pins[@]+"${pins[@]}"} "$@" || rc=$?
exit $rc
