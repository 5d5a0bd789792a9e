// <immintrin.h> for the files that write AVX-512 kernels (isa.h's pattern), with a GCC 12
// false positive silenced: its AVX-512 intrinsics start from `__m512 __Y = __Y;` (an
// undefined vector on purpose), which -Wmaybe-uninitialized reports wherever they inline.
// A diagnostic pragma holds from where it stands to the end of the file being compiled, so
// this silences the warning for the rest of the including file: include it only from
// AVX-512 kernel files, with their other #includes. Internal to src/tensor/cpu.
#pragma once

#include "tessera/tensor/cpu/isa.h"

#if TESSERA_X86_KERNELS
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif
