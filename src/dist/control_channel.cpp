// The control channels' MPI calls (see control_channel.h): text is sent as MPI_CHAR.
#include "tessera/dist/control_channel.h"

namespace tessera::dist {

ControlChannel::ControlChannel() {
  TS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  TS_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  TS_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  TS_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

ControlChannel::~ControlChannel() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // the program finalized MPI itself: MPI may not be called any more
  for (Send& pending : sends_) {
    if (pending.request != MPI_REQUEST_NULL) MPI_Request_free(&pending.request);
  }
  if (!sends_.empty()) new std::list<Send>(std::move(sends_));  // deliberately never freed (see the header)
  MPI_Comm_free(&comm_);
}

std::optional<ControlChannel::Message> ControlChannel::receive(int tag) {
  int arrived = 0;
  MPI_Status status;
  TS_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, tag, comm_, &arrived, &status));
  if (!arrived) return std::nullopt;
  int bytes = 0;
  TS_MPI_CHECK(MPI_Get_count(&status, MPI_CHAR, &bytes));
  Message message{.source = status.MPI_SOURCE, .tag = status.MPI_TAG,
                  .text = std::string(static_cast<size_t>(bytes), '\0')};
  TS_MPI_CHECK(MPI_Recv(message.text.data(), bytes, MPI_CHAR, message.source, message.tag, comm_, MPI_STATUS_IGNORE));
  return message;
}

void ControlChannel::send(int destination, int tag, std::string text) {
  Send& pending = sends_.emplace_back();
  pending.text = std::move(text);
  const int code = MPI_Isend(pending.text.data(), static_cast<int>(pending.text.size()), MPI_CHAR, destination, tag,
                             comm_, &pending.request);
  if (code != MPI_SUCCESS) {
    sends_.pop_back();  // MPI took nothing
    detail::throw_mpi_error(code, "MPI_Isend(text, destination, tag, control channel)", __FILE__, __LINE__);
  }
}

void ControlChannel::complete_sends() {
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 1;
    if (it->request != MPI_REQUEST_NULL && MPI_Test(&it->request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 0;
    it = done ? sends_.erase(it) : std::next(it);
  }
}

void ControlChannel::wait_for_sends() {
  for (auto it = sends_.begin(); it != sends_.end(); it = sends_.erase(it)) {
    TS_MPI_CHECK(MPI_Wait(&it->request, MPI_STATUS_IGNORE));
  }
}

}  // namespace tessera::dist
