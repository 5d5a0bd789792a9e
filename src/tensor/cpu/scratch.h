// Scratch memory for CPU kernels that keeps its capacity between calls (one per thread and
// purpose, usually `thread_local`), 64-byte aligned so that rows padded to 16 floats start
// on a cache line. Internal to src/tensor/cpu.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <new>

namespace tessera::cpu {

inline int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(data_); }
  float* get(int64_t count) {
    if (count > capacity_) {
      std::free(data_);
      data_ = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(round_up(count, 16)) * sizeof(float)));
      if (data_ == nullptr) throw std::bad_alloc();
      capacity_ = count;
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  int64_t capacity_ = 0;
};

}  // namespace tessera::cpu
