#!/usr/bin/env bash
# Installs Tessera's build and test dependencies from Debian 12 packages (clang, its sanitizer runtimes and
# llvm-symbolizer for the fuzz and sanitizer builds).
# Does nothing when they are already present.
set -euo pipefail
PKGS=(cmake ninja-build g++ pkg-config libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
      python3-onnx python3-numpy python3-pytest python3-pybind11 libcli11-dev libgtest-dev libgmock-dev nlohmann-json3-dev graphviz
      libdnnl-dev libxnnpack-dev libpthreadpool-dev libcpuinfo-dev
      clang libclang-rt-14-dev llvm-14)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" > /dev/null
fi
