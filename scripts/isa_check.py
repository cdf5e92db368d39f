#!/usr/bin/env python3
"""Fails when a binary holds an AVX-512 instruction outside the dispatched kernels.

The default build targets x86-64-v3 (AVX2) and keeps its AVX-512 code in the
regions of src/util/cpu_isa.h, whose functions all live in namespaces named
avx512*; they run only after cpu::avx512() says yes. An AVX-512 instruction in
any other function would fault on an AVX2-only CPU.

usage: isa_check.py FILE...   (executables and shared libraries)

An instruction counts as AVX-512 when it is EVEX-encoded (its opcode starts
with 0x62, after any address-size or segment prefix: 0x62 is not an
instruction of its own in 64-bit mode) or names a zmm register, an opmask
register k0-k7, or xmm/ymm16-31.
"""
import re
import subprocess
import sys

FUNC = re.compile(r"^[0-9a-f]+ <(.*)>:$")
INSN = re.compile(r"^\s*[0-9a-f]+:\t([0-9a-f ]+)\t(.*)$")
REGS = re.compile(r"%(zmm\d+|k[0-7]\b|[xy]mm(1[6-9]|2\d|3[01])\b)")
PREFIXES = {"67", "26", "2e", "36", "3e", "64", "65"}


def is_avx512(raw, text):
    op = [b for b in raw.split() if b not in PREFIXES]
    return (op and op[0] == "62") or REGS.search(text) is not None


def check(path):
    proc = subprocess.Popen(["objdump", "-d", "-C", "-w", path], stdout=subprocess.PIPE, text=True,
                            errors="replace")
    bad = {}
    func = "?"
    allowed_hits = 0
    for line in proc.stdout:
        m = FUNC.match(line)
        if m:
            func = m.group(1)
            continue
        m = INSN.match(line)
        if not m or not is_avx512(m.group(1), m.group(2)):
            continue
        if "avx512" in func:
            allowed_hits += 1
        elif func not in bad:
            bad[func] = m.group(2).strip()
    if proc.wait() != 0:
        sys.exit(f"isa_check: objdump failed on {path}")
    return bad, allowed_hits


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    failed = False
    for path in sys.argv[1:]:
        bad, allowed = check(path)
        for func, insn in sorted(bad.items()):
            print(f"{path}: AVX-512 outside a dispatched kernel: {func}: {insn}")
        failed = failed or bool(bad)
        print(f"{path}: {allowed} AVX-512 instructions, all in avx512 kernels" if not bad else
              f"{path}: {len(bad)} functions with AVX-512 outside the avx512 kernels")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
