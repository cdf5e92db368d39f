#!/usr/bin/env bash
# Seeing inside engines through the command line (docs/profiling.md): `bench --profile` maps the time of oneDNN
# regions back to the model's nodes (one item per primitive, naming the nodes it computed, placed exactly as
# `partition` placed them), as text and under "profile" in `bench --json`; a backend without run_profiled (XNNPACK)
# is one item per region, said so; `run --trace` and `bench --trace` write Chrome traces that parse, whose events all
# carry the required fields, with engine steps nested in their region's slice. Nothing here asserts a time.
#
#     tests/e2e/profile_cli_test.sh BUILD_DIR
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
tessera="${TESSERA_BIN:-$build/bin/tessera}"
if ! "$PYTHON" -c "import onnx, numpy" 2>/dev/null; then
  echo "profile_cli_test: $PYTHON cannot import onnx and numpy; skipping" >&2
  exit 77
fi
if [ ! -f "$build/lib/tessera/libtessera_backend_dnnl.so" ]; then
  echo "profile_cli_test: the oneDNN plugin is not built; skipping" >&2
  exit 77
fi
have_xnnpack=0
[ -f "$build/lib/tessera/libtessera_backend_xnnpack.so" ] && have_xnnpack=1
work="$build/e2e/profile_cli"
rm -rf "$work"
mkdir -p "$work"
"$PYTHON" "$here/gen_models.py" "$work" --models squeezenet,bert_tiny >/dev/null || exit 1

failures=0
passes=0
pass() { passes=$((passes + 1)); }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
# check NAME PYTHON-FILE ARGS...: the script prints "ok" or what is wrong.
check() {
  local name=$1
  shift
  local out
  out=$("$PYTHON" "$@" 2>&1)
  [ "$out" = ok ] && pass || fail "$name: $out"
}

# A profile from `bench --profile --json` against the placement from `partition --json` (same flags):
# argv: bench.json partition.json (steps | regions) (onnx | artifact)
cat >"$work/check_profile.py" <<'EOF'
import json, sys
bench, part, expect, source = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
p = bench.get("profile")
if p is None: sys.exit("no 'profile' in bench --json")
need = {"kind": str, "name": str, "nodes": list, "op_type": str, "backend": str, "what": str, "engine": int,
        "region": str, "ms": (int, float)}
for it in p["items"]:
    for k, t in need.items():
        if not isinstance(it.get(k), t): sys.exit("item %r: field %r missing or not %s" % (it.get("name"), k, t))
    if it["kind"] not in ("node", "step", "region", "overhead"): sys.exit("item kind %r" % it["kind"])
    if it["ms"] < 0: sys.exit("negative time in %r" % it["name"])
for o in p["op_types"]:
    if not {"op_type", "backend", "ms", "nodes", "items"} <= set(o): sys.exit("op_types entry %r" % o)
if not isinstance(p["runs"], int) or p["runs"] < 1 or not isinstance(p["total_ms"], (int, float)):
    sys.exit("runs / total_ms")
engines = {r["engine"]: r for r in part["regions"] if r["engine"] >= 0}
if not engines: sys.exit("the placement has no engine region")
steps = {}
for it in p["items"]:
    if it["kind"] == "step": steps.setdefault(it["engine"], []).append(it)
regions = {r["engine"]: r for r in p["regions"]}
if set(regions) != set(engines): sys.exit("profile regions %s, placement engines %s" % (sorted(regions), sorted(engines)))
for e, r in engines.items():
    pr = regions[e]
    if pr["backend"] != r["backend"]: sys.exit("engine %d: backend %s, placed on %s" % (e, pr["backend"], r["backend"]))
    if expect == "steps":
        if not pr["profiled"] or not steps.get(e): sys.exit("engine %d (%s): no steps" % (e, r["backend"]))
        named = set(n for s in steps[e] for n in s["nodes"])
        if named != set(r["nodes"]):
            sys.exit("engine %d: steps name %s; placed there: %s" % (e, sorted(named ^ set(r["nodes"]))[:5], len(r["nodes"])))
        if pr["nodes"] != len(r["nodes"]): sys.exit("engine %d: %r nodes, placed %d" % (e, pr["nodes"], len(r["nodes"])))
    else:
        if pr["profiled"] or steps.get(e): sys.exit("engine %d (%s) has steps" % (e, r["backend"]))
        mine = [it for it in p["items"] if it["kind"] == "region" and it["engine"] == e]
        if len(mine) != 1 or "nodes)" not in mine[0]["name"]: sys.exit("engine %d: region items %r" % (e, mine))
