#!/usr/bin/python3
"""Writes tests/nn/mha_reference.safetensors: nn.MultiheadAttention, nn.TransformerEncoderLayer,
nn.TransformerEncoder, nn.TransformerDecoderLayer and nn.TransformerDecoder in PyTorch 1.13,
for tests/nn/test_multihead_attention.cpp; and tests/nn/mha_extra_keys_reference.safetensors,
MultiheadAttention with add_bias_kv and add_zero_attn (the same entries).

Every case builds its module with a fixed seed (float64 unless the case says float32),
moves LayerNorm's affine parameters away from 1 and 0 and the zero-initialised biases away
from 0 (so that their gradients matter), runs forward in training mode with dropout 0 (no
fast path, as the gradients are wanted) and backpropagates fixed standard normal upstream
gradients from the output and, where returned, the attention weights. Entries, under
"<case>/": "state/<state_dict key>", "input/<name>" (query, key, value; src; tgt, memory),
"mask/<name>" (bool or float, as the case passes it), "grad_output", "grad_weights",
"output", "weights", "grad/input/<name>" and "grad/<parameter>". The case table (options
and which masks each case passes) is in the file's metadata as JSON; the C++ test writes
the same table out.

Run with Debian's python3-torch (CPU): /usr/bin/python3 tests/nn/make_mha_reference.py
"""

import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "golden"))
import golden_file  # noqa: E402

OUTPUT = os.path.join(HERE, "mha_reference.safetensors")
OUTPUT_EXTRA_KEYS = os.path.join(HERE, "mha_extra_keys_reference.safetensors")
E, H, L, S, N, FF = 16, 4, 5, 7, 3, 32


def perturb(module, generator):
    """LayerNorm weights near 1, every bias and LayerNorm shift small but nonzero."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias") or (name.split(".")[-2].startswith("norm") if "." in name else False):
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p.dtype))


def padding_mask(lengths, total):
    """[N, total] bool, true at the padded positions (PyTorch's convention: not allowed)."""
    return torch.arange(total).view(1, total) >= torch.tensor(lengths).view(-1, 1)


def causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).triu(1)


def randn(generator, dtype, *shape):
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)


def record(tensors, case, module, inputs, masks, outputs, generator):
    """Backpropagates fixed upstream gradients from outputs (output[, weights]) and stores the case."""
    out = outputs[0]
    grads = [randn(generator, out.dtype, *out.shape)]
    tensors[f"{case}/grad_output"] = grads[0]
    tensors[f"{case}/output"] = out.detach().clone()
    if len(outputs) > 1 and outputs[1] is not None:
        weights = outputs[1]
        grads.append(randn(generator, weights.dtype, *weights.shape))
        tensors[f"{case}/grad_weights"] = grads[1]
        tensors[f"{case}/weights"] = weights.detach().clone()
    torch.autograd.backward([t for t in outputs if t is not None], grads)
    for k, v in module.state_dict().items():
        tensors[f"{case}/state/{k}"] = v.detach().clone()
    for k, v in inputs.items():
        tensors[f"{case}/input/{k}"] = v.detach().clone()
        tensors[f"{case}/grad/input/{k}"] = v.grad.clone()
    for k, v in masks.items():
        tensors[f"{case}/mask/{k}"] = v.clone()
    for k, p in module.named_parameters():
        tensors[f"{case}/grad/{k}"] = p.grad.clone()


def leaf(t):
    return t.clone().requires_grad_()


def mha_case(tensors, table, case, seed, dtype=torch.float64, batch_first=False, self_attention=True,
             key_is_value=True, unbatched=False, bias=True, kdim=None, vdim=None, masks=None,
             need_weights=True, average=True, add_bias_kv=False, add_zero_attn=False):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    mha = nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first, kdim=kdim, vdim=vdim,
                                add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn).to(dtype)
    perturb(mha, g)

    def shaped(T, features):
        if unbatched:
            return randn(g, dtype, T, features)
        return randn(g, dtype, N, T, features) if batch_first else randn(g, dtype, T, N, features)

    inputs = {"query": leaf(shaped(L, E))}
    if self_attention:
        query = key = value = inputs["query"]
    else:
        inputs["key"] = leaf(shaped(S, kdim or E))
        if key_is_value:
            value = inputs["key"]
        else:
            inputs["value"] = leaf(shaped(S, vdim or E))
            value = inputs["value"]
        query, key = inputs["query"], inputs["key"]
    T = L if self_attention else S
    masks = {k: v(g, T, dtype) for k, v in (masks or {}).items()}
    out, weights = mha(query, key, value, need_weights=need_weights, average_attn_weights=average, **masks)
    record(tensors, case, mha, inputs, masks, (out, weights), g)
    entry = {"case": case, "module": "MultiheadAttention", "dtype": str(dtype), "batch_first": batch_first,
             "inputs": list(inputs), "masks": list(masks), "need_weights": need_weights,
             "average_attn_weights": average, "bias": bias, "kdim": kdim, "vdim": vdim}
    # Only where set, so that the older cases' table entries stay as they were.
    if add_bias_kv:
        entry["add_bias_kv"] = True
    if add_zero_attn:
        entry["add_zero_attn"] = True
    table.append(entry)


