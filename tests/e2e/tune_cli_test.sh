#!/usr/bin/env bash
# Cost-based placement and measuring through the command line: a tuned compile writes its measurements to the cache, a
# later compile without --tune reuses them (the report says how many), the report lists for every region the backends
# considered with their costs and why the winner won, placement is deterministic for a given cache, a damaged cache
# is ignored with a warning, and wrong option combinations exit 2 with one line. Then measuring by default: a compile
# with no flag measures and calibrates into the cache (unless TESSERA_TUNE=0 or --no-tune), and the next one reuses it.
#
#     tests/e2e/tune_cli_test.sh BUILD_DIR
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
tessera="${TESSERA_BIN:-$build/bin/tessera}"
# Other tests run beside this one: the cache is written even so, except where section 7 checks that it is not.
export TESSERA_TUNE_CACHE_BUSY=1
if ! "$PYTHON" -c "import onnx, numpy" 2>/dev/null; then
  echo "tune_cli_test: $PYTHON cannot import onnx and numpy; skipping" >&2
  exit 77
fi
work="$build/e2e/tune_cli"
rm -rf "$work"
mkdir -p "$work"
"$PYTHON" "$here/gen_models.py" "$work" --models mlp,bert_tiny >/dev/null || exit 1

failures=0
passes=0
pass() { passes=$((passes + 1)); }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
json() {  # FILE PYTHON-EXPR over j
  "$PYTHON" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}

for m in mlp bert_tiny; do
  cache="$work/$m.tune.json"
  # 1. A tuned compile measures regions and writes the cache.
  if "$tessera" compile "$work/$m.onnx" -o "$work/$m.tsr" --tune --tune-cache "$cache" >"$work/out.txt" 2>&1; then
    pass
  else
    fail "$m: compile --tune: $(tail -2 "$work/out.txt")"
    continue
  fi
  grep -q "measured [1-9][0-9]* candidates" "$work/out.txt" && pass || fail "$m: compile --tune does not say it measured: $(cat "$work/out.txt")"
  n=$(json "$cache" 'len(j["entries"])' 2>/dev/null || echo 0)
  [ "$n" -gt 0 ] && pass || fail "$m: the tune cache has no entries"
  # 2. Without --tune, the measurements are reused: nothing measured, hits reported.
  "$tessera" partition "$work/$m.onnx" --tune-cache "$cache" --json >"$work/a.json" 2>"$work/err.txt" || fail "$m: partition: $(cat "$work/err.txt")"
  [ "$(json "$work/a.json" 'j["measured"] == 0 and j["cache_hits"] > 0')" = True ] && pass \
    || fail "$m: partition did not reuse the cache: $(json "$work/a.json" 'j["measured"], j["cache_hits"]')"
  # 3. Every region says what was considered and why the winner won; the winner is among the considered.
  [ "$(json "$work/a.json" 'all(r["considered"] and r["decision"] and r["backend"] in [c["backend"] for c in r["considered"]] for r in j["regions"])')" = True ] \
    && pass || fail "$m: a region lacks its considered backends or decision"
  [ "$(json "$work/a.json" 'j["placement"] == "cost" and len(j["backend_sets"]) >= 1 and sum(s["chosen"] for s in j["backend_sets"]) == 1')" = True ] \
    && pass || fail "$m: backend sets not reported"
  "$tessera" partition "$work/$m.onnx" --tune-cache "$cache" >"$work/a.txt" 2>&1
  grep -q "from the tune cache" "$work/a.txt" && grep -q "considered .* -> " "$work/a.txt" && pass \
    || fail "$m: text report lacks the cost lines: $(head -4 "$work/a.txt")"
  # 4. Deterministic for a given cache.
  "$tessera" partition "$work/$m.onnx" --tune-cache "$cache" --json >"$work/b.json" 2>/dev/null
  cmp -s "$work/a.json" "$work/b.json" && pass || fail "$m: two partitions with one cache differ"
  # 5. The tuned artifact runs.
  "$tessera" run "$work/$m.tsr" >"$work/out.txt" 2>&1 && pass || fail "$m: running the tuned artifact: $(tail -2 "$work/out.txt")"
done

# 6. A damaged cache: a warning, an estimate-based compile, and --tune rewrites it.
echo "garbage{" >"$work/bad.json"
if "$tessera" compile "$work/mlp.onnx" -o "$work/bad.tsr" --tune-cache "$work/bad.json" >/dev/null 2>"$work/err.txt"; then
  grep -q "warning: tune cache .* not a tessera tune cache" "$work/err.txt" && pass || fail "damaged cache: no warning: $(cat "$work/err.txt")"
else
  fail "damaged cache: compile failed: $(cat "$work/err.txt")"
fi
"$tessera" compile "$work/mlp.onnx" -o "$work/bad.tsr" --tune --tune-cache "$work/bad.json" >/dev/null 2>&1 \
  && [ "$(json "$work/bad.json" 'j["format"]')" = tessera-tune ] && pass || fail "damaged cache: --tune did not rewrite it"

