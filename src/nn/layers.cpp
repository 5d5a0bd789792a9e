#include "tessera/nn/layers.h"

#include <sstream>

#include "tessera/nn/batch_scope.h"
#include "tessera/nn/activation_checkpoint.h"
#include "tessera/nn/init.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/philox.h"

namespace tessera::nn {

namespace {

std::string size2_str(Size2 s) {
  return detail::concat("(", s.h, ", ", s.w, ")");
}

// As PyTorch prints an argument that may be one number or a pair: the way it was given.
std::string size2_as_given(Size2 s) { return s.one_number ? std::to_string(s.h) : size2_str(s); }

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, const LinearOptions& options)
    : in_features_(in_features), out_features_(out_features) {
  TS_CHECK(in_features > 0 && out_features > 0, ValueError, "Linear: features must be positive, got in ",
           in_features, ", out ", out_features);
  weight = deferred_parameter({out_features, in_features}, init::kaiming_uniform(in_features));
  register_parameter("weight", weight);
  if (options.bias) {
    bias = deferred_parameter({out_features}, init::bias_uniform(in_features));
    register_parameter("bias", bias);
  }
}

Tensor Linear::forward(Tensor input) { return linear(input, weight, bias); }

std::string Linear::extra_repr() const {
  return detail::concat("in_features=", in_features_, ", out_features=", out_features_,
                        ", bias=", bias.defined() ? "True" : "False");
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, const Conv2dOptions& options)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), options_(options) {
  TS_CHECK(in_channels > 0 && out_channels > 0 && kernel_size.h > 0 && kernel_size.w > 0, ValueError,
           "Conv2d: channels and kernel size must be positive");
  int64_t fan_in = in_channels * kernel_size.h * kernel_size.w;
  weight = deferred_parameter({out_channels, in_channels, kernel_size.h, kernel_size.w}, init::kaiming_uniform(fan_in));
  register_parameter("weight", weight);
  if (options.bias) {
    bias = deferred_parameter({out_channels}, init::bias_uniform(fan_in));
    register_parameter("bias", bias);
  }
}

Tensor Conv2d::forward(Tensor input) {
  return conv2d(input, weight, bias, {.stride = options_.stride, .padding = options_.padding, .dilation = options_.dilation});
}

std::string Conv2d::extra_repr() const {
  std::ostringstream out;
  out << in_channels_ << ", " << out_channels_ << ", kernel_size=" << size2_str(kernel_size_)
      << ", stride=" << size2_str(options_.stride);
  if (!(options_.padding == Size2(0))) out << ", padding=" << size2_str(options_.padding);
  if (!(options_.dilation == Size2(1))) out << ", dilation=" << size2_str(options_.dilation);
  if (!options_.bias) out << ", bias=False";
  return out.str();
}

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv1dOptions& options)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), options_(options) {
  TS_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0, ValueError,
           "Conv1d: channels and kernel size must be positive");
  const int64_t fan_in = in_channels * kernel_size;
  weight = deferred_parameter({out_channels, in_channels, kernel_size}, init::kaiming_uniform(fan_in));
  register_parameter("weight", weight);
  if (options.bias) {
    bias = deferred_parameter({out_channels}, init::bias_uniform(fan_in));
    register_parameter("bias", bias);
  }
}

Tensor Conv1d::forward(Tensor input) {
  return conv1d(input, weight, bias,
                {.stride = options_.stride, .padding = options_.padding, .dilation = options_.dilation});
}

std::string Conv1d::extra_repr() const {
  std::ostringstream out;
  out << in_channels_ << ", " << out_channels_ << ", kernel_size=(" << kernel_size_ << ",), stride=("
      << options_.stride << ",)";
  if (options_.padding != 0) out << ", padding=(" << options_.padding << ",)";
  if (options_.dilation != 1) out << ", dilation=(" << options_.dilation << ",)";
  if (!options_.bias) out << ", bias=False";
  return out.str();
}

Dropout::Dropout(double p) : p_(p) {
  TS_CHECK(p >= 0 && p <= 1, ValueError, "Dropout: probability must be in [0, 1], got ", p);
}

DropoutKey Dropout::next_key() {
  // Inside a checkpointed call the keys of the first forward are replayed (checkpoint.h).
  return checkpointed_dropout_key([this] { return fresh_key(); });
}

DropoutKey Dropout::fresh_key() {
  const uint64_t stream = philox::stream_of(path());
  if (const BatchPosition* position = BatchScope::current()) {
    return {.seed = position->seed, .stream = stream, .step = position->step, .first_row = position->first_row};
  }
  // Outside a scope the mask comes from the default generator, as torch's dropout's does.
  return next_dropout_key(stream);
}

