#!/usr/bin/env bash
# The conformance runner sends several cases to one `tessera check` process. A process that dies must not take the
# blame away from its case or lose the others: through a tessera that crashes (SIGSEGV) whenever it is given one
# particular case, the runner must report that case alone as crashed and every other case of the filter as passed.
#
#     tests/conformance/runner_crash_test.sh TESSERA_BIN
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tessera="$1"
root=/usr/share/libonnx-testdata/data
[ -d "$root/node/test_add_bcast" ] || { echo "runner_crash_test: $root not found (libonnx-testdata)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/tessera" <<WRAP
#!/usr/bin/env bash
for a in "\$@"; do case "\$a" in */test_add_bcast) kill -SEGV \$\$;; esac; done
exec "$tessera" "\$@"
WRAP
chmod +x "$work/tessera"
: >"$work/none.txt"
/usr/bin/python3 "$here/run_conformance.py" --tessera "$work/tessera" --suites node --filter test_add \
  --expectations "$work/none.txt" --chunk 16 >"$work/out.txt" 2>&1
rc=$?
cases=$(ls -d "$root"/node/test_add* | wc -l)
if [ "$rc" -eq 1 ] && grep -q "^UNEXPECTED FAIL node/test_add_bcast: crashed with signal 11" "$work/out.txt" \
   && [ "$(grep -c '^UNEXPECTED FAIL' "$work/out.txt")" -eq 1 ] \
   && grep -q "^$((cases - 1)) passed, 1 failed" "$work/out.txt"; then
  echo "runner_crash_test: the crashed case alone failed, the other $((cases - 1)) passed"
  exit 0
fi
cat "$work/out.txt"
echo "runner_crash_test: expected exit 1, one crashed case and $((cases - 1)) passes (exit $rc)" >&2
exit 1
