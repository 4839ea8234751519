#!/usr/bin/env python3
"""Reads text on stdin, writes one little-endian uint32 token id per word.

A word's id is its CRC-32 modulo the vocabulary size: deterministic, with no
vocabulary file, which is all the example needs.
"""
import array
import sys
import zlib


def main():
    vocab = int(sys.argv[sys.argv.index("--vocab") + 1])
    out = array.array("I")
    for line in sys.stdin.buffer:
        for word in line.split():
            out.append(zlib.crc32(word) % vocab)
    if sys.byteorder != "little":
        out.byteswap()
    sys.stdout.buffer.write(out.tobytes())


if __name__ == "__main__":
    main()