Tensor Dropout::forward(Tensor input) {
  if (!is_training() || p_ == 0) return input;
  return dropout(input, p_, true, next_key());
}

std::string Dropout::extra_repr() const { return detail::concat("p=", p_, ", inplace=False"); }

MaxPool2d::MaxPool2d(Size2 kernel_size, const MaxPool2dOptions& options)
    : kernel_size_(kernel_size), stride_(options.stride.value_or(kernel_size)), padding_(options.padding) {}

std::string MaxPool2d::extra_repr() const {
  return detail::concat("kernel_size=", size2_as_given(kernel_size_), ", stride=", size2_as_given(stride_),
                        ", padding=", size2_as_given(padding_), ", dilation=1, ceil_mode=False");
}

AvgPool2d::AvgPool2d(Size2 kernel_size, const AvgPool2dModuleOptions& options)
    : kernel_size_(kernel_size), stride_(options.stride.value_or(kernel_size)), options_(options) {}

Tensor AvgPool2d::forward(Tensor input) {
  return avg_pool2d(input, kernel_size_, stride_, options_.padding,
                    {.count_include_pad = options_.count_include_pad, .divisor_override = options_.divisor_override});
}

std::string AvgPool2d::extra_repr() const {
  return detail::concat("kernel_size=", size2_as_given(kernel_size_), ", stride=", size2_as_given(stride_),
                        ", padding=", size2_as_given(options_.padding));
}

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + size2_as_given(output_size_); }

BatchNorm::BatchNorm(const char* layer, const char* input_shape, int64_t min_rank, int64_t max_rank,
                     int64_t num_features, const BatchNormOptions& options)
    : layer_(layer), input_shape_(input_shape), min_rank_(min_rank), max_rank_(max_rank),
      num_features_(num_features), options_(options) {
  TS_CHECK(num_features > 0, ValueError, layer, ": num_features must be positive, got ", num_features);
  TS_CHECK(options.eps >= 0, ValueError, layer, ": eps must be non-negative, got ", options.eps);
  TS_CHECK(!options.momentum || (*options.momentum >= 0 && *options.momentum <= 1), ValueError, layer,
           ": momentum must be in [0, 1], got ", options.momentum.value_or(0));
  if (options.affine) {
    weight = deferred_parameter({num_features}, init::ones());
    register_parameter("weight", weight);
    bias = deferred_parameter({num_features}, init::zeros());
    register_parameter("bias", bias);
  }
  if (options.track_running_stats) {
    running_mean = zeros({num_features});
    running_var = ones({num_features});
    num_batches_tracked = zeros({}, {.dtype = DType::i64});
    register_buffer("running_mean", running_mean);
    register_buffer("running_var", running_var);
    register_buffer("num_batches_tracked", num_batches_tracked);
  }
}

void BatchNorm::reset_running_stats() {
  if (!options_.track_running_stats) return;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

Tensor BatchNorm::forward(Tensor input) {
  TS_CHECK(input.defined() && input.dim() >= min_rank_ && input.dim() <= max_rank_, ShapeError, layer_, " '", path(),
           "': expected an input ", input_shape_, " with C = ", num_features_, ", got ",
           input.defined() ? shape_str(input.sizes()) : "an undefined tensor");
  TS_CHECK(input.size(1) == num_features_, ShapeError, layer_, " '", path(), "': expected ", num_features_,
           " channels, got input of shape ", shape_str(input.sizes()));
  const bool tracking = options_.track_running_stats;
  // A checkpointed call's recomputation (checkpoint.h) normalises as its first forward did,
  // from the batch, and leaves the running statistics that forward updated alone.
  const bool update = tracking && is_training() && !is_recomputing();
  double factor = 0.0;
  if (update) {
    num_batches_tracked.add_(1.0);
    factor = options_.momentum ? *options_.momentum : 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
  }
  // As PyTorch: eval without running statistics normalises with the batch's own.
  const bool use_batch_stats = is_training() || !tracking;
  const bool pass_statistics = tracking && (update || !is_training());
  return batch_norm(input, pass_statistics ? running_mean : Tensor(), pass_statistics ? running_var : Tensor(), weight,
                    bias, use_batch_stats, factor, options_.eps);
}

std::string BatchNorm::extra_repr() const {
  std::ostringstream out;
  out << num_features_ << ", eps=" << options_.eps << ", momentum=";
  if (options_.momentum) {
    out << *options_.momentum;
  } else {
    out << "None";
  }
  out << ", affine=" << (options_.affine ? "True" : "False")
      << ", track_running_stats=" << (options_.track_running_stats ? "True" : "False");
  return out.str();
}

std::string Flatten::extra_repr() const { return detail::concat("start_dim=", start_dim_, ", end_dim=", end_dim_); }

}  // namespace tessera::nn
