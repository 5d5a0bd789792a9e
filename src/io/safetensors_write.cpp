// safetensors writing: the header is built from shapes and dtypes alone, then each
// tensor's bytes are streamed into an AtomicFile (one contiguous host copy at a time, only
// for tensors that are not already contiguous on the CPU).
#include <bit>
#include <cstring>

#include "tessera/io/atomic_file.h"
#include "tessera/io/json.h"
#include "tessera/io/safetensors.h"
#include "tessera/tensor/native.h"

namespace tessera::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; Tessera writes host memory as is");

namespace {

// The JSON header, padded with spaces to a multiple of 8 so the data section is aligned.
std::string header_text(const StateDict& tensors, const std::string& path, const Metadata& metadata) {
  json::Value header = json::Object{};
  if (!metadata.empty()) {
    json::Object entries;
    for (const auto& [key, value] : metadata) entries.emplace_back(key, value);
    header.set("__metadata__", std::move(entries));
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    TS_CHECK(name != "__metadata__", ValueError, "io::save('", path,
             "'): '__metadata__' is reserved by the format and cannot name a tensor");
    TS_CHECK(tensor.defined(), ValueError, "io::save('", path, "'): tensor '", name, "' is undefined");
    json::Array shape;
    for (int64_t size : tensor.sizes()) shape.emplace_back(size);
    uint64_t end = offset + tensor.nbytes();
    // StateDict names are unique, so appending keeps the header free of repeats.
    header.as_object().emplace_back(name, json::Object{{"dtype", safetensors_dtype_name(tensor.dtype())},
                                  {"shape", std::move(shape)},
                                  {"data_offsets", json::Array{offset, end}}});
    offset = end;
  }
  std::string text;
  try {
    text = json::write(header);
  } catch (const ValueError& e) {
    throw ValueError(detail::concat("io::save('", path, "'): a tensor name or metadata string: ", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  TS_CHECK(text.size() <= max_header_bytes, ValueError, "io::save('", path, "'): the header would be ",
           text.size(), " bytes, over the ", max_header_bytes, "-byte limit readers enforce");
  return text;
}

void write_tensor_data(AtomicFile& file, const Tensor& tensor) {
  if (tensor.numel() == 0) return;
  Tensor host = tensor.detach();
  if (host.is_cuda()) host = native::to_device(host, Device::cpu());
  host = native::contiguous(host);
  file.write(host.data_ptr(), host.nbytes());
}

}  // namespace

void save(const StateDict& tensors, const std::string& path, const Metadata& metadata) {
  std::string header = header_text(tensors, path, metadata);
  AtomicFile file(path);
  unsigned char length[8];
  uint64_t header_length = header.size();
  std::memcpy(length, &header_length, sizeof length);  // little-endian host, checked above
  file.write(length, sizeof length);
  file.write(header.data(), header.size());
  for (const auto& [name, tensor] : tensors) write_tensor_data(file, tensor);
  file.commit();
}

}  // namespace tessera::io
