// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
//
// Tessera's random numbers are counter-based: a value is a pure function of (seed, stream,
// element index), never of how many numbers were drawn before. That is what makes
// dropout masks and parameter initialisation independent of the world size and of how a
// batch is split across ranks. Header-only so CPU and CUDA kernels share the exact bits.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#if defined(__CUDACC__)
#define TS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TS_HOST_DEVICE inline
#endif

namespace tessera::philox {

struct Counter {
  uint32_t word[4];
};

TS_HOST_DEVICE Counter philox4x32_10(Counter counter, uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t key0 = static_cast<uint32_t>(key), key1 = static_cast<uint32_t>(key >> 32);
  uint32_t* c = counter.word;
  for (int round = 0; round < 10; ++round) {
    uint64_t product0 = static_cast<uint64_t>(kMul0) * c[0];
    uint64_t product1 = static_cast<uint64_t>(kMul1) * c[2];
    uint32_t hi0 = static_cast<uint32_t>(product0 >> 32), lo0 = static_cast<uint32_t>(product0);
    uint32_t hi1 = static_cast<uint32_t>(product1 >> 32), lo1 = static_cast<uint32_t>(product1);
    uint32_t next0 = hi1 ^ c[1] ^ key0, next2 = hi0 ^ c[3] ^ key1;
    c[0] = next0;
    c[1] = lo1;
    c[2] = next2;
    c[3] = lo0;
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// The four 32-bit words for block `block` of stream `stream` under `seed`.
TS_HOST_DEVICE Counter block(uint64_t seed, uint64_t stream, uint64_t block) {
  Counter counter{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                   static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}};
  return philox4x32_10(counter, seed);
}

// A uniform float in [0, 1) from 24 random bits (PyTorch's float recipe).
TS_HOST_DEVICE float unit_float(uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1.0p-24f; }

// A uniform double in [0, 1) from 53 random bits.
TS_HOST_DEVICE double unit_double(uint32_t high, uint32_t low) {
  uint64_t bits = (static_cast<uint64_t>(high) << 32 | low) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

// A stable 64-bit stream id for a name (FNV-1a), e.g. a parameter's dotted name.
constexpr uint64_t stream_of(std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char ch : name) {
    hash ^= static_cast<unsigned char>(ch);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace tessera::philox