if expect == "steps":
    all_steps = [s for ss in steps.values() for s in ss]
    if not any(len(s["nodes"]) >= 2 and s["what"].startswith("convolution ") for s in all_steps) and \
       any(s["what"].startswith("convolution ") for s in all_steps):
        sys.exit("no convolution step names two nodes or more (its fused activation)")
    named = [s for s in all_steps if s["nodes"]]
    if source == "onnx" and any(":" in s["op_type"] for s in named):
        sys.exit("op types of a compiled model's nodes unknown: %r" % [s["op_type"] for s in named][:5])
    if source == "artifact" and any(not s["op_type"].startswith("dnnl:") for s in named):
        sys.exit("an artifact's step op types are not the engine's kinds: %r" % [s["op_type"] for s in named][:5])
print("ok")
EOF

# A Chrome trace: argv: trace.json runs-expected steps|nosteps
cat >"$work/check_trace.py" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
runs, expect = int(sys.argv[2]), sys.argv[3]
ev = t.get("traceEvents")
if not isinstance(ev, list) or not ev: sys.exit("no traceEvents array")
for e in ev:
    for k, typ in (("name", str), ("ph", str), ("ts", (int, float)), ("pid", int), ("tid", int), ("args", dict)):
        if not isinstance(e.get(k), typ): sys.exit("event %r: field %r missing or not %s" % (e.get("name"), k, typ))
    if e["ph"] == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0 and e["ts"] >= 0):
        sys.exit("complete event %r without a non-negative dur/ts" % e["name"])
    if e["ph"] not in ("X", "M"): sys.exit("event phase %r" % e["ph"])
x = [e for e in ev if e["ph"] == "X"]
run_slices = [e for e in x if e.get("cat") == "run"]
if len(run_slices) != runs: sys.exit("%d run slices, expected %d" % (len(run_slices), runs))
regions = [e for e in x if e.get("cat") == "region"]
steps = [e for e in x if e.get("cat") == "step"]
if not regions: sys.exit("no region slice")
for r in regions:
    if not {"op_type", "backend", "engine", "region"} <= set(r["args"]): sys.exit("region args %r" % r["args"])
eps = 0.002
def inside(a, b): return a["ts"] >= b["ts"] - eps and a["ts"] + a["dur"] <= b["ts"] + b["dur"] + eps
for s in steps:
    if not {"nodes", "op_type", "backend", "what", "engine"} <= set(s["args"]): sys.exit("step args %r" % s["args"])
    if not any(inside(s, r) and r["args"]["engine"] == s["args"]["engine"] for r in regions):
        sys.exit("step %r is not inside a slice of its region" % s["name"])
for n in [e for e in x if e.get("cat") in ("node", "region")]:
    if not any(inside(n, r) for r in run_slices): sys.exit("node %r outside every run" % n["name"])
if expect == "steps" and not steps: sys.exit("no step slices")
if expect == "nosteps" and steps: sys.exit("step slices from a backend without a profile")
if expect == "nosteps" and not all(r["args"].get("profile") == "none from this backend" for r in regions):
    sys.exit("a region slice does not say it has no profile")
print("ok")
EOF

dnnl_flags=(--backends dnnl,native --placement priority)
for m in squeezenet bert_tiny; do
  # 1. oneDNN: every region's steps name exactly the nodes placed in it.
  "$tessera" partition "$work/$m.onnx" "${dnnl_flags[@]}" --json >"$work/$m.part.json" 2>"$work/err.txt" \
    || fail "$m: partition: $(tail -1 "$work/err.txt")"
  if "$tessera" bench "$work/$m.onnx" "${dnnl_flags[@]}" --runs 3 --warmup 1 --profile --json \
       >"$work/$m.bench.json" 2>"$work/err.txt"; then
    pass
    check "$m dnnl profile json" "$work/check_profile.py" "$work/$m.bench.json" "$work/$m.part.json" steps onnx
  else
    fail "$m: bench --profile --json: $(tail -1 "$work/err.txt")"
  fi
  # 2. The text profile: per op type and slowest nodes, each saying which backend ran it.
  "$tessera" bench "$work/$m.onnx" "${dnnl_flags[@]}" --runs 2 --warmup 1 --profile >"$work/$m.txt" 2>&1
  grep -q "^time per op type" "$work/$m.txt" && grep -q "^slowest nodes:" "$work/$m.txt" \
    && grep -q "(dnnl: " "$work/$m.txt" && grep -q "^engine regions:" "$work/$m.txt" \
    && grep -q "steps, .* ms (.* ms outside its steps)" "$work/$m.txt" && pass \
    || fail "$m: bench --profile text: $(head -20 "$work/$m.txt")"
  # 3. run --trace: one run, steps nested in their regions.
  if "$tessera" run "$work/$m.onnx" "${dnnl_flags[@]}" --trace "$work/$m.trace.json" >"$work/out.txt" 2>&1; then
    pass
    check "$m run --trace" "$work/check_trace.py" "$work/$m.trace.json" 1 steps
  else
    fail "$m: run --trace: $(tail -1 "$work/out.txt")"
  fi
done

# 4. bench --trace: the profiled runs after the timed ones, at most 20.
"$tessera" bench "$work/squeezenet.onnx" "${dnnl_flags[@]}" --runs 3 --warmup 0 --trace "$work/b3.json" >/dev/null 2>&1 \
  && check "bench --trace 3 runs" "$work/check_trace.py" "$work/b3.json" 3 steps || fail "bench --trace --runs 3"
"$tessera" bench "$work/bert_tiny.onnx" "${dnnl_flags[@]}" --runs 25 --warmup 0 --trace "$work/b25.json" >/dev/null 2>&1 \
  && check "bench --trace 25 runs (20 traced)" "$work/check_trace.py" "$work/b25.json" 20 steps || fail "bench --trace --runs 25"

# 5. An artifact: the nodes inside regions are still named (op types fall back to the engine's step kinds).
if "$tessera" compile "$work/squeezenet.onnx" -o "$work/sq.tsr" "${dnnl_flags[@]}" >/dev/null 2>"$work/err.txt"; then
  "$tessera" bench "$work/sq.tsr" --runs 2 --warmup 0 --profile --json >"$work/sq.tsr.json" 2>"$work/err.txt" \
    && check "artifact profile" "$work/check_profile.py" "$work/sq.tsr.json" "$work/squeezenet.part.json" steps artifact \
    || fail "bench --profile of an artifact: $(tail -1 "$work/err.txt")"
else
  fail "compile squeezenet: $(tail -1 "$work/err.txt")"
fi

# 6. XNNPACK gives no per-node profile: one item per region, said so, and no steps in the trace.
if [ "$have_xnnpack" = 1 ]; then
  x_flags=(--backends xnnpack,native --placement priority)
  "$tessera" partition "$work/squeezenet.onnx" "${x_flags[@]}" --json >"$work/x.part.json" 2>/dev/null
  "$tessera" bench "$work/squeezenet.onnx" "${x_flags[@]}" --runs 2 --warmup 1 --profile --json >"$work/x.json" 2>&1 \
    && check "xnnpack profile json" "$work/check_profile.py" "$work/x.json" "$work/x.part.json" regions onnx \
    || fail "xnnpack bench --profile --json: $(tail -1 "$work/x.json")"
  "$tessera" bench "$work/squeezenet.onnx" "${x_flags[@]}" --runs 2 --warmup 1 --profile >"$work/x.txt" 2>&1
  grep -Eq "^  region [0-9]+ \(xnnpack, [0-9]+ nodes?\): no per-node profile from this backend" "$work/x.txt" && pass \
    || fail "xnnpack text profile does not say it has no per-node profile: $(tail -5 "$work/x.txt")"
  "$tessera" run "$work/squeezenet.onnx" "${x_flags[@]}" --trace "$work/x.trace.json" >/dev/null 2>&1 \
    && check "xnnpack run --trace" "$work/check_trace.py" "$work/x.trace.json" 1 nosteps || fail "xnnpack run --trace"
fi

# 7. Bad uses exit 2 with one line.
"$tessera" run "$work/squeezenet.onnx" --trace "$work/no/such/dir/t.json" >/dev/null 2>"$work/err.txt"
rc=$?
[ "$rc" = 2 ] && [ "$(wc -l <"$work/err.txt")" = 1 ] && grep -q "trace" "$work/err.txt" && pass \
  || fail "--trace into a missing directory: exit $rc, $(cat "$work/err.txt")"
"$tessera" check "$work" --trace "$work/t.json" >/dev/null 2>"$work/err.txt"
rc=$?
[ "$rc" = 2 ] && grep -q "unknown option '--trace'" "$work/err.txt" && pass || fail "check --trace: exit $rc"

echo "profile_cli_test: $passes passed, $failures failed"
[ "$failures" = 0 ]