# Mask builders: (generator, source length, dtype) -> mask.
def kpm(g, T, dtype):
    return padding_mask([T, T - 2, T - 3][:N], T)


def kpm_unbatched(g, T, dtype):
    return padding_mask([T - 2], T)[0]


def float_mask_2d(g, T, dtype):
    return randn(g, dtype, L, T)


def float_mask_3d(g, T, dtype):
    return randn(g, dtype, N * H, L, T)


def bool_causal(g, T, dtype):
    return causal_mask(T)


def encoder_layer_case(tensors, table, case, seed, norm_first, activation, batch_first, masks):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=FF, dropout=0.0, activation=activation,
                                       batch_first=batch_first, norm_first=norm_first).double()
    perturb(layer, g)
    src = leaf(randn(g, torch.float64, *((N, L, E) if batch_first else (L, N, E))))
    mask_values = {k: v(g, L, torch.float64) for k, v in masks.items()}
    out = layer(src, **mask_values)
    record(tensors, case, layer, {"src": src}, mask_values, (out,), g)
    table.append({"case": case, "module": "TransformerEncoderLayer", "norm_first": norm_first,
                  "activation": activation, "batch_first": batch_first, "masks": list(masks)})


def encoder_case(tensors, table, case, seed):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=FF, dropout=0.0, activation="gelu", batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(E), enable_nested_tensor=False).double()
    perturb(encoder, g)
    with torch.no_grad():  # the clones start equal; make every layer its own
        for p in encoder.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    src = leaf(randn(g, torch.float64, N, L, E))
    masks = {"src_key_padding_mask": kpm(g, L, torch.float64)}
    out = encoder(src, **masks)
    record(tensors, case, encoder, {"src": src}, masks, (out,), g)
    table.append({"case": case, "module": "TransformerEncoder", "num_layers": 2, "norm": "LayerNorm",
                  "activation": "gelu", "batch_first": True, "masks": list(masks)})


def decoder_inputs(g, batch_first, masks):
    """A decoder's tgt and memory leaves and the masks named in `masks`, drawn from g in order."""
    tgt = leaf(randn(g, torch.float64, *((N, L, E) if batch_first else (L, N, E))))
    memory = leaf(randn(g, torch.float64, *((N, S, E) if batch_first else (S, N, E))))
    builders = {
        "tgt_mask": lambda: causal_mask(L),
        "memory_mask": lambda: randn(g, torch.float64, L, S),
        "tgt_key_padding_mask": lambda: padding_mask([L, L - 1, L - 2], L),
        "memory_key_padding_mask": lambda: padding_mask([S - 3, S, S - 1], S),
    }
    return tgt, memory, {k: builders[k]() for k in masks}


def decoder_layer_case(tensors, table, case, seed, norm_first, activation, batch_first, masks):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    layer = nn.TransformerDecoderLayer(E, H, dim_feedforward=FF, dropout=0.0, activation=activation,
                                       batch_first=batch_first, norm_first=norm_first).double()
    perturb(layer, g)
    tgt, memory, mask_values = decoder_inputs(g, batch_first, masks)
    out = layer(tgt, memory, **mask_values)
    record(tensors, case, layer, {"tgt": tgt, "memory": memory}, mask_values, (out,), g)
    table.append({"case": case, "module": "TransformerDecoderLayer", "norm_first": norm_first,
                  "activation": activation, "batch_first": batch_first, "masks": list(masks)})


def decoder_case(tensors, table, case, seed, num_layers, norm, norm_first, activation, batch_first, masks):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    layer = nn.TransformerDecoderLayer(E, H, dim_feedforward=FF, dropout=0.0, activation=activation,
                                       batch_first=batch_first, norm_first=norm_first)
    decoder = nn.TransformerDecoder(layer, num_layers, norm=nn.LayerNorm(E) if norm else None).double()
    perturb(decoder, g)
    with torch.no_grad():  # the clones start equal; make every layer its own
        for p in decoder.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    tgt, memory, mask_values = decoder_inputs(g, batch_first, masks)
    out = decoder(tgt, memory, **mask_values)
    record(tensors, case, decoder, {"tgt": tgt, "memory": memory}, mask_values, (out,), g)
    table.append({"case": case, "module": "TransformerDecoder", "num_layers": num_layers,
                  "norm": "LayerNorm" if norm else None, "norm_first": norm_first, "activation": activation,
                  "batch_first": batch_first, "masks": list(masks)})


