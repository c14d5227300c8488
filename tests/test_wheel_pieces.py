"""`benchmarks/wheel_pieces.py`: wheels cut into pieces here, carried one per call and joined there."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import wheel_pieces


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / "a-1.0-py3-none-any.whl").write_bytes(bytes(range(256)) * 300)
    (folder / "b-2.0-py3-none-any.whl").write_bytes(b"b" * 5000)
    return folder


def carry(piece: Path, checkout: Path) -> Path:
    """One call's carry: this piece alone in the checkout's pieces folder (the earlier ones are not sent)."""
    carried = checkout / "pieces"
    shutil.rmtree(carried, ignore_errors=True)
    shutil.copytree(piece, carried / piece.name)
    return carried


def test_pieces_carried_one_per_call_in_any_order_unpack_the_same_files(wheels: Path, tmp_path: Path) -> None:
    pieces = wheel_pieces.split(wheels, tmp_path / "pieces", mib=40_000 / 2**20)
    assert [p.name for p in pieces] == ["1", "2", "3"]
    assert all((p / "piece").stat().st_size <= 40_000 for p in pieces)
    stash, out = tmp_path / "stash", tmp_path / "out"
    checkout = tmp_path / "there"
    assert wheel_pieces.gather(carry(pieces[2], checkout), stash, out) == [1, 2]
    assert wheel_pieces.gather(carry(pieces[0], checkout), stash, out) == [2]
    assert not out.exists()
    assert wheel_pieces.gather(carry(pieces[1], checkout), stash, out) == []
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in wheels.iterdir())
    for file in wheels.iterdir():
        assert (out / file.name).read_bytes() == file.read_bytes()


def test_the_command_says_what_is_missing_and_exits_3_until_all_have_come(wheels: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert wheel_pieces.main(["split", str(wheels), str(tmp_path / "pieces"), "--mib", str(40_000 / 2**20)]) == 0
    assert "in 3 pieces" in capsys.readouterr().out
    checkout, stash, out = tmp_path / "there", tmp_path / "stash", tmp_path / "out"
    args = ["gather", str(checkout / "pieces"), str(stash), "--extract", str(out)]
    carry(tmp_path / "pieces" / "1", checkout)
    assert wheel_pieces.main(args) == wheel_pieces.INCOMPLETE
    assert "pieces 2, 3 still to carry" in capsys.readouterr().out
    for n in ("2", "3"):
        carry(tmp_path / "pieces" / n, checkout)
        code = wheel_pieces.main(args)
    assert code == 0 and "all pieces here" in capsys.readouterr().out


def test_a_piece_that_is_damaged_or_of_another_split_is_one_line_and_is_not_stashed(wheels: Path, tmp_path: Path,
                                                                                   capsys) -> None:
    pieces = wheel_pieces.split(wheels, tmp_path / "pieces", mib=40_000 / 2**20)
    checkout, stash, out = tmp_path / "there", tmp_path / "stash", tmp_path / "out"
    args = ["gather", str(checkout / "pieces"), str(stash), "--extract", str(out)]
    carry(pieces[0], checkout)
    assert wheel_pieces.main(args) == wheel_pieces.INCOMPLETE
    (wheels / "b-2.0-py3-none-any.whl").write_bytes(b"c" * 5000)
    other = wheel_pieces.split(wheels, tmp_path / "other", mib=40_000 / 2**20)
    carry(other[1], checkout)
    capsys.readouterr()
    assert wheel_pieces.main(args) == 2
    err = capsys.readouterr().err
    assert "is a piece of another split" in err and len(err.strip().splitlines()) == 1
    damaged = tmp_path / "damaged" / "2"  # piece 2 of the first split, a byte flipped on the way
    shutil.copytree(pieces[1], damaged)
    data = bytearray((damaged / "piece").read_bytes())
    data[100] ^= 0xFF
    (damaged / "piece").write_bytes(bytes(data))
    carry(damaged, checkout)
    assert wheel_pieces.main(args) == 2
    assert "is not the piece 2 its manifest names" in capsys.readouterr().err
    assert sorted(p.name for p in stash.iterdir()) == ["1", "manifest.json"] and not out.exists()
    for piece in (pieces[1], pieces[1], pieces[2]):  # carried again after the damage, once more, then the last
        carry(piece, checkout)
        code = wheel_pieces.main(args)
    assert code == 0 and sorted(p.name for p in out.iterdir()) == sorted(p.name for p in wheels.iterdir())


def test_a_stash_damaged_after_its_checks_fails_the_join_and_unpacks_nothing(wheels: Path, tmp_path: Path,
                                                                            capsys) -> None:
    pieces = wheel_pieces.split(wheels, tmp_path / "pieces", mib=40_000 / 2**20)
    checkout, stash, out = tmp_path / "there", tmp_path / "stash", tmp_path / "out"
    for piece in pieces[:2]:
        wheel_pieces.gather(carry(piece, checkout), stash, out)
    (stash / "1").write_bytes((stash / "1").read_bytes()[:-1] + b"x")
    assert wheel_pieces.main(["gather", str(carry(pieces[2], checkout)), str(stash), "--extract", str(out)]) == 2
    assert "SHA-256" in capsys.readouterr().err and not out.exists()


def test_an_earlier_splits_files_are_not_left_beside_the_unpacked_ones(wheels: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old-0.1-py3-none-any.whl").write_bytes(b"old")
    (piece,) = wheel_pieces.split(wheels, tmp_path / "pieces", mib=1)
    assert wheel_pieces.gather(carry(piece, tmp_path / "there"), tmp_path / "stash", out) == []
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in wheels.iterdir())


def test_a_tar_holding_more_than_plain_files_is_refused(tmp_path: Path, capsys) -> None:
    """A well-formed manifest over a tar whose member climbs out of the folder: nothing is written outside it."""
    import hashlib
    import io
    import json
    import tarfile

    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w") as tar:
        member = tarfile.TarInfo("../escaped.whl")
        member.size = 3
        tar.addfile(member, io.BytesIO(b"abc"))
    data = packed.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    folder = tmp_path / "there" / "pieces" / "1"
    folder.mkdir(parents=True)
    (folder / "piece").write_bytes(data)
    (folder / "manifest.json").write_text(json.dumps({"sha256": digest, "bytes": len(data), "count": 1,
                                                      "pieces": [digest], "files": ["../escaped.whl"]}))
    out = tmp_path / "deep" / "out"
    assert wheel_pieces.main(["gather", str(folder.parent), str(tmp_path / "stash"), "--extract", str(out)]) == 2
    assert "not the manifest's plain files" in capsys.readouterr().err
    assert not (tmp_path / "deep" / "escaped.whl").exists()


@pytest.mark.parametrize("layout", ["no manifest", "out of range", "nothing carried", "digests short"])
def test_a_carried_folder_that_is_no_piece_of_the_split_is_one_line(layout: str, wheels: Path, tmp_path: Path,
                                                                    capsys) -> None:
    pieces = wheel_pieces.split(wheels, tmp_path / "pieces", mib=40_000 / 2**20)
    carried = tmp_path / "there" / "pieces"
    if layout == "no manifest":
        (carried / "1").mkdir(parents=True)
        shutil.copyfile(pieces[0] / "piece", carried / "1" / "piece")
    elif layout == "out of range":
        shutil.copytree(pieces[0], carried / "9")
    elif layout == "digests short":
        import json

        shutil.copytree(pieces[0], carried / "1")
        manifest = json.loads((carried / "1" / "manifest.json").read_text())
        (carried / "1" / "manifest.json").write_text(json.dumps({**manifest, "pieces": manifest["pieces"][:1]}))
    args = ["gather", str(carried), str(tmp_path / "stash"), "--extract", str(tmp_path / "out")]
    assert wheel_pieces.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert {"no manifest": "is not a pieces manifest", "out of range": "is not one of pieces 1-3",
            "nothing carried": "no piece under", "digests short": "count 3 and 1 digests"}[layout] in err


def test_split_refuses_no_room_for_a_piece(wheels: Path, tmp_path: Path, capsys) -> None:
    assert wheel_pieces.main(["split", str(wheels), str(tmp_path / "pieces"), "--mib", "-3"]) == 2
    assert "leaves no room for a piece" in capsys.readouterr().err and not (tmp_path / "pieces").exists()
