#!/usr/bin/env python3
"""The SASS instruction mix of kernels in a cubin, on a machine without nvdisasm or
cuobjdump (this one: the CUDA toolkit here has nvcc and ptxas only).

    nvcc -O3 -DNDEBUG -DGEMLITE_WITH_CUDA=1 --generate-code=arch=compute_90a,code=sm_90a \
         -cubin -std=c++17 -I. kernels/qn/gemv_qn.cu -o /tmp/gemv_qn.cubin
    python3 scripts/sass_histogram.py /tmp/gemv_qn.cubin gemv_qn_kernelILi4ELb0ELb0ELi8E

prints, for each kernel whose mangled name contains the pattern, its instruction count and
count per opcode. Compare two builds of one file this way before spending device time on an
A/B; the GPU script's GEMLITE_GPU_SASS=1 disassembles there, with operands.

sm_90 instructions are 16 bytes; the low 12 bits of the first 8 name the opcode. The table
below was read from cuobjdump -sass of the 36 gemv_qn kernels on the H100 machine
(2026-11-28, nvcc 13.0): 100 opcodes, each 12-bit code one mnemonic. A code outside it
prints as hex.
"""
import collections
import signal
import struct
import sys

OPCODES = {
    0x202: "MOV", 0x207: "SEL", 0x20b: "FSETP", 0x20c: "ISETP", 0x210: "IADD3", 0x211: "LEA",
    0x212: "LOP3", 0x219: "SHF", 0x220: "FMUL", 0x221: "FADD", 0x223: "FFMA", 0x224: "IMAD",
    0x225: "IMAD", 0x230: "HADD2", 0x231: "HFMA2", 0x23c: "HMMA", 0x23e: "F2FP",
    0x246: "VIADDMNMX", 0x248: "VIMNMX", 0x290: "UIADD3", 0x291: "ULEA", 0x2a4: "UIMAD",
    0x2a5: "UIMAD", 0x2ca: "R2UR", 0x302: "FCHK", 0x304: "F2F", 0x308: "MUFU", 0x348: "WARPSYNC",
    0x387: "STL", 0x388: "STS", 0x389: "SHFL", 0x416: "PRMT", 0x421: "FADD", 0x423: "FFMA",
    0x424: "IMAD", 0x431: "HFMA2", 0x802: "MOV", 0x805: "CS2R", 0x807: "SEL", 0x80b: "FSETP",
    0x80c: "ISETP", 0x810: "IADD3", 0x811: "LEA", 0x812: "LOP3", 0x816: "PRMT", 0x819: "SHF",
    0x81c: "PLOP3", 0x820: "FMUL", 0x823: "FFMA", 0x824: "IMAD", 0x825: "IMAD", 0x827: "IMAD",
    0x82d: "PREEXIT", 0x82e: "ACQBULK", 0x836: "VIADD", 0x846: "VIADDMNMX", 0x882: "UMOV",
    0x88c: "UISETP", 0x890: "UIADD3", 0x892: "ULOP3", 0x899: "USHF", 0x8a5: "UIMAD", 0x908: "MUFU",
    0x918: "NOP", 0x919: "S2R", 0x91a: "DEPBAR", 0x91b: "ENDCOLLECTIVE", 0x941: "BSYNC",
    0x944: "CALL", 0x945: "BSSY", 0x947: "BRA", 0x948: "WARPSYNC", 0x94d: "EXIT", 0x950: "RET",
    0x980: "LD", 0x981: "LDG", 0x983: "LDL", 0x984: "LDS", 0x986: "STG", 0x98f: "CCTL",
    0x9af: "LDGDEPBAR", 0x9c3: "S2UR", 0xab9: "ULDC", 0xb1d: "BAR", 0xb82: "LDC", 0xc02: "MOV",
    0xc0c: "ISETP", 0xc10: "IADD3", 0xc11: "LEA", 0xc19: "SHF", 0xc24: "IMAD", 0xc25: "IMAD",
    0xc36: "VIADD", 0xc45: "I2FP", 0xc48: "VIMNMX", 0xe21: "FADD", 0xe24: "IMAD",
    0xe46: "VIADDMNMX", 0xf89: "SHFL", 0xfae: "LDGSTS",
}


def sections(data):
    """(name, bytes) of each ELF64 section."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for h in headers:
        start = names + h[0]
        yield data[start:data.index(b"\0", start)].decode(), data[h[4]:h[4] + h[5]]


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    if len(sys.argv) != 3:
        sys.exit("usage: sass_histogram.py CUBIN NAME_PATTERN")
    path, pattern = sys.argv[1], sys.argv[2]
    try:
        data = open(path, "rb").read()
    except OSError as e:
        sys.exit(f"sass_histogram.py: {path}: {e.strerror}")
    if data[:4] != b"\x7fELF":
        sys.exit(f"sass_histogram.py: {path}: not an ELF file (a cubin: nvcc -cubin)")
    found = False
    for name, text in sections(data):
        if not name.startswith(".text.") or pattern not in name:
            continue
        found = True
        counts = collections.Counter()
        for i in range(0, len(text), 16):
            code = struct.unpack_from("<Q", text, i)[0] & 0xFFF
            counts[OPCODES.get(code, hex(code))] += 1
        print(f"{name[len('.text.'):]}: {len(text) // 16} instructions")
        for op, n in counts.most_common():
            print(f"  {op:10s} {n}")
    if not found:
        sys.exit(f"sass_histogram.py: {path}: no kernel named like {pattern}")


if __name__ == "__main__":
    main()
