#!/bin/sh
# Reads libtessera's disassembly for the two promises the build's instruction sets make:
# - no AVX-512 instruction (a zmm or mask register, or one of the registers 16-31 that only
#   EVEX encodes) in a function outside namespace tessera::cpu::avx512: the kernels there
#   run only where cpu_capability() allows them (src/tensor/cpu/isa.h), code anywhere else
#   runs on every CPU of the build's baseline;
# - the load-time check (src/tensor/baseline_check.h) is plain x86-64: no VEX or EVEX
#   instruction (a mnemonic starting with v, a ymm, zmm or mask register), and calls
#   nothing but itself, cpuid's initialiser and libc's write and strlen, so that it runs
#   on the CPUs it warns about.
#   check_isa.sh OBJDUMP LIBRARY
set -eu
objdump=$1
library=$2
disassembly="${TMPDIR:-/tmp}/check_isa.$$"
trap 'rm -f "$disassembly"' EXIT
"$objdump" -d --no-show-raw-insn -C "$library" > "$disassembly"
failed=0

found=$(awk '
  /^[0-9a-f]+ <.*>:$/ { name = $0; allowed = index(name, "tessera::cpu::avx512::") > 0; next }
  !allowed && /%zmm|%k[0-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])/ { print name }' "$disassembly" | sort -u)
if [ -n "$found" ]; then
  echo "AVX-512 instructions outside tessera::cpu::avx512 in $library (see src/tensor/cpu/isa.h):"
  echo "$found"
  failed=1
else
  echo "no AVX-512 instruction outside tessera::cpu::avx512 in $library"
fi

# One line per function of the check seen, then one per instruction or call it must not have.
report=$(awk '
  function own(target) { return target ~ /warn_if_below_baseline|first_missing_extension|write_below_baseline_warning/ }
  /^[0-9a-f]+ <.*>:$/ {
    name = $0
    checked = own(name) && name !~ /@plt>:$/
    sub(/:$/, "", name)
    if (checked) print "function " name
    next
  }
  !checked { next }
  {
    split($0, fields, "\t")
    instruction = fields[2]
    if (instruction ~ /^v|%[yz]mm|%k[0-7]/) print "instruction " name ": " instruction
    if (instruction ~ /^(call|jmp) +[0-9a-f]+ </) {
      target = instruction
      sub(/^[^<]*</, "", target)
      sub(/>$/, "", target)
      sub(/[+]0x[0-9a-f]+$/, "", target)
      sub(/@plt$/, "", target)
      if (!own(target) && target !~ /^(__cpu_indicator_init|write|strlen)$/) print "call " name ": " instruction
    }
  }' "$disassembly")
functions=$(printf '%s\n' "$report" | grep -c '^function ' || true)
offending=$(printf '%s\n' "$report" | grep -v '^function ' | grep . || true)
if [ "$functions" -ne 3 ]; then
  echo "expected the load-time check's 3 functions in $library, found $functions:"
  printf '%s\n' "$report" | grep '^function ' || true
  failed=1
elif [ -n "$offending" ]; then
  echo "the load-time check (src/tensor/baseline_check.cpp) is not plain x86-64 in $library:"
  echo "$offending"
  failed=1
else
  echo "the load-time check is plain x86-64 and calls only cpuid's initialiser, write and strlen"
fi
exit "$failed"
