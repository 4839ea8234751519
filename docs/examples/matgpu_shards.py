#!/usr/bin/env python3
"""matgpu_shards.py - reads every shard of a matfs snapshot directory into
GPU memory (or CPU memory) as PyTorch tensors with matgpu, the next shards
loading while the current one is used.

Not for: production use as is; it shows the calls. The shards here are
taken as little-endian int32 tokens when their size allows it.

Run: python3 matgpu_shards.py /mnt/data/wiki-tokens [cpu|cuda|cuda:N]
with the matfs Python package installed (docs/guide.md), or from the source
tree with PYTHONPATH=python, which finds the build tree's libmatgpu.
"""

import sys
import time

import torch

import matgpu


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: matgpu_shards.py DIR [cpu|cuda|cuda:N]")
    folder = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) == 3 else (
        "cuda" if matgpu.device_count() else "cpu")
    total, start = 0, time.monotonic()
    loader = matgpu.Loader(folder, device=device, prefetch=2,
                           memory_budget=2 << 30)
    for i, buf in enumerate(loader):
        raw = torch.from_dlpack(buf)  # 1-D uint8 on the device, no copy
        if buf.nbytes % 4 == 0:
            tokens = torch.from_dlpack(buf.view("int32"))
            print("shard %d: %d bytes, %d tokens, max %d" % (
                i, buf.nbytes, tokens.numel(),
                int(tokens.max()) if tokens.numel() else 0))
        else:
            print("shard %d: %d bytes, byte sum %d" % (
                i, buf.nbytes, int(raw.sum())))
        total += buf.nbytes
        buf.release()  # the tensors keep the memory as long as they live
    print("%.1f MB in %.3f s on %s" % (total / 1e6, time.monotonic() - start,
                                       device))


if __name__ == "__main__":
    main()
