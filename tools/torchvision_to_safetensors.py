#!/usr/bin/python3
"""Converts torchvision ResNet weights to a safetensors file that Tessera's ResNet loads.

    /usr/bin/python3 tools/torchvision_to_safetensors.py resnet18.safetensors --weights resnet18-f37072fd.pth
    /usr/bin/python3 tools/torchvision_to_safetensors.py resnet18.safetensors --pretrained   # downloads (torch hub)
    /usr/bin/python3 tools/torchvision_to_safetensors.py random.safetensors --random 0       # torchvision's init

The weights are loaded into torchvision's model first and its state_dict() is written, so
the file has exactly the names, order, dtypes and shapes Tessera's ResNet expects (older
checkpoints without batch norm's num_batches_tracked get it, as torch's loader adds it).
Then in C++:  model->load_state_dict(ts::io::load("resnet18.safetensors"));
or:           build/examples/resnet18 --init resnet18.safetensors ...
"""

import argparse
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_torch  # noqa: E402

ARCHITECTURES = {"resnet18": torchvision.models.resnet18, "resnet34": torchvision.models.resnet34}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output", help="the safetensors file to write")
    parser.add_argument("--arch", choices=sorted(ARCHITECTURES), default="resnet18")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--weights", help="a .pth state dict saved from torchvision's model")
    source.add_argument("--pretrained", action="store_true", help="torchvision's ImageNet weights (downloads)")
    source.add_argument("--random", type=int, metavar="SEED", help="torchvision's random initialisation")
    parser.add_argument("--num-classes", type=int, default=1000, help="classes of the head in --weights [1000]")
    args = parser.parse_args()

    build = ARCHITECTURES[args.arch]
    if args.pretrained:
        model = build(weights="DEFAULT")
    else:
        if args.random is not None:
            torch.manual_seed(args.random)
        model = build(num_classes=args.num_classes)
        if args.weights:
            state = torch.load(args.weights, map_location="cpu")
            model.load_state_dict(state.get("state_dict", state) if isinstance(state, dict) else state)
    tensors = {name: t.detach().contiguous() for name, t in model.state_dict().items()}
    safetensors_torch.save(tensors, args.output, metadata={"source": "torchvision " + torchvision.__version__,
                                                          "arch": args.arch})
    count = sum(t.numel() for name, t in model.named_parameters())
    print(f"wrote {args.output}: {len(tensors)} tensors, {count} parameters ({args.arch})")


if __name__ == "__main__":
    main()
