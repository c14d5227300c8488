"""Wheels too large for one device call (64 MiB travel with each, the working tree included), carried in pieces
over consecutive calls to one warm machine: mjlab's wheels are about 200 MB, Warp's alone 149 MB.

    python benchmarks/wheel_pieces.py split .whl-mjlab/wheels .whl-mjlab/pieces --mib 36     # here
    python3 benchmarks/wheel_pieces.py gather .whl-mjlab/pieces /tmp/mjlab-pieces --extract /tmp/wheels-mjlab  # there

`split` packs a folder's files into one tar and cuts it into numbered folders (`pieces/1`, `pieces/2`, ...), each
holding one piece of at most `--mib` MiB and the manifest (the tar's and every piece's SHA-256, the tar's size, the
file names). Each call carries one of them. `gather` checks each piece that arrived against the manifest, moves it
into a stash outside the checkout (it outlives the call while the machine stays warm; a piece carried twice is
stored once) and says which are still missing (exit 3); once all are there it joins them, checks the tar's SHA-256
and unpacks the files into the emptied `--extract` folder (exit 0). A piece of another split or one whose digest
differs, a folder without a manifest, or a join whose digest differs is one line and exit 2."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
PIECE = "piece"
INCOMPLETE = 3
"""`gather`'s exit status while pieces are missing: the next call carries one of them."""


class PieceError(Exception):
    """One line saying what does not fit."""


def split(source: Path, dest: Path, mib: float) -> list[Path]:
    """`source`'s files (not its folders) as one tar cut into numbered folders under `dest` (emptied first)."""
    files = sorted(p for p in source.iterdir() if p.is_file()) if source.is_dir() else []
    if not files:
        raise PieceError(f"wheel_pieces: {source} holds no files to split")
    if mib <= 0:
        raise PieceError(f"wheel_pieces: --mib {mib:g} leaves no room for a piece")
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w") as tar:
        for file in files:
            tar.add(file, arcname=file.name)
    data = packed.getvalue()
    size = max(1, int(mib * 2**20))
    pieces = [data[start:start + size] for start in range(0, len(data), size)]
    manifest = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "count": len(pieces),
                "pieces": [hashlib.sha256(piece).hexdigest() for piece in pieces], "files": [f.name for f in files]}
    if dest.exists():
        shutil.rmtree(dest)
    folders = []
    for number, piece in enumerate(pieces, 1):
        folder = dest / str(number)
        folder.mkdir(parents=True)
        (folder / PIECE).write_bytes(piece)
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
        folders.append(folder)
    return folders


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text())
        if not isinstance(manifest, dict) or not all(k in manifest for k in ("sha256", "bytes", "count", "pieces")):
            raise ValueError("missing keys")
        count, pieces = manifest["count"], manifest["pieces"]
        if not isinstance(count, int) or count < 1 or not isinstance(pieces, list) or len(pieces) != count:
            raise ValueError(f"count {count!r} and {len(pieces) if isinstance(pieces, list) else pieces!r} digests")
        return manifest
    except (OSError, ValueError) as error:
        raise PieceError(f"wheel_pieces: {path} is not a pieces manifest ({error})") from None


