#!/usr/bin/env python3
"""Cuts the seed corpus of the fuzz targets from a golden WAL capture.

    cut_seeds.py SEGMENT_DIR WALDUMP_TXT TAG OUT_CORPUS_DIR

SEGMENT_DIR holds the capture's 1 MiB segments (`zstd -dc wal.tar.zst | tar -x`),
WALDUMP_TXT is its `waldump.txt` (decompressed), TAG prefixes the seed names
(pg15, pg18). Writes OUT_CORPUS_DIR/{wal_stream,decode_record,pglz}/TAG-*.
The capture itself is made by crates/wal-decode/tests/data/capture.sh.
"""
import os
import re
import struct
import sys

BLCKSZ = 8192
SEG = 1 << 20


def load(segdir):
    names = sorted(n for n in os.listdir(segdir) if re.fullmatch(r"[0-9A-F]{24}", n))
    first = int(names[0][16:], 16) + (int(names[0][8:16], 16) << 8)
    buf = b"".join(open(os.path.join(segdir, n), "rb").read() for n in names)
    return first * SEG, buf


def parse_dump(path):
    recs = []
    pat = re.compile(r"rmgr: (\S+)\s+len \(rec/tot\):\s+(\d+)/\s*(\d+), tx:\s+\d+, lsn: ([0-9A-F]+)/([0-9A-F]+), prev [^,]+, desc: (\S+)(.*)")
    for line in open(path, errors="replace"):
        m = pat.match(line)
        if m:
            lsn = (int(m[4], 16) << 32) | int(m[5], 16)
            recs.append(dict(rmgr=m[1], tot=int(m[3]), lsn=lsn, op=m[6], fpw="FPW" in m[7], nblk=m[7].count("blkref")))
    return recs


def stream_seed(base, buf, start, length, seg_shift=0, chunk_seed=0, max_chunk_shift=14):
    h = bytearray(16)
    h[0] = seg_shift
    h[1] = 1 if start % BLCKSZ else 0
    h[2:4] = struct.pack("<H", chunk_seed)
    h[4] = max_chunk_shift
    h[8:16] = struct.pack("<Q", start)
    off = start - base
    return bytes(h) + buf[off:off + length]


def record_bytes(base, buf, lsn, tot):
    """The record at lsn with page headers removed (as the decoder assembles it)."""
    out = bytearray()
    pos = lsn
    while len(out) < tot:
        if pos % BLCKSZ == 0:
            pos += 40 if pos % SEG == 0 else 24
        n = min(tot - len(out), BLCKSZ - pos % BLCKSZ)
        out += buf[pos - base:pos - base + n]
        pos += n
    return bytes(out)


def images(raw):
    """(stored image bytes, hole length, bimg_info) of each block image."""
    pos, datatotal, blocks = 24, 0, []
    u16 = lambda p: struct.unpack_from("<H", raw, p)[0]
    while len(raw) - pos > datatotal:
        bid = raw[pos]; pos += 1
        if bid == 255:
            datatotal += raw[pos]; pos += 1; break
        if bid == 254:
            datatotal += struct.unpack_from("<I", raw, pos)[0]; pos += 4; break
        if bid == 253:
            pos += 2; continue
        if bid == 252:
            pos += 4; continue
        ff, dlen = raw[pos], u16(pos + 1); pos += 3
        datatotal += dlen
        img = None
        if ff & 0x10:
            blen, info = u16(pos), raw[pos + 4]; pos += 5
            compressed = info & 0x1C
            hole = 0
            if compressed and info & 1:
                hole = u16(pos); pos += 2
            elif not compressed:
                hole = BLCKSZ - blen
            datatotal += blen
            img = (blen, hole, info)
        if not ff & 0x80:
            pos += 12
        pos += 4
        blocks.append((dlen, img))
    out = []
    for dlen, img in blocks:
        if img:
            out.append((raw[pos:pos + img[0]], img[1], img[2]))
            pos += img[0]
        pos += dlen
    return out


def main():
    segdir, dump, tag, outdir = sys.argv[1:5]
    base, buf = load(segdir)
    recs = parse_dump(dump)
    for t in ("wal_stream", "decode_record", "pglz"):
        os.makedirs(os.path.join(outdir, t), exist_ok=True)

    def put(target, name, data):
        with open(os.path.join(outdir, target, f"{tag}-{name}"), "wb") as f:
            f.write(data)

    page = lambda lsn: lsn - lsn % BLCKSZ
    first = recs[0]["lsn"]
    put("wal_stream", "first-page", stream_seed(base, buf, page(first), 16384))
    put("wal_stream", "first-record-8aligned", stream_seed(base, buf, first, 16384, chunk_seed=7, max_chunk_shift=6))
    fpw = next(r for r in recs if r["fpw"] and r["tot"] > 2000)
    put("wal_stream", "fpw", stream_seed(base, buf, page(fpw["lsn"]), 32768, chunk_seed=3, max_chunk_shift=9))
    big = max(recs, key=lambda r: r["tot"])
    put("wal_stream", "inside-big-record", stream_seed(base, buf, page(big["lsn"]) + 4 * BLCKSZ, 8192))
    big_end = big["lsn"] + big["tot"]
    put("wal_stream", "big-record-end", stream_seed(base, buf, page(big_end) - BLCKSZ, 24576, chunk_seed=11, max_chunk_shift=12))
    # A record that crosses into the next segment (long page header), or
    # else the first record after a segment boundary.
    cross = next((r for r in recs if r["tot"] < 20000 and (r["lsn"] + r["tot"]) // SEG > r["lsn"] // SEG), None)
    if cross is None:
        cross = next(r for r in recs if r["lsn"] > base + SEG and r["lsn"] % SEG < BLCKSZ)
    put("wal_stream", "segment-boundary", stream_seed(base, buf, page(cross["lsn"]), 4 * BLCKSZ, chunk_seed=5, max_chunk_shift=13))
    sw = next((r for r in recs if r["rmgr"] == "XLOG" and r["op"] == "SWITCH"), None)
    if sw:
        nxt = sw["lsn"] - sw["lsn"] % SEG + SEG
        # The switch's page, then the next segment's first page (the zeroed
        # tail between is left out: feed would drop it anyway, so the seed
        # starts the second part at the right LSN via the 8-aligned form).
        put("wal_stream", "switch", stream_seed(base, buf, page(sw["lsn"]), 2 * BLCKSZ))
        put("wal_stream", "after-switch", stream_seed(base, buf, nxt, 2 * BLCKSZ))
    btree = next(r for r in recs if r["rmgr"] == "Btree" and not r["fpw"])
    put("wal_stream", "btree-64k", stream_seed(base, buf, page(btree["lsn"]), 65536, chunk_seed=99, max_chunk_shift=14))

    seen = set()
    n_img = 0
    for r in recs:
        key = (r["rmgr"], r["op"], r["fpw"], min(r["nblk"], 2))
        if key in seen or r["tot"] > 20000:
            continue
        seen.add(key)
        raw = record_bytes(base, buf, r["lsn"], r["tot"])
        put("decode_record", f"{r['rmgr']}-{r['op']}-{'fpw-' if r['fpw'] else ''}{r['lsn']:X}", raw)
        for stored, hole, info in images(raw):
            if info & 0x04 and n_img < 12:
                put("pglz", f"img-{r['lsn']:X}-{n_img}", struct.pack("<IB", BLCKSZ - hole, 1) + stored)
                n_img += 1


if __name__ == "__main__":
    main()
