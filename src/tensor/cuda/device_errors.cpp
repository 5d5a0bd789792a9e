#include "tessera/tensor/cuda/device_errors.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <new>
#include <utility>

#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/stream.h"

namespace tessera::cuda {

namespace {

constexpr uint64_t kClaimed = ~uint64_t{0};  // a kernel is writing its record

constexpr size_t kKeptContexts = 4096;

struct DeviceErrors {
  DeviceErrorRecord* slot = nullptr;  // mapped pinned memory: the host's and the device's address
  std::exception_ptr posted;
  FirstBadScratch* scratch = nullptr;  // device memory
  uint64_t next_context = 1;
  std::map<uint64_t, DeviceErrorContext> contexts;  // the last kKeptContexts
};

// Never destroyed, as the pinned staging memory (freeing it at exit races the runtime).
std::mutex& errors_mutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}
std::map<int, DeviceErrors>& all_errors() {
  static auto* all = new std::map<int, DeviceErrors>();
  return *all;
}

DeviceErrors& errors_of(int device) {  // under errors_mutex()
  DeviceErrors& errors = all_errors()[device];
  if (errors.slot == nullptr) {
    DeviceGuard guard(device);
    void* host = nullptr;
    TS_CUDA_CHECK(cudaHostAlloc(&host, sizeof(DeviceErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable));
    auto* record = new (host) DeviceErrorRecord();
    void* device_address = nullptr;
    TS_CUDA_CHECK(cudaHostGetDevicePointer(&device_address, host, 0));
    // With unified addressing (every 64-bit platform CUDA 13 supports) both are the same.
    TS_CHECK(device_address == host, CudaError, "cuda:", device,
             ": mapped host memory has another address on the device; Tessera needs unified addressing");
    errors.slot = record;
  }
  return errors;
}

}  // namespace

DeviceErrorRecord* device_error_slot(int device) {
  std::lock_guard<std::mutex> lock(errors_mutex());
  return errors_of(device).slot;
}

void raise_device_errors(int device) {
  std::exception_ptr posted;
  DeviceErrorRecord record;
  DeviceErrorContext context;
  bool has_context = false;
  {
    std::lock_guard<std::mutex> lock(errors_mutex());
    auto it = all_errors().find(device);
    if (it == all_errors().end()) return;  // nothing reported on this device yet
    DeviceErrors& errors = it->second;
    posted = std::exchange(errors.posted, nullptr);
    if (!posted) {
      if (errors.slot == nullptr) return;
      volatile uint64_t* code = &errors.slot->code;
      const uint64_t seen = *code;
      if (seen == 0 || seen == kClaimed) return;  // none, or a kernel still running writes one
      record.code = seen;
      for (int i = 0; i < 3; ++i) record.values[i] = errors.slot->values[i];
      record.context = errors.slot->context;
      *code = 0;  // raised: the next report may come
      auto found = errors.contexts.find(record.context);
      if (found != errors.contexts.end()) context = found->second;
      has_context = found != errors.contexts.end();
    }
  }
  if (posted) std::rethrow_exception(posted);
  throw_device_error(record, has_context ? &context : nullptr);
}

uint64_t register_error_context(int device, DeviceErrorContext context) {
  std::lock_guard<std::mutex> lock(errors_mutex());
  DeviceErrors& errors = all_errors()[device];
  const uint64_t id = errors.next_context++;
  errors.contexts.emplace(id, std::move(context));
  if (errors.contexts.size() > kKeptContexts) errors.contexts.erase(errors.contexts.begin());
  return id;
}

FirstBadScratch* first_bad_scratch(int device) {
  std::lock_guard<std::mutex> lock(errors_mutex());
  DeviceErrors& errors = all_errors()[device];
  if (errors.scratch == nullptr) {
    DeviceGuard guard(device);
    void* memory = nullptr;
    TS_CUDA_CHECK(cudaMalloc(&memory, sizeof(FirstBadScratch)));  // once per device, never freed
    // {position = ~0, blocks_done = 0}, set on the compute stream, ahead of every kernel that
    // uses the scratch (they all run there). Not a cudaMemcpy: that runs on the legacy stream,
    // which the non-blocking compute stream does not wait for. And no host wait either: this
    // runs under errors_mutex(), which the NCCL watchdog needs to post the error that would
    // release a compute stream stuck behind a collective.
    auto* scratch = static_cast<FirstBadScratch*>(memory);
    const cudaStream_t stream = compute_stream(device);
    TS_CUDA_CHECK(cudaMemsetAsync(&scratch->position, 0xff, sizeof scratch->position, stream));
    TS_CUDA_CHECK(cudaMemsetAsync(&scratch->blocks_done, 0, sizeof scratch->blocks_done, stream));
    errors.scratch = scratch;
  }
  return errors.scratch;
}

void post_device_error(int device, std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(errors_mutex());
  DeviceErrors& errors = all_errors()[device];
  if (!errors.posted) errors.posted = std::move(error);
}

}  // namespace tessera::cuda
