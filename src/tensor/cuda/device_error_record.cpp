#include "tessera/tensor/cuda/device_error_record.h"

#include "tessera/tensor/error.h"
#include "tessera/tensor/index_errors.h"

namespace tessera::cuda {

void throw_device_error(const DeviceErrorRecord& record, const DeviceErrorContext* context) {
  const int64_t* v = record.values;
  switch (static_cast<DeviceErrorCode>(record.code)) {
    case DeviceErrorCode::nll_loss_target:
      throw IndexError(detail::concat("nll_loss: target ", v[0], " at position ", v[1], " is out of range for ", v[2],
                                      " classes"));
    case DeviceErrorCode::embedding_index:
      throw IndexError(detail::concat(context != nullptr ? context->op : std::string("embedding"), ": index ", v[0],
                                      " at position ", v[1], " of indices ",
                                      context != nullptr ? shape_str(context->index_shape) : std::string("(shape unknown)"),
                                      " is out of range for ", v[2], " embeddings (valid: 0 to ", v[2] - 1, ")"));
    case DeviceErrorCode::index_out_of_range:
      if (context != nullptr) native::throw_index_out_of_range(context->op.c_str(), v[0], v[1], context->dim, v[2], context->self_shape);
      throw IndexError(detail::concat("index ", v[0], " at position ", v[1], " is out of range for a dim of size ", v[2],
                                      " (the op's context is gone)"));
    case DeviceErrorCode::gather_index:
      if (context != nullptr) {
        native::throw_gather_index_out_of_range(context->op.c_str(), v[0], v[1], context->index_shape, context->dim, v[2],
                                                context->self_shape);
      }
      throw IndexError(detail::concat("index ", v[0], " at element ", v[1], " of a gather's index is out of range for a dim of size ",
                                      v[2], " (the op's context is gone)"));
    case DeviceErrorCode::none: break;
  }
  throw Error(detail::concat("a CUDA kernel reported error code ", record.code, " (values ", v[0], ", ", v[1], ", ",
                             v[2], "), which this build of Tessera does not know"));
}

}  // namespace tessera::cuda
