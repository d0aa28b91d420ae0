# SPDX-License-Identifier: GPL-3.0-or-later
"""Reading, staging beside the live file, validating, backing up and replacing config files."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re
import stat
import sys
import threading

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files


def test_read_text(tmp_path):
    path = tmp_path / "a.json"
    assert _files.read_text(str(path)) is None
    path.write_bytes("{\"é\": 1}\n".encode("utf-8"))
    assert _files.read_text(str(path)) == "{\"é\": 1}\n"


def test_read_text_refuses_a_directory_and_bad_utf8(tmp_path):
    with pytest.raises(_files.FileError, match="is a directory, not a regular file"):
        _files.read_text(str(tmp_path))
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'a = 1\nb = "\xff"\n')
    with pytest.raises(_files.FileError) as info:
        _files.read_text(str(bad))
    assert "line 2, column 6: not UTF-8" in str(info.value) and str(bad) in str(info.value)


def read_within(path, seconds=10):
    """read_text(path)'s outcome (text or exception); fails the test instead of hanging when it blocks."""
    outcome = []

    def read():
        try:
            outcome.append(_files.read_text(path))
        except Exception as exc:  # pylint: disable=broad-except
            outcome.append(exc)
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "reading %s blocked for %ss" % (path, seconds)
    return outcome[0]


@pytest.mark.parametrize("make, kind", [
    (os.mkfifo, "a FIFO (named pipe)"),
    (lambda path: os.symlink("/dev/zero", path), "a character device"),
])
def test_read_text_refuses_what_is_not_a_regular_file_without_blocking(tmp_path, make, kind):
    path = str(tmp_path / "daemon.json")
    make(path)
    error = read_within(path)
    assert isinstance(error, _files.FileError), error
    assert str(error) == ("%s: is %s, not a regular file: only a configuration file itself can be read and replaced; "
                          "point the option at the file (a link to one is fine)" % (path, kind))


def test_read_text_checks_what_it_opened_too(tmp_path, monkeypatch):
    """A regular file replaced by a FIFO between the check and the open: the open does not block, the read refuses."""
    path = str(tmp_path / "config.toml")
    os.mkfifo(path)
    real_stat = os.stat
    monkeypatch.setattr(_files.os, "stat", lambda p, *a, **k: os.lstat(__file__) if p == path else real_stat(p, *a, **k))
    error = read_within(path)
    assert isinstance(error, _files.FileError) and "is a FIFO (named pipe), not a regular file" in str(error)


def test_read_text_follows_a_link_to_a_regular_file(tmp_path):
    (tmp_path / "real.json").write_text("{}\n")
    os.symlink("real.json", str(tmp_path / "daemon.json"))
    assert _files.read_text(str(tmp_path / "daemon.json")) == "{}\n"


def _set_user_xattr(path, name, value):
    """Set a user.* extended attribute, or skip the test saying why the filesystem refuses it."""
    try:
        os.setxattr(path, name, value)
    except (AttributeError, OSError) as exc:
        pytest.skip("the filesystem of %s refuses user.* extended attributes (%s)" % (path, getattr(exc, "strerror", exc)))


def test_staged_keeps_extended_attributes(tmp_path):
    live = tmp_path / "daemon.json"
    live.write_text("old\n")
    _set_user_xattr(str(live), "user.kubegpu.test", b"kept")
    _set_user_xattr(str(live), "user.other", b"")
    _files.Staged(str(live), "new\n").commit()
    assert live.read_text() == "new\n"
    assert os.getxattr(str(live), "user.kubegpu.test") == b"kept" and os.getxattr(str(live), "user.other") == b""
    fresh = tmp_path / "new.json"
    _files.Staged(str(fresh), "x\n").commit()  # a new file: nothing to copy, nothing fails
    assert not [n for n in os.listxattr(str(fresh)) if n.startswith("user.")]


def test_an_extended_attribute_that_cannot_be_kept_leaves_the_live_file(tmp_path, monkeypatch):
    live = tmp_path / "config.toml"
    live.write_text("x = 1\n")
    _set_user_xattr(str(live), "user.kubegpu.test", b"kept")

    def refuse(path, name, value):
        raise OSError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(_files.os, "setxattr", refuse)
    with pytest.raises(_files.FileError) as info:
        _files.Staged(str(live), "x = 2\n")
    assert str(info.value) == ("%s: cannot keep its extended attribute user.kubegpu.test on the new version (Operation not "
                               "permitted), so it was not replaced; run as root, or remove the attribute if it is not "
                               "needed" % live)
    assert live.read_text() == "x = 1\n" and sorted(os.listdir(str(tmp_path))) == ["config.toml"]


