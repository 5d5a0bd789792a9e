// A Vision Transformer (Dosovitskiy et al., "An Image is Worth 16x16 Words") for MNIST,
// written against the API guide as a PyTorch user writes one with nn.TransformerEncoder:
//
//   patches:  Conv2d(1, dim, kernel = stride = patch)      [N, 1, 28, 28] -> [N, dim, 28/p, 28/p]
//   tokens:   flatten and transpose, a learned class token in front, learned positions added
//   encoder:  depth pre-norm TransformerEncoderLayers (GELU, batch_first)
//   head:     LayerNorm, then Linear on the class token's output -> 10 logits
//
// The class token and positions start as timm's do, trunc_normal_(std = 0.02). The encoder's
// layers are copies of one layer, as nn.TransformerEncoder's deep copies are.
#pragma once

#include <tessera/tessera.h>

namespace vit {

namespace ts = tessera;
namespace nn = tessera::nn;

struct Config {
  int64_t image_size = 28;
  int64_t patch_size = 7;  // 28 / 7 = 4: 16 patches
  int64_t dim = 64;
  int64_t depth = 4;
  int64_t heads = 4;
  int64_t mlp_dim = 128;
  double dropout = 0.0;
  int64_t classes = 10;
};

struct ViT : nn::Module {
  Config config;
  nn::Conv2d patch_embed;
  ts::Tensor cls_token, pos_embed;
  // The layer the encoder copies: not registered, as PyTorch keeps only the copies.
  nn::TransformerEncoderLayer layer;
  nn::TransformerEncoder encoder;
  nn::LayerNorm norm;
  nn::Linear head;

  explicit ViT(const Config& c)
      : config(c),
        patch_embed(1, c.dim, c.patch_size, {.stride = c.patch_size}),
        layer(c.dim, c.heads,
              {.dim_feedforward = c.mlp_dim, .dropout = c.dropout, .activation = "gelu", .batch_first = true,
               .norm_first = true}),
        encoder(layer, c.depth),
        norm(c.dim),
        head(c.dim, c.classes) {
    if (c.patch_size < 1 || c.image_size % c.patch_size != 0) {
      throw ts::ValueError(ts::str("ViT: patch_size ", c.patch_size, " does not divide image_size ", c.image_size));
    }
    const int64_t patches = (c.image_size / c.patch_size) * (c.image_size / c.patch_size);
    cls_token = deferred_parameter({1, 1, c.dim}, nn::init::zeros());
    pos_embed = deferred_parameter({1, patches + 1, c.dim}, nn::init::zeros());
    nn::init::trunc_normal_(cls_token, 0.0, 0.02);
    nn::init::trunc_normal_(pos_embed, 0.0, 0.02);
    register_parameter("cls_token", cls_token);
    register_parameter("pos_embed", pos_embed);
    register_modules({{"patch_embed", patch_embed}, {"encoder", encoder}, {"norm", norm}, {"head", head}});
  }

  // images [N, 1, 28, 28] -> logits [N, classes]
  ts::Tensor forward(ts::Tensor images) override {
    const int64_t batch = images.size(0);
    ts::Tensor x = patch_embed(images).flatten(2).transpose(1, 2);  // [N, patches, dim]
    x = ts::cat({cls_token.expand({batch, -1, -1}), x}, 1) + pos_embed;
    x = encoder(x);
    return head(norm(x.select(1, 0)));
  }
};

}  // namespace vit
