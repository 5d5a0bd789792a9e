#!/usr/bin/env python3
"""bench/torch_cpu.py's choice of OpenBLAS kernels, from synthetic /proc/cpuinfo flags of
the CPUs the project's machines have (Intel Xeon Sapphire Rapids class, AMD EPYC Zen 4) and
of older ones: no OpenBLAS or PyTorch needed (the probe of what OpenBLAS takes is a stub)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import torch_cpu  # noqa: E402

BASE = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
        "syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl pni pclmulqdq ssse3 cx16 sse4_1 sse4_2 movbe "
        "popcnt aes xsave f16c rdrand")
HASWELL = BASE + " avx fma bmi1 avx2 bmi2"
AVX512 = HASWELL + " avx512f avx512dq avx512cd avx512bw avx512vl"
# This project's Xeon, as its hypervisor reports it (abridged: the flags that matter kept).
SAPPHIRE_RAPIDS = AVX512 + " avx512ifma avx512vbmi avx_vnni avx512_bf16 avx512_vnni amx_bf16 avx512_fp16 amx_tile"
# AMD EPYC 9004 (Genoa, Zen 4): AVX-512 F/DQ/CD/BW/VL with BF16, no FP16 or AMX.
ZEN4 = AVX512 + " avx512ifma avx512vbmi avx512_bf16 avx512_vnni avx512_bitalg avx512_vpopcntdq sse4a misalignsse"
ZEN3 = HASWELL + " sse4a misalignsse vaes vpclmulqdq"  # EPYC 7003 (Milan): AVX2 only
SKYLAKE_SP = AVX512  # Xeon Scalable 1st/2nd generation: AVX-512 without BF16


def cpuinfo(flags, model="Test CPU"):
    return (f"processor\t: 0\nvendor_id\t: Test\nmodel name\t: {model}\nflags\t\t: {flags}\n\n"
            f"processor\t: 1\nmodel name\t: {model}\nflags\t\t: {flags}\n")


def choice(detected, flags, refused=()):
    return torch_cpu.better_coretype(detected, torch_cpu.cpu_flags(cpuinfo(flags)), lambda name: name not in refused)


class CoreChoice(unittest.TestCase):
    def test_cpuinfo_parsing(self):
        self.assertEqual(torch_cpu.cpu_flags(cpuinfo("avx2 fma")), {"avx2", "fma"})
        self.assertEqual(torch_cpu._cpuinfo_field("model name", cpuinfo("avx", "AMD EPYC 9654")), "AMD EPYC 9654")
        self.assertEqual(torch_cpu.cpu_flags("processor : 0\n"), set())

    def test_xeon_sapphire_rapids(self):
        self.assertEqual(choice("Prescott", SAPPHIRE_RAPIDS), "COOPERLAKE")  # 0.3.21 on this project's Xeon
        self.assertEqual(choice("Prescott", SAPPHIRE_RAPIDS, refused={"COOPERLAKE"}), "SKYLAKEX")
        self.assertEqual(choice("Haswell", SAPPHIRE_RAPIDS), "COOPERLAKE")
        self.assertIsNone(choice("SkylakeX", SAPPHIRE_RAPIDS))  # already AVX-512 float32 kernels
        self.assertIsNone(choice("Cooperlake", SAPPHIRE_RAPIDS))
        self.assertIsNone(choice("SapphireRapids", SAPPHIRE_RAPIDS))

    def test_epyc_zen4(self):
        self.assertEqual(choice("Zen", ZEN4), "COOPERLAKE")
        self.assertEqual(choice("Zen", ZEN4, refused={"COOPERLAKE"}), "SKYLAKEX")
        self.assertIsNone(choice("Cooperlake", ZEN4))  # a later OpenBLAS's own pick
        # A Zen 4 whose hypervisor hides AVX-512: OpenBLAS's Zen kernels are the best it has.
        self.assertIsNone(choice("Zen", ZEN4.replace("avx512", "hidden")))

    def test_older_cpus(self):
        self.assertIsNone(choice("Zen", ZEN3))
        self.assertIsNone(choice("Haswell", HASWELL))
        self.assertEqual(choice("Prescott", HASWELL), "HASWELL")
        self.assertEqual(choice("Haswell", SKYLAKE_SP), "SKYLAKEX")  # no BF16: not Cooperlake
        self.assertIsNone(choice("SkylakeX", SKYLAKE_SP))
        self.assertEqual(choice("Prescott", BASE + " avx"), "SANDYBRIDGE")
        self.assertIsNone(choice("Prescott", BASE))  # nothing better to ask for
        self.assertIsNone(choice("Prescott", SAPPHIRE_RAPIDS, refused={"COOPERLAKE", "SKYLAKEX", "HASWELL",
                                                                       "SANDYBRIDGE"}))


if __name__ == "__main__":
    unittest.main()
