# Sourced by the bench scripts (compare_ort.sh, ops/run_ops.sh): `ort_setup BENCH_DIR` makes onnxruntime-node loadable
# from BENCH_DIR/node_modules, installing it with npm on first use (--ignore-scripts: the npm package carries its
# prebuilt binaries), and sets NODE_PATH and ort_version. The caller defines `log` and `die`.
ort_setup() {
  local bench_dir=$1
  if [[ ! -f $bench_dir/node_modules/onnxruntime-node/package.json ]]; then
    log "installing onnxruntime-node into $bench_dir/node_modules ..."
    command -v npm >/dev/null || die "npm is not installed"
    npm install --prefix "$bench_dir" --ignore-scripts --no-save --no-audit --no-fund onnxruntime-node >&2 ||
      die "npm install onnxruntime-node failed"
  fi
  export NODE_PATH=$bench_dir/node_modules${NODE_PATH:+:$NODE_PATH}
  ort_version=$(node -e "process.stdout.write(require('onnxruntime-node/package.json').version)" 2>/dev/null) ||
    die "onnxruntime-node cannot be loaded from $bench_dir/node_modules"
}
