"""Outputs never replace what they must not (symlinks, devices, folders), and several outputs are written all or
none (fleetplan.fileio.output_files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetplan.errors import InputError
from fleetplan.fileio import (
    atomic_path,
    check_destinations,
    output_files,
    parse_yaml,
    write_file_set,
    write_text_atomic,
)


def test_a_symlink_is_never_replaced(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("keep")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    with pytest.raises(InputError, match="symbolic link"):
        write_text_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "keep"


def test_a_device_is_never_replaced():
    with pytest.raises(InputError, match="not a regular file"):
        write_text_atomic("/dev/null", "x")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def test_a_folder_or_missing_folder_is_refused_before_any_work(tmp_path):
    with pytest.raises(InputError, match="is a folder"):
        check_destinations({"--out": tmp_path})
    with pytest.raises(InputError, match="does not exist"):
        check_destinations({"--out": tmp_path / "no" / "x.json"})
    with pytest.raises(InputError, match="name the same file"):
        check_destinations({"--out": tmp_path / "a.json", "--plot": tmp_path / "." / "a.json"})


def test_several_outputs_all_or_none_when_the_work_fails(tmp_path):
    old = tmp_path / "a.json"
    old.write_text("old")
    with pytest.raises(RuntimeError), output_files({"--out": old, "--plot": tmp_path / "b.png"}) as tmp:
        tmp["--out"].write_text("new")
        raise RuntimeError("the plot failed")
    assert old.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_several_outputs_all_or_none_when_a_move_fails(tmp_path, monkeypatch):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("old a")
    real_replace = os.replace

    def replace(src, dst):
        if str(dst) == str(b):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(InputError, match="cannot write .*b.json: No space left"), \
            output_files({"--out": a, "--csv": b}) as tmp:
        tmp["--out"].write_text("new a")
        tmp["--csv"].write_text("new b")
    # a got its old content back, b was never created, no temporary file is left.
    assert a.read_text() == "old a" and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_success_replaces_every_destination(tmp_path):
    a = tmp_path / "a.json"
    a.write_text("old")
    with output_files({"--out": a, "--plot": tmp_path / "b.png", "--xlsx": None}) as tmp:
        assert set(tmp) == {"--out", "--plot"}
        tmp["--out"].write_text("new")
        tmp["--plot"].write_text("png")
    assert a.read_text() == "new" and (tmp_path / "b.png").read_text() == "png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.png"]
    with atomic_path(tmp_path / "c.txt") as t:
        t.write_text("c")
    assert (tmp_path / "c.txt").read_text() == "c"


def test_an_output_with_another_files_suffix_is_refused(tmp_path):
    # --xlsx writes a workbook and --plot a PNG whatever the name says: a .csv name would hold an xlsx.
    with pytest.raises(InputError, match=r"--xlsx writes a \.xlsx file .* ends in '\.csv'; name it x\.xlsx"):
        check_destinations({"--xlsx": tmp_path / "x.csv"})
    with pytest.raises(InputError, match=r"--plot writes a \.png file"):
        check_destinations({"--plot": tmp_path / "p.json"})
    check_destinations({"--xlsx": tmp_path / "x.XLSX", "--plot": tmp_path / "p.png"})
    assert list(tmp_path.iterdir()) == []


def test_yaml_date_that_is_no_date_is_an_input_error():
    # YAML reads an unquoted 2025-13-45 as a date and raises ValueError (not a YAMLError); it was a traceback
    with pytest.raises(InputError) as e:
        parse_yaml("price_date: 2025-13-45\n", source="s.yaml")
    assert "YYYY-MM-DD" in str(e.value) and "month must be in 1..12" in str(e.value)


def test_file_set_into_a_folder_that_cannot_be_made_is_an_input_error(tmp_path, monkeypatch):
    # export k8s --out /sys/k8s raised PermissionError from mkdir; now the option's error, and nothing is left
    def refuse(self, *a, **k):
        raise PermissionError(1, "Operation not permitted", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(InputError) as e:
        write_file_set(tmp_path / "k8s", {"a/b.yaml": "x: 1\n"}, field="--out")
    assert e.value.field == "--out" and "cannot write in" in str(e.value)
    monkeypatch.undo()
    assert not (tmp_path / "k8s").exists()


def test_file_set_removes_an_earlier_sets_files_only_when_asked(tmp_path):
    # A smaller set into the folder of a bigger one would drop the earlier set's other file: refused (nothing
    # written or removed) unless prune is asked for, naming the file and the flag.
    root = tmp_path / "k8s"
    assert write_file_set(root, {"a.yaml": "a\n", "s/b.yaml": "b\n"}, field="--out") == []
    with pytest.raises(InputError) as e:
        write_file_set(root, {"a.yaml": "new a\n"}, field="--out", prune_flag="--prune")
    assert e.value.field == "--out" and "1 file of an earlier export" in str(e.value)
    assert "s/b.yaml" in str(e.value) and "add --prune" in str(e.value)
    assert (root / "a.yaml").read_text() == "a\n" and (root / "s" / "b.yaml").read_text() == "b\n"
    assert write_file_set(root, {"a.yaml": "new a\n"}, field="--out", prune=True) == ["s/b.yaml"]
    assert (root / "a.yaml").read_text() == "new a\n" and not (root / "s").exists()


def test_replacing_a_file_keeps_its_mode_and_a_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        private = tmp_path / "plan.json"
        private.write_text("old")
        private.chmod(0o600)  # e.g. a plan with prices the user keeps private
        write_text_atomic(private, "new")
        assert private.read_text() == "new" and (private.stat().st_mode & 0o777) == 0o600
        fresh = tmp_path / "other.json"
        write_text_atomic(fresh, "x")
        assert (fresh.stat().st_mode & 0o777) == 0o644  # 0o666 less the umask 0o022
    finally:
        os.umask(old)
