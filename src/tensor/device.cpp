#include "tessera/tensor/device.h"

#include "tessera/tensor/error.h"

namespace tessera {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    try {
      size_t used = 0;
      int index = std::stoi(text.substr(5), &used);
      if (used == text.size() - 5 && index >= 0) return cuda(index);
    } catch (const std::exception&) {
    }
  }
  throw ValueError(detail::concat("invalid device '", text, "': expected cpu, cuda or cuda:N"));
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace tessera
