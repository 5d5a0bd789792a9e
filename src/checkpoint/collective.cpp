#include "tessera/checkpoint/collective.h"

#include <cstring>
#include <exception>

#include "tessera/checkpoint/errors.h"
#include "tessera/tensor/factory.h"

namespace tessera::checkpoint::detail {

std::vector<std::string> all_gather_strings(dist::ProcessGroup& group, const std::string& mine) {
  const int world = group.size();
  Tensor my_length = full({1}, static_cast<double>(mine.size()), {.dtype = DType::i64});
  Tensor lengths = zeros({world}, {.dtype = DType::i64});
  group.all_gather_into(lengths, my_length);
  std::vector<int64_t> sizes = lengths.to_vector<int64_t>();
  int64_t longest = 0;
  for (int64_t size : sizes) longest = std::max(longest, size);
  std::vector<std::string> out(static_cast<size_t>(world));
  if (longest == 0) return out;
  Tensor my_bytes = zeros({longest}, {.dtype = DType::u8});
  if (!mine.empty()) std::memcpy(my_bytes.data_ptr(), mine.data(), mine.size());
  Tensor all = zeros({world * longest}, {.dtype = DType::u8});
  group.all_gather_into(all, my_bytes);
  const char* bytes = static_cast<const char*>(all.data_ptr());
  for (int rank = 0; rank < world; ++rank) out[static_cast<size_t>(rank)].assign(bytes + rank * longest, static_cast<size_t>(sizes[static_cast<size_t>(rank)]));
  return out;
}

bool true_on_every_rank(dist::ProcessGroup& group, bool mine) {
  Tensor false_count = full({1}, mine ? 0.0 : 1.0, {.dtype = DType::i64});
  group.all_reduce(false_count);
  return false_count.to_vector<int64_t>()[0] == 0;
}

std::vector<std::string> run_on_every_rank(dist::ProcessGroup& group, const std::string& what,
                                           const std::function<std::string()>& part) {
  std::string result;
  std::exception_ptr failure;
  std::string message;
  try {
    result = part();
  } catch (const std::exception& error) {
    failure = std::current_exception();
    message = error.what();
  } catch (...) {
    failure = std::current_exception();
    message = "an unknown exception";
  }
  // 'K' + result on success, 'E' + message on failure.
  std::vector<std::string> replies = all_gather_strings(group, failure ? "E" + message : "K" + result);
  std::string failed_ranks, first_message;
  for (size_t rank = 0; rank < replies.size(); ++rank) {
    if (!replies[rank].empty() && replies[rank][0] == 'K') continue;
    failed_ranks += (failed_ranks.empty() ? "" : ", ") + std::to_string(rank);
    if (first_message.empty()) first_message = replies[rank].empty() ? "(no message)" : replies[rank].substr(1);
  }
  if (failed_ranks.empty()) {
    for (std::string& reply : replies) reply.erase(0, 1);
    return replies;
  }
  if (failure) std::rethrow_exception(failure);
  throw CheckpointError(tessera::detail::concat(what, " failed on rank(s) ", failed_ranks, " of ", group.size(), ": ",
                                                first_message));
}

}  // namespace tessera::checkpoint::detail
