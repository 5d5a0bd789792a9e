#!/usr/bin/python3
"""Writes tests/data/images/*: small PNG and JPEG files, and what torchvision makes of them.

The images are patterns (smooth ramps, a diagonal edge, hashed noise) in several PNG modes
(RGB, grey, palette with transparency, RGBA, grey+alpha, 1-bit)
and JPEG kinds (baseline 4:2:0, 4:4:4, progressive, grey), saved by PIL. For each file,
image_reference.safetensors holds
  "<file>/decoded"        uint8 [H, W, 3]: Image.open(file).convert("RGB"), torchvision's loader
and for each transform case,
  "<file>/<case>"         uint8 [H, W, 3] after that torchvision transform on the PIL image,
  "<file>/pipeline"       float32 [3, 32, 32]: Compose([Resize(36), CenterCrop(32), ToTensor(),
                          Normalize(ImageNet mean, std)]).
The C++ test decodes the same files with libpng / libjpeg-turbo and applies Tessera's
transforms; it expects every byte and float to be equal.

Run with Debian's python3-torchvision and python3-pil: /usr/bin/python3 tests/data/make_image_reference.py
"""

import os
import sys

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGES = os.path.join(HERE, "images")
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import safetensors_torch  # noqa: E402

# name -> torchvision transform on a PIL image (its output is a PIL image).
CASES = {
    "resize_24": T.Resize(24),                    # shorter side down by a non-integer factor
    "resize_56": T.Resize(56),                    # upsampling (and downsampling for the larger images)
    "resize_17x29": T.Resize((17, 29)),           # both sides given, aspect ratio changed
    "resize_40_crop_32": T.Compose([T.Resize(40), T.CenterCrop(32)]),
    "crop_60": T.CenterCrop(60),                  # larger than the image: zero padding
    "crop_11x20": T.CenterCrop((11, 20)),         # odd margins: round half to even
    "crop_12x21": T.CenterCrop((12, 21)),
    "hflip": T.RandomHorizontalFlip(p=1.0),
}
PIPELINE = T.Compose([T.Resize(36), T.CenterCrop(32), T.ToTensor(),
                      T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


def pattern(height, width, seed):
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    h = (np.arange(height * width, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(seed)) % np.uint64(1 << 32)
    noise = ((h >> np.uint64(13)) % np.uint64(64)).reshape(height, width).astype(np.float64) - 32
    r = 255 * x / max(width - 1, 1)
    g = 255 * y / max(height - 1, 1)
    b = np.where(x * height > y * width, 220.0, 30.0)
    rgb = np.stack([r, g, b], axis=-1) + noise[..., None]
    return np.clip(rgb, 0, 255).astype(np.uint8)


def make_images():
    os.makedirs(IMAGES, exist_ok=True)
    rgb = Image.fromarray(pattern(41, 57, 1), "RGB")
    files = {}
    rgb.save(os.path.join(IMAGES, "rgb.png")); files["rgb.png"] = None
    Image.fromarray(pattern(50, 38, 2), "RGB").convert("L").save(os.path.join(IMAGES, "grey.png")); files["grey.png"] = None
    palette = Image.fromarray(pattern(33, 45, 3), "RGB").quantize(colors=37)
    palette.info["transparency"] = 5
    palette.save(os.path.join(IMAGES, "palette.png"), transparency=5); files["palette.png"] = None
    rgba = Image.fromarray(pattern(29, 31, 4), "RGB").convert("RGBA")
    alpha = Image.fromarray((pattern(29, 31, 5)[..., 0]), "L")
    rgba.putalpha(alpha)
    rgba.save(os.path.join(IMAGES, "rgba.png")); files["rgba.png"] = None
    Image.fromarray(pattern(27, 35, 6), "RGB").convert("LA").save(os.path.join(IMAGES, "grey_alpha.png")); files["grey_alpha.png"] = None
    Image.fromarray(pattern(26, 40, 7), "RGB").convert("1").save(os.path.join(IMAGES, "bilevel.png")); files["bilevel.png"] = None
    big = Image.fromarray(pattern(64, 80, 8), "RGB")
    big.save(os.path.join(IMAGES, "photo.jpg"), quality=90); files["photo.jpg"] = None
    big.save(os.path.join(IMAGES, "photo_444.jpg"), quality=95, subsampling=0); files["photo_444.jpg"] = None
    big.save(os.path.join(IMAGES, "progressive.jpg"), quality=85, progressive=True); files["progressive.jpg"] = None
    big.convert("L").save(os.path.join(IMAGES, "grey.jpg"), quality=90); files["grey.jpg"] = None
    return sorted(files)


def main():
    out = {}
    names = make_images()
    for name in names:
        image = Image.open(os.path.join(IMAGES, name)).convert("RGB")  # torchvision's pil_loader
        out[f"{name}/decoded"] = torch.from_numpy(np.asarray(image).copy())
        for case, transform in CASES.items():
            out[f"{name}/{case}"] = torch.from_numpy(np.asarray(transform(image)).copy())
        out[f"{name}/pipeline"] = PIPELINE(image)
    safetensors_torch.save(out, os.path.join(IMAGES, "image_reference.safetensors"),
                           metadata={"torchvision": torchvision.__version__, "pillow": Image.__version__,
                                     "files": ",".join(names), "cases": ",".join(CASES)})
    total = sum(os.path.getsize(os.path.join(IMAGES, f)) for f in os.listdir(IMAGES))
    print(f"wrote {len(names)} images and {len(out)} reference tensors to {IMAGES} ({total} bytes)")


if __name__ == "__main__":
    main()
