#include "tessera/nn/attention.h"

namespace tessera::nn {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, Dropout& dropout,
                                    ScaledDotProductAttentionOptions options) {
  options.dropout_p = 0;
  options.dropout_key = {};
  if (dropout.is_training() && dropout.p() > 0) {
    options.dropout_p = dropout.p();
    options.dropout_key = dropout.next_key();
  }
  return tessera::scaled_dot_product_attention(q, k, v, options);
}

}  // namespace tessera::nn