# A cache with wrongly typed fields, or a directory in its place: a warning, not an error.
printf '{"format": "tessera-tune", "version": 1, "entries": {"k": {"us": 3, "runs": "x"}}}' >"$work/typed.json"
mkdir -p "$work/a_dir"
for c in "$work/typed.json" "$work/a_dir"; do
  if "$tessera" compile "$work/mlp.onnx" -o "$work/bad.tsr" --tune-cache "$c" >/dev/null 2>"$work/err.txt"; then
    grep -q "warning: tune cache .* not a tessera tune cache" "$work/err.txt" && pass || fail "cache $c: no warning: $(cat "$work/err.txt")"
  else
    fail "cache $c: compile failed: $(cat "$work/err.txt")"
  fi
done

# 7. Measuring by default (CTest sets TESSERA_TUNE=0 for every other test; here it is unset), and without
# TESSERA_TUNE_CACHE_BUSY: on a busy machine the measurements serve the compile only.
default_cache="$work/default.json"
rm -f "$default_cache"
if env -u TESSERA_TUNE -u TESSERA_TUNE_CACHE_BUSY "$tessera" compile "$work/mlp.onnx" -o "$work/d.tsr" --tune-cache "$default_cache" >"$work/out.txt" 2>"$work/err.txt"; then
  pass
else
  fail "default measuring: compile failed: $(cat "$work/err.txt")"
fi
if grep -q "served this compile only" "$work/err.txt"; then
  # A busy machine (other tests running): the measurements were used, not cached.
  grep -q "measured [1-9][0-9]* candidates" "$work/out.txt" && pass || fail "default measuring (busy): $(cat "$work/out.txt")"
else
  grep -q "measured [1-9][0-9]* candidates" "$work/out.txt" && pass || fail "default measuring: nothing measured: $(cat "$work/out.txt")"
  [ "$(json "$default_cache" 'len(j["entries"]) > 0 and len(j["machines"]) == 1 and j["version"] == 2')" = True ] && pass \
    || fail "default measuring: the cache lacks entries or the machine's calibration"
  # Warm: the same compile measures nothing more.
  env -u TESSERA_TUNE "$tessera" partition "$work/mlp.onnx" --tune-cache "$default_cache" --json >"$work/warm.json" 2>/dev/null
  [ "$(json "$work/warm.json" 'j["measured"] == 0 and j["cache_hits"] > 0 and "nominal" not in j["machine"]')" = True ] && pass \
    || fail "warm compile measured again: $(json "$work/warm.json" 'j["measured"], j["cache_hits"], j["machine"]')"
fi
# The report shows what was measured, with the estimate made before.
"$tessera" partition "$work/mlp.onnx" --tune-cache "$work/mlp.tune.json" --json >"$work/m.json" 2>/dev/null
[ "$(json "$work/m.json" 'len(j["measurements"]) > 0 and all(m["estimated_us"] > 0 and m["measured_us"] > 0 for m in j["measurements"])')" = True ] \
  && pass || fail "the report lacks the measurements"
# Switched off: nothing measured, nothing written.
for off in "--no-tune" "TESSERA_TUNE=0"; do
  rm -f "$work/off.json"
  if [ "$off" = --no-tune ]; then
    env -u TESSERA_TUNE "$tessera" compile "$work/mlp.onnx" -o "$work/o.tsr" --no-tune --tune-cache "$work/off.json" >"$work/out.txt" 2>&1
  else
    TESSERA_TUNE=0 "$tessera" compile "$work/mlp.onnx" -o "$work/o.tsr" --tune-cache "$work/off.json" >"$work/out.txt" 2>&1
  fi
  if grep -q "measured [1-9]" "$work/out.txt" || [ -e "$work/off.json" ]; then
    fail "$off still measured: $(cat "$work/out.txt")"
  else
    pass
  fi
done

# 8. Wrong combinations: exit 2, one line.
expect_usage() {  # NAME EXPECTED-SUBSTRING -- command...
  local name="$1" want="$2"
  shift 3
  "$@" >/dev/null 2>"$work/err.txt"
  local rc=$?
  if [ "$rc" -eq 2 ] && [ "$(wc -l <"$work/err.txt")" -eq 1 ] && grep -q -- "$want" "$work/err.txt"; then
    pass
  else
    fail "$name: rc $rc, stderr: $(cat "$work/err.txt")"
  fi
}
expect_usage "bad --placement" "expects cost or priority" -- "$tessera" compile "$work/mlp.onnx" -o "$work/x.tsr" --placement fastest
expect_usage "--tune with priority" "--tune needs --placement cost" -- "$tessera" compile "$work/mlp.onnx" -o "$work/x.tsr" --tune --placement priority --tune-cache "$work/x.json"
expect_usage "--tune on run" "unknown option '--tune'" -- "$tessera" run "$work/mlp.onnx" --tune
expect_usage "--tune without a cache" "--tune needs a cache file" -- "$tessera" compile "$work/mlp.onnx" -o "$work/x.tsr" --tune --tune-cache=
expect_usage "--tune into a directory" "is not a file" -- "$tessera" compile "$work/mlp.onnx" -o "$work/x.tsr" --tune --tune-cache "$work/a_dir"
expect_usage "--tune with --no-tune" "contradict" -- "$tessera" compile "$work/mlp.onnx" -o "$work/x.tsr" --tune --no-tune
expect_usage "negative budget" "--tune-budget expects a non-negative number" -- "$tessera" compile "$work/mlp.onnx" -o "$work/x.tsr" --tune-budget -1

echo "tune_cli_test: $passes passed, $failures failed"
[ "$failures" -eq 0 ]
