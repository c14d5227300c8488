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


def test_a_corrupted_piece_or_one_of_another_split_is_one_line_and_nothing_unpacked(wheels: Path, tmp_path: Path,
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
    # the stash now holds pieces 1 and 3 of the first split; a flipped byte in piece 2 fails the join
    damaged = tmp_path / "damaged" / "2"
    shutil.copytree(pieces[1], damaged)
    data = bytearray((damaged / "piece").read_bytes())
    data[100] ^= 0xFF
    (damaged / "piece").write_bytes(bytes(data))
    for piece in (pieces[2], damaged):
        carry(piece, checkout)
        code = wheel_pieces.main(args)
    assert code == 2 and "SHA-256" in capsys.readouterr().err
    assert not out.exists()


def test_nothing_carried_and_nothing_stashed_says_which_folder_to_carry(tmp_path: Path, capsys) -> None:
    assert wheel_pieces.main(["gather", str(tmp_path / "none"), str(tmp_path / "stash"),
                              "--extract", str(tmp_path / "out")]) == 2
    assert "carry" in capsys.readouterr().err
