#!/bin/sh
# Fails when libtessera has an AVX-512 instruction (a zmm or mask register, or one of the
# registers 16-31 that only EVEX encodes) in a function outside namespace
# tessera::cpu::avx512: the kernels there run only where cpu_capability() allows them
# (src/tensor/cpu/isa.h), code anywhere else runs on every CPU of the build's baseline.
#   check_isa.sh OBJDUMP LIBRARY
set -eu
objdump=$1
library=$2
found=$("$objdump" -d --no-show-raw-insn -C "$library" | awk '
  /^[0-9a-f]+ <.*>:$/ { name = $0; allowed = index(name, "tessera::cpu::avx512::") > 0; next }
  !allowed && /%zmm|%k[0-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])/ { print name }' | sort -u)
if [ -n "$found" ]; then
  echo "AVX-512 instructions outside tessera::cpu::avx512 in $library (see src/tensor/cpu/isa.h):"
  echo "$found"
  exit 1
fi
echo "no AVX-512 instruction outside tessera::cpu::avx512 in $library"