def test_staged_keeps_owner_group_and_mode_and_commits_atomically(tmp_path):
    live = tmp_path / "daemon.json"
    live.write_text("old\n")
    os.chmod(str(live), 0o600)
    inode = os.stat(str(live)).st_ino
    staged = _files.Staged(str(live), "new\n")
    assert os.path.dirname(staged.tmp_path) == str(tmp_path) and live.read_text() == "old\n"
    assert stat.S_IMODE(os.stat(staged.tmp_path).st_mode) == 0o600
    staged.commit()
    assert live.read_text() == "new\n" and stat.S_IMODE(os.stat(str(live)).st_mode) == 0o600
    assert os.stat(str(live)).st_ino != inode  # replaced, not rewritten in place
    assert sorted(os.listdir(str(tmp_path))) == ["daemon.json"]


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_staged_keeps_a_foreign_owner(tmp_path):
    live = tmp_path / "config.toml"
    live.write_text("x = 1\n")
    os.chown(str(live), 1234, 4321)
    _files.Staged(str(live), "x = 2\n").commit()
    assert (os.stat(str(live)).st_uid, os.stat(str(live)).st_gid) == (1234, 4321)


def test_a_new_file_is_0644_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        _files.Staged(str(tmp_path / "new.toml"), "x = 1\n").commit()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(str(tmp_path / "new.toml")).st_mode) == 0o644


def test_discard_leaves_nothing(tmp_path):
    staged = _files.Staged(str(tmp_path / "a"), "x")
    staged.discard()
    assert os.listdir(str(tmp_path)) == []


def test_make_dirs_and_remove_dirs(tmp_path):
    old = os.umask(0o077)
    try:
        created = _files.make_dirs(str(tmp_path / "etc" / "containerd" / "conf.d"))
    finally:
        os.umask(old)
    assert created == [str(tmp_path / "etc"), str(tmp_path / "etc" / "containerd"), str(tmp_path / "etc" / "containerd" / "conf.d")]
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0o755 for p in created)
    assert _files.make_dirs(str(tmp_path / "etc")) == []
    _files.remove_dirs(created)
    assert os.listdir(str(tmp_path)) == []


def test_backup_is_named_like_ansibles_and_keeps_mode(tmp_path):
    live = tmp_path / "config.toml"
    live.write_text("version = 2\n")
    os.chmod(str(live), 0o640)
    copy = _files.backup(str(live))
    assert re.match(re.escape(str(live)) + r"\.\d+\.\d{4}-\d\d-\d\d@\d\d:\d\d:\d\d~$", copy)
    assert open(copy).read() == "version = 2\n" and stat.S_IMODE(os.stat(copy).st_mode) == 0o640
    assert _files.backup_name("/x", now=0, pid=7).startswith("/x.7.19")


def test_remove(tmp_path):
    path = tmp_path / "99-nvidia.toml"
    path.write_text("")
    _files.remove(str(path))
    _files.remove(str(path))  # gone already: fine
    assert not path.exists()


@pytest.mark.parametrize("command, argv", [
    ("containerd --config %s config dump", ["containerd", "--config", "/tmp/a b", "config", "dump"]),
    ("dockerd --validate --config-file=%s", ["dockerd", "--validate", "--config-file=/tmp/a b"]),
    ("sh -c 'test -s \"$0\"' %s", ["sh", "-c", 'test -s "$0"', "/tmp/a b"]),
])
def test_command_line(command, argv):
    assert _files.command_line(command, "/tmp/a b") == argv


def test_command_line_needs_the_placeholder_and_balanced_quotes():
    with pytest.raises(_files.FileError, match="must contain %s"):
        _files.command_line("containerd config dump", "/x")
    with pytest.raises(_files.FileError, match="not a valid command line"):
        _files.command_line("sh -c 'oops %s", "/x")


def test_validate_runs_the_command_and_reports_its_last_words(tmp_path):
    good = [sys.executable, "-c", "import sys; print(open(sys.argv[1]).read())", str(tmp_path / "f")]
    (tmp_path / "f").write_text("hello")
    assert _files.validate(good).strip() == "hello"
    bad = [sys.executable, "-c", "import sys; sys.stderr.write('line 1\\nfailed to load TOML: (3, 2)\\n'); sys.exit(3)"]
    with pytest.raises(_files.ValidationError) as info:
        _files.validate(bad, shown="check %s", path="/etc/x.toml")
    assert str(info.value).startswith("/etc/x.toml: validation failed (check %s exited 3: failed to load TOML: (3, 2))")
    assert info.value.details["rc"] == 3 and "line 1" in info.value.details["stderr"]


def test_run_command_reports_a_missing_program():
    rc, _out, err = _files.run_command(["/nonexistent/validator", "x"])
    assert rc == 127 and "/nonexistent/validator" in err
