// Output shared by the examples: rank 0 prints, either one JSON object per line (--json)
// or text, with a progress bar when stdout is a terminal. Each example's Reporter adds
// its own events on top.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>

#include <tessera/tessera.h>

namespace example {

class Printer {
 public:
  Printer(bool json, bool active) : json_(json), active_(active), tty_(isatty(1)) {}

  // A training report: JSON, a progress bar on a terminal, or PyTorch's example's line.
  void train(int64_t epoch, int64_t batch, int64_t batches, int64_t samples, int64_t total, double loss) {
    if (!active_) return;
    if (json_) {
      print_json({{"event", "train"}, {"epoch", epoch}, {"batch", batch}, {"samples", samples}, {"loss", loss}});
    } else if (tty_) {
      const int width = 30;
      const int done = static_cast<int>(width * (batch + 1) / std::max<int64_t>(batches, 1));
      std::printf("\rEpoch %lld [%s%s] %6lld/%lld  loss %.6f", static_cast<long long>(epoch),
                  std::string(static_cast<size_t>(done), '=').c_str(),
                  std::string(static_cast<size_t>(width - done), ' ').c_str(), static_cast<long long>(samples),
                  static_cast<long long>(total), loss);
      std::fflush(stdout);
    } else {
      std::printf("Train Epoch: %lld [%lld/%lld (%.0f%%)]\tLoss: %.6f\n", static_cast<long long>(epoch),
                  static_cast<long long>(samples), static_cast<long long>(total), 100.0 * samples / total, loss);
      std::fflush(stdout);
    }
  }

  // A line of information ({"event": "info", "message": ...} in JSON).
  void line(const std::string& text) {
    if (!active_) return;
    if (json_) {
      print_json({{"event", "info"}, {"message", text}});
    } else {
      std::printf("%s\n", text.c_str());
      std::fflush(stdout);
    }
  }

 protected:
  bool json() const { return json_; }
  bool active() const { return active_; }
  bool tty() const { return tty_; }

  void print_json(std::initializer_list<std::pair<std::string, tessera::io::json::Value>> fields) {
    tessera::io::json::Object object;
    for (const auto& [key, value] : fields) object.emplace_back(key, value);
    std::printf("%s\n", tessera::io::json::write(tessera::io::json::Value(std::move(object))).c_str());
    std::fflush(stdout);
  }

 private:
  bool json_, active_, tty_;
};

}  // namespace example