def main():
    golden_file.use_one_deterministic_thread()
    tensors, table = {}, []
    mha_case(tensors, table, "mha_seq_first_padding", 1, masks={"key_padding_mask": kpm})
    mha_case(tensors, table, "mha_seq_first_padding_f32", 1, dtype=torch.float32, masks={"key_padding_mask": kpm})
    mha_case(tensors, table, "mha_batch_first_float_mask", 2, batch_first=True, self_attention=False,
             key_is_value=False, masks={"attn_mask": float_mask_2d}, average=False)
    mha_case(tensors, table, "mha_batch_first_causal_no_weights", 3, batch_first=True,
             masks={"attn_mask": bool_causal}, need_weights=False)
    mha_case(tensors, table, "mha_cross_3d_mask_padding", 4, self_attention=False,
             masks={"attn_mask": float_mask_3d, "key_padding_mask": kpm})
    mha_case(tensors, table, "mha_causal_padding_no_weights", 5, masks={"attn_mask": bool_causal,
                                                                       "key_padding_mask": kpm}, need_weights=False)
    mha_case(tensors, table, "mha_unbatched", 6, unbatched=True, masks={"key_padding_mask": kpm_unbatched},
             average=False)
    mha_case(tensors, table, "mha_kdim_vdim", 7, batch_first=True, self_attention=False, key_is_value=False,
             kdim=10, vdim=12)
    mha_case(tensors, table, "mha_no_bias", 8, bias=False, need_weights=False, masks={"attn_mask": float_mask_2d})
    encoder_layer_case(tensors, table, "encoder_post_norm_relu", 10, False, "relu", False,
                       {"src_mask": float_mask_2d, "src_key_padding_mask": kpm})
    encoder_layer_case(tensors, table, "encoder_pre_norm_gelu", 11, True, "gelu", True, {"src_mask": bool_causal})
    encoder_layer_case(tensors, table, "encoder_post_norm_gelu", 12, False, "gelu", True, {})
    encoder_layer_case(tensors, table, "encoder_pre_norm_relu", 13, True, "relu", False,
                       {"src_key_padding_mask": kpm})
    encoder_case(tensors, table, "encoder_stack", 14)
    decoder_layer_case(tensors, table, "decoder_post_norm_relu", 20, False, "relu", False,
                       ["tgt_mask", "tgt_key_padding_mask", "memory_key_padding_mask"])
    decoder_layer_case(tensors, table, "decoder_pre_norm_gelu", 21, True, "gelu", True, ["tgt_mask", "memory_mask"])
    decoder_case(tensors, table, "decoder_stack_pre_norm", 22, 2, True, True, "gelu", True,
                 ["tgt_mask", "memory_key_padding_mask"])
    decoder_case(tensors, table, "decoder_stack_post_norm", 23, 3, False, False, "relu", False,
                 ["memory_mask", "tgt_key_padding_mask"])
    golden_file.write(OUTPUT, tensors, table, "tests/nn/make_mha_reference.py")

    # add_bias_kv and add_zero_attn, in a file of their own (the first is at golden_file's size limit).
    tensors, table = {}, []
    mha_case(tensors, table, "mha_bias_kv", 30, masks={"attn_mask": float_mask_2d, "key_padding_mask": kpm},
             add_bias_kv=True)
    mha_case(tensors, table, "mha_zero_attn_causal", 31, batch_first=True, masks={"attn_mask": bool_causal},
             average=False, add_zero_attn=True)
    mha_case(tensors, table, "mha_bias_kv_zero_attn_cross", 32, self_attention=False, key_is_value=False,
             kdim=10, vdim=12, masks={"attn_mask": float_mask_3d, "key_padding_mask": kpm}, need_weights=False,
             add_bias_kv=True, add_zero_attn=True)
    mha_case(tensors, table, "mha_bias_kv_unbatched", 33, unbatched=True, masks={"key_padding_mask": kpm_unbatched},
             add_bias_kv=True, add_zero_attn=True)
    golden_file.write(OUTPUT_EXTRA_KEYS, tensors, table, "tests/nn/make_mha_reference.py")


if __name__ == "__main__":
    main()
