// safetensors files: Hugging Face's format, so checkpoints open in PyTorch and the HF tools.
//
// Layout: 8 bytes N (little-endian u64), N bytes of JSON header padded with spaces to a
// multiple of 8, then the raw little-endian tensor data. The header maps each tensor name
// to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (offsets relative to the
// data section); the optional "__metadata__" maps strings to strings.
//
// save() is atomic: it writes a temporary file beside the target, fsyncs it, renames it
// over the target and fsyncs the directory, so a crash or an error leaves the previous
// file whole. Loading validates the entire header (sizes, dtypes, shapes, offsets, overlaps)
// before reading a byte of data; a bad file is a FormatError naming the file, the tensor
// and the byte offset, never a crash.
//
//   ts::StateDict weights;
//   weights.insert("fc.weight", ts::randn({4, 3}, gen));
//   ts::io::save(weights, "model.safetensors", {{"epoch", "3"}});
//   ts::StateDict back = ts::io::load("model.safetensors");
//
//   ts::io::SafetensorsFile file("model.safetensors");       // header only
//   ts::Tensor row = file.read_slice("fc.weight", 3, 3);     // elements [3, 6), 1-D
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/io/errors.h"
#include "tessera/tensor/state_dict.h"

namespace tessera::io {

using Metadata = std::map<std::string, std::string>;

// Headers larger than this are refused (as Hugging Face's reader does): a corrupt length
// must not make the reader allocate gigabytes.
inline constexpr uint64_t max_header_bytes = 100'000'000;

// "F32", "F64", "I64", "U8", "BF16", "BOOL" (one byte, 0 or 1, as PyTorch writes torch.bool;
// reading any other byte is a FormatError naming its offset).
std::string_view safetensors_dtype_name(DType dtype);
// The DType for a safetensors dtype name, or nullopt for names Tessera does not support.
std::optional<DType> dtype_from_safetensors(std::string_view name);

// Writes `tensors` in their order (CUDA and non-contiguous tensors through a contiguous
// host copy). Throws IOError naming the path and the OS error; any failure, including
// one thrown while reading a tensor's data, leaves an existing file at `path` untouched
// and removes the temporary file.
void save(const StateDict& tensors, const std::string& path, const Metadata& metadata = {});

// Every tensor of the file, on the CPU, in the header's order.
StateDict load(const std::string& path);
// The "__metadata__" map (empty when absent); validates the whole header as load does.
Metadata load_metadata(const std::string& path);

// One tensor's header entry.
struct TensorEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t data_begin = 0;  // relative to the data section, as in the header
  uint64_t data_end = 0;
  int64_t numel() const;
  uint64_t nbytes() const { return data_end - data_begin; }
};

// An open safetensors file whose header has been read and validated; tensors are read on
// demand, whole or in part. Reads are independent (pread), so one object may serve
// several threads.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const Metadata& metadata() const { return metadata_; }
  // Header order.
  const std::vector<TensorEntry>& entries() const { return entries_; }
  std::vector<std::string> keys() const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // ValueError naming the file when absent.
  const TensorEntry& entry(const std::string& name) const;
  // File offset of the data section (8 + header length).
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_size_; }

  // The whole tensor, on the CPU, with its shape.
  Tensor read(const std::string& name) const;
  // Elements [first_element, first_element + count) of the flattened tensor, as a 1-D CPU
  // tensor; IndexError when the range leaves the tensor.
  Tensor read_slice(const std::string& name, int64_t first_element, int64_t count) const;
  // Reads destination.numel() elements starting at first_element into `destination`
  // (contiguous, the entry's dtype, CPU or CUDA): a rank fills its shard in place.
  void read_into(const std::string& name, int64_t first_element, Tensor& destination) const;
  // Every tensor, in header order.
  StateDict read_all() const;

 private:
  void read_bytes(const TensorEntry& entry, uint64_t first_byte, uint64_t count, void* out) const;

  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<TensorEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  Metadata metadata_;
};

}  // namespace tessera::io
