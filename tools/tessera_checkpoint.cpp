// tessera-checkpoint: what a checkpoint holds, whether it is intact, and conversions
// between sharded checkpoints (a folder, one file per rank) and full ones (one
// safetensors file with PyTorch's names). Runs in one process; needs no MPI.
//
//   tessera-checkpoint info ckpt/step-00000200        (or ckpt/: its latest)
//   tessera-checkpoint verify ckpt
//   tessera-checkpoint to-full ckpt model.safetensors [--model-only]
//   tessera-checkpoint to-sharded model.safetensors ckpt-8 --world-size 8
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <tessera/tessera.h>

namespace ts = tessera;
namespace ckpt = tessera::checkpoint;
namespace json = tessera::io::json;

namespace {

const char* kUsage = R"(usage: tessera-checkpoint COMMAND ...

Inspects and converts Tessera checkpoints. PATH may be a sharded checkpoint folder
(metadata.json and one rank-NNNNN-of-NNNNN.safetensors per rank), a folder of checkpoints
written with --checkpoint-dir (its `latest` is used), or a full checkpoint file.

commands:
  info PATH                          print what the checkpoint holds: format, world size,
                                     training position, optimizer and scheduler, every
                                     unit (flat layout and parameters) and every file's
                                     tensors with their ranges and sizes
  verify PATH                        read every tensor and check every CRC32C
  to-full PATH OUT.safetensors [--model-only]
                                     write one safetensors file with PyTorch's names
                                     (parameters, buffers, "optimizer.state.<param>.<name>");
                                     with --model-only the parameters and buffers alone, a
                                     plain state dict that PyTorch's strict load_state_dict
                                     (safetensors.torch.load_file) reads
  to-sharded PATH OUT_DIR --world-size N
                                     write a sharded checkpoint for N ranks, 1 to 99999 (from
                                     a full file, or from a sharded checkpoint: resharding)
                                     into OUT_DIR: a new or empty folder, or one to-sharded
                                     wrote before; anything else is refused
  --help                             show this help

OUT may not be PATH, lie inside it or contain it. OUT.safetensors may be a regular file
(replaced atomically), a new file, a character device or a FIFO (written through).

Exit status: 0 on success, 1 when the checkpoint is unreadable or corrupt (the message names
the file and byte offset), 2 on a usage error.
)";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "tessera-checkpoint: %s\n(see tessera-checkpoint --help)\n", message.c_str());
  std::exit(2);
}