def stash_arrived(carried: Path, stash: Path) -> dict[str, Any]:
    """Copy every piece under `carried` into `stash` (`stash/N`, written whole or not at all), checking each against
    its split's manifest; the manifest."""
    stash.mkdir(parents=True, exist_ok=True)
    known = read_manifest(stash / MANIFEST) if (stash / MANIFEST).exists() else None
    arrived = sorted(p for p in carried.glob("*") if (p / PIECE).is_file()) if carried.is_dir() else []
    for folder in arrived:
        manifest = read_manifest(folder / MANIFEST)
        if known is None:
            known = manifest
            (stash / MANIFEST).write_text(json.dumps(manifest, indent=1))
        if manifest["sha256"] != known["sha256"]:
            raise PieceError(f"wheel_pieces: {folder} is a piece of another split (tar {manifest['sha256'][:12]}, "
                             f"the stash in {stash} holds {known['sha256'][:12]}); empty {stash} to start over")
        if not folder.name.isdigit() or not 1 <= int(folder.name) <= known["count"]:
            raise PieceError(f"wheel_pieces: {folder} is not one of pieces 1-{known['count']}")
        number = int(folder.name)
        if (stash / str(number)).is_file():
            continue  # carried again: stored when it first came, checked then
        data = (folder / PIECE).read_bytes()
        if hashlib.sha256(data).hexdigest() != known["pieces"][number - 1]:
            raise PieceError(f"wheel_pieces: {folder / PIECE} is not the piece {number} its manifest names (its "
                             "SHA-256 differs): carry it again")
        partial = stash / f"{number}.part"
        partial.write_bytes(data)
        os.replace(partial, stash / str(number))
    if known is None:
        raise PieceError(f"wheel_pieces: no piece under {carried} and none in {stash}: carry {carried}/1 first")
    return known


def gather(carried: Path, stash: Path, extract: Path) -> list[int]:
    """Stash the pieces that arrived; with all of them, join, check and unpack into `extract`. The missing pieces'
    numbers (empty once unpacked)."""
    manifest = stash_arrived(carried, stash)
    missing = [n for n in range(1, manifest["count"] + 1) if not (stash / str(n)).is_file()]
    if missing:
        return missing
    data = b"".join((stash / str(n)).read_bytes() for n in range(1, manifest["count"] + 1))
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != manifest["bytes"] or digest != manifest["sha256"]:
        raise PieceError(f"wheel_pieces: the {manifest['count']} pieces in {stash} join to {len(data):,} bytes, "
                         f"SHA-256 {digest[:12]}, not the manifest's {manifest['bytes']:,} bytes, "
                         f"{manifest['sha256'][:12]}; empty {stash} and carry them again")
    if extract.exists():
        shutil.rmtree(extract)  # no file of an earlier split beside these
    extract.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        plain = all(m.isfile() and "/" not in m.name and m.name not in ("", ".", "..") for m in members)
        if not plain or sorted(names) != sorted(manifest.get("files", names)):
            raise PieceError(f"wheel_pieces: the tar in {stash} holds {names}, not the manifest's plain files")
        tar.extractall(extract)  # plain files, checked above (its `filter` argument needs Python 3.10.12 or later)
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cut = sub.add_parser("split", help="a folder's files into numbered pieces, each one call's carry")
    cut.add_argument("source", type=Path)
    cut.add_argument("dest", type=Path)
    cut.add_argument("--mib", type=float, default=36.0, help="the most a piece holds, in MiB (default 36)")
    join = sub.add_parser("gather", help="stash the pieces that arrived; with all of them, unpack")
    join.add_argument("carried", type=Path, help="the carried pieces' folder (holding 1/, 2/, ...)")
    join.add_argument("stash", type=Path, help="where pieces wait between calls, outside the checkout")
    join.add_argument("--extract", type=Path, required=True, help="where the files go once all pieces are here")
    args = parser.parse_args(argv)
    try:
        if args.command == "split":
            folders = split(args.source, args.dest, args.mib)
            total = sum((f / PIECE).stat().st_size for f in folders)
            print(f"wheel_pieces: {total / 2**20:.1f} MiB in {len(folders)} pieces under {args.dest}; carry one "
                  f"folder per call: {', '.join(str(f) for f in folders)}")
            return 0
        missing = gather(args.carried, args.stash, args.extract)
    except PieceError as error:
        print(error, file=sys.stderr)
        return 2
    if missing:
        print(f"wheel_pieces: piece{'s' * (len(missing) > 1)} {', '.join(map(str, missing))} still to carry (each "
              f"call carries one folder, {args.carried}/N)")
        return INCOMPLETE
    print(f"wheel_pieces: all pieces here, files unpacked into {args.extract}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