std::string human_bytes(uint64_t bytes) {
  char text[32];
  if (bytes < 1024) {
    std::snprintf(text, sizeof text, "%" PRIu64 " B", bytes);
  } else if (bytes < (1u << 20)) {
    std::snprintf(text, sizeof text, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  } else if (bytes < (1ull << 30)) {
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  } else {
    std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  }
  return text;
}

std::string small_tensors(const ts::StateDict& tensors) {
  std::string text;
  for (const auto& [name, value] : tensors) {
    std::string shown = json::write(ckpt::small_tensors_to_json([&] {
                                      ts::StateDict one;
                                      one.insert(name, value);
                                      return one;
                                    }()).as_object()[0].second);
    text += (text.empty() ? "" : " ") + name + "=" + shown;
  }
  return text;
}

// world_size 0: a full checkpoint, not laid out for any world size.
void print_manifest(const ckpt::Manifest& manifest, int world_size) {
  const ckpt::TrainingState& t = manifest.training;
  std::printf("training: step %llu, epoch %lld, batch %lld, seed %llu", static_cast<unsigned long long>(t.step),
              static_cast<long long>(t.epoch), static_cast<long long>(t.batch), static_cast<unsigned long long>(t.seed));
  if (!t.generators.empty()) std::printf(", %zu generator(s)", t.generators.size());
  if (!t.extra.as_object().empty()) std::printf(", extra %s", json::write(t.extra).c_str());
  std::printf("\n");
  if (manifest.optimizer.empty()) {
    std::printf("optimizer: none saved\n");
  } else {
    std::printf("optimizer: %s, %zu parameter group(s)\n", manifest.optimizer.c_str(), manifest.optimizer_groups.size());
    for (size_t g = 0; g < manifest.optimizer_groups.size(); ++g) {
      const ckpt::OptimizerGroupRecord& group = manifest.optimizer_groups[g];
      std::printf("  group %zu: %s; %zu parameter(s)\n", g, small_tensors(group.hyperparameters).c_str(),
                  group.params.size());
    }
  }
  if (manifest.scheduler.empty()) {
    std::printf("scheduler: none saved\n");
  } else {
    std::printf("scheduler: %s  %s\n", manifest.scheduler.c_str(), small_tensors(manifest.scheduler_state).c_str());
  }
  int64_t elements = manifest.parameter_numel();
  std::printf("units: %zu, %lld parameter elements\n", manifest.units.size(), static_cast<long long>(elements));
  for (const ckpt::UnitRecord& unit : manifest.units) {
    std::printf("  %s: %s, flat parameter '%s', %lld elements", unit.name.c_str(),
                std::string(ts::io::safetensors_dtype_name(unit.dtype)).c_str(), unit.flat_parameter.c_str(),
                static_cast<long long>(unit.flat_numel));
    if (world_size > 0) {
      int64_t padded = (unit.flat_numel + world_size - 1) / world_size * world_size;
      std::printf(" (padded to %lld at %d rank(s): %lld per rank)", static_cast<long long>(padded), world_size,
                  static_cast<long long>(padded / world_size));
    }
    std::printf("\n");
    for (const ts::fsdp::FlatEntry& entry : unit.parameters) {
      std::printf("      %-32s %-18s offset %lld, %lld elements\n", entry.name.c_str(), ts::shape_str(entry.shape).c_str(),
                  static_cast<long long>(entry.offset), static_cast<long long>(entry.numel));
    }
    std::vector<std::string> stepped{unit.flat_parameter};
    for (const ts::fsdp::FlatEntry& entry : unit.parameters) stepped.push_back(entry.name);
    for (const std::string& name : stepped) {
      const ckpt::OptimizerStateRecord* record = manifest.find_optimizer_state(name);
      if (record == nullptr) continue;
      std::string tensors;
      for (const std::string& tensor : record->tensors) tensors += (tensors.empty() ? "" : ", ") + tensor;
      std::printf("      optimizer state of %s: %s%s%s\n", name.c_str(), tensors.c_str(),
                  record->scalars.empty() ? "" : "; ", small_tensors(record->scalars).c_str());
    }
  }
  std::printf("buffers: %zu\n", manifest.buffers.size());
  for (const ckpt::BufferRecord& buffer : manifest.buffers) {
    std::printf("  %s %s %s\n", buffer.name.c_str(), std::string(ts::io::safetensors_dtype_name(buffer.dtype)).c_str(),
                ts::shape_str(buffer.shape).c_str());
  }
}

int info(const std::string& path) {
  std::string resolved = ckpt::resolve(path);
  std::unique_ptr<ckpt::FlatSource> source = ckpt::open(resolved);
  if (auto* sharded = dynamic_cast<ckpt::ShardedCheckpoint*>(source.get())) {
    const ckpt::ShardedMetadata& metadata = sharded->metadata();
    uint64_t total = 0;
    for (const ckpt::FileRecord& file : metadata.files) total += file.bytes;
    std::printf("sharded checkpoint %s (format version %lld)\n", resolved.c_str(),
                static_cast<long long>(ckpt::kFormatVersion));
    std::printf("world size: %d; %zu files, %s; CRC32C per %s chunk\n", metadata.world_size, metadata.files.size(),
                human_bytes(total).c_str(), human_bytes(metadata.chunk_bytes).c_str());
    print_manifest(metadata.manifest, metadata.world_size);
    std::printf("files:\n");
    for (const ckpt::FileRecord& file : metadata.files) {
      std::printf("  %s  %s, %zu tensors\n", file.name.c_str(), human_bytes(file.bytes).c_str(), file.slices.size());
      for (const ckpt::SliceRecord& slice : file.slices) {
        std::printf("      %-44s elements [%lld, %lld), %zu CRC32C chunk(s)\n", slice.tensor.c_str(),
                    static_cast<long long>(slice.begin), static_cast<long long>(slice.end), slice.crc32c.size());
      }
    }
  } else {
    auto& full = dynamic_cast<ckpt::FullCheckpoint&>(*source);
    std::printf("full checkpoint %s (format version %lld)\n", resolved.c_str(), static_cast<long long>(ckpt::kFormatVersion));
    std::printf("%zu tensors, %s; CRC32C per %s chunk\n", full.file().entries().size(),
                human_bytes(full.file().file_size()).c_str(), human_bytes(full.chunk_bytes()).c_str());
    print_manifest(full.manifest(), 0);
    std::printf("tensors:\n");
    for (const ts::io::TensorEntry& entry : full.file().entries()) {
      std::printf("  %-48s %s %-18s %s\n", entry.name.c_str(), std::string(ts::io::safetensors_dtype_name(entry.dtype)).c_str(),
                  ts::shape_str(entry.shape).c_str(), human_bytes(entry.nbytes()).c_str());
    }
  }
  return 0;
}

int verify(const std::string& path) {
  std::string resolved = ckpt::resolve(path);
  std::unique_ptr<ckpt::FlatSource> source = ckpt::open(resolved);
  if (auto* sharded = dynamic_cast<ckpt::ShardedCheckpoint*>(source.get())) {
    sharded->verify_all();
    size_t tensors = 0;
    uint64_t bytes = 0;
    for (const ckpt::FileRecord& file : sharded->metadata().files) {
      tensors += file.slices.size();
      bytes += file.bytes;
    }
    std::printf("%s: OK (%zu files, %zu tensor slices, %s; every CRC32C matches)\n", resolved.c_str(),
                sharded->metadata().files.size(), tensors, human_bytes(bytes).c_str());
  } else {
    auto& full = dynamic_cast<ckpt::FullCheckpoint&>(*source);
    full.verify_all();
    std::printf("%s: OK (%zu tensors, %s; every CRC32C matches)\n", resolved.c_str(), full.file().entries().size(),
                human_bytes(full.file().file_size()).c_str());
  }
  return 0;
}

// The output must leave the input whole: neither it, nor inside it, nor around it; for a
// folder of checkpoints, also apart from the one it resolves to.
void check_output_apart(const std::string& output, const std::string& input) {
  ckpt::check_output_apart(output, input);
  ckpt::check_output_apart(output, ckpt::resolve(input));
}

int run(const std::vector<std::string>& args) {
  if (args.empty()) usage_error("no command given");
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  const std::string& command = args[0];
  if (command == "info" || command == "verify") {
    if (args.size() != 2) usage_error(command + " takes one PATH");
    return command == "info" ? info(args[1]) : verify(args[1]);
  }
  if (command == "to-full") {
    bool model_only = false;
    std::vector<std::string> paths;
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--model-only") {
        model_only = true;
      } else if (args[i].starts_with("--")) {
        usage_error("to-full: unknown option '" + args[i] + "'");
      } else {
        paths.push_back(args[i]);
      }
    }
    if (paths.size() != 2) usage_error("to-full takes PATH and OUT.safetensors");
    check_output_apart(paths[1], paths[0]);
    std::unique_ptr<ckpt::FlatSource> source = ckpt::open(paths[0]);
    if (model_only) {
      ckpt::write_model_weights(*source, paths[1]);
    } else {
      ckpt::write_full(*source, paths[1]);
    }
    std::printf("wrote %s (%lld parameter elements%s)\n", paths[1].c_str(),
                static_cast<long long>(source->manifest().parameter_numel()),
                model_only ? "; the model's state dict alone" : "");
    return 0;
  }
  if (command == "to-sharded") {
    int world_size = 0;
    std::vector<std::string> paths;
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--world-size") {
        if (i + 1 >= args.size()) usage_error("--world-size needs a value");
        const std::string& text = args[++i];
        long long value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error != std::errc() || end != text.data() + text.size() || value < 1 || value > ckpt::kMaxWorldSize) {
          usage_error("--world-size expects an integer from 1 to " + std::to_string(ckpt::kMaxWorldSize) +
                      " (rank files are numbered with five digits), got '" + text + "'");
        }
        world_size = static_cast<int>(value);
      } else {
        paths.push_back(args[i]);
      }
    }
    if (paths.size() != 2) usage_error("to-sharded takes PATH and OUT_DIR");
    if (world_size < 1) usage_error("to-sharded needs --world-size N (N >= 1)");
    check_output_apart(paths[1], paths[0]);
    std::unique_ptr<ckpt::FlatSource> source = ckpt::open(paths[0]);
    ckpt::write_sharded(*source, paths[1], world_size);
    std::printf("wrote %s for %d rank(s)\n", paths[1].c_str(), world_size);
    return 0;
  }
  usage_error("unknown command '" + command + "'");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const ts::Error& error) {
    std::fprintf(stderr, "tessera-checkpoint: error: %s\n", error.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tessera-checkpoint: error: out of memory\n");
  } catch (const std::exception& error) {  // never an abort without a word
    std::fprintf(stderr, "tessera-checkpoint: error: %s\n", error.what());
  }
  return 1;
}
