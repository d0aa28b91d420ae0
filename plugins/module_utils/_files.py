# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Config files on disk: read, stage a candidate next to the live file, validate it, back up, replace atomically.

A staged candidate is a temporary file in the live file's directory (or another directory of the same filesystem,
where the caller says a daemon reads every file beside it) with the live file's owner, group, mode and
extended attributes (POSIX ACLs, the SELinux label, ``user.*``; 0644 and none for a new file), so that replacing is
one ``os.replace`` that changes nothing but the text, and relative paths inside it resolve as they will. Only regular
files are read: a FIFO would block the read for ever and a device (``/dev/zero``) never ends.
Nothing here knows about container runtimes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
import time

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, ValidationError

NEW_FILE_MODE = 0o644
NEW_DIR_MODE = 0o755


# What a path that is not a regular file is, for the message that refuses it.
KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def not_regular(path, mode):
    """The error for ``path`` (links followed) that is not a regular file, of file mode ``mode``."""
    kind = next((name for test, name in KINDS if test(mode)), "not a regular file")
    return FileError("is %s, not a regular file: only a configuration file itself can be read and replaced; point the "
                     "option at the file (a link to one is fine)" % kind, path=path)


def read_text(path):
    """The UTF-8 text of ``path``, or ``None`` when it does not exist. Anything but a regular file (links followed) is
    refused before it is opened, and again on what was opened (a FIFO put there in between is opened without
    blocking, and not read)."""
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise not_regular(path, mode)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise not_regular(path, mode)
            data = handle.read()
    except (IOError, OSError) as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise FileError("cannot read: %s" % (exc.strerror or exc), path=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise FileError("line %d, column %d: not UTF-8 text (%s)" % (line, column, exc.reason), path=path)


def make_dirs(directory):
    """Create ``directory`` and its missing parents with mode 0755; returns the ones created, outermost first."""
    missing = []
    while directory and not os.path.isdir(directory):
        missing.append(directory)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    created = []
    for path in reversed(missing):
        try:
            os.mkdir(path, NEW_DIR_MODE)
            os.chmod(path, NEW_DIR_MODE)  # mkdir's mode goes through the umask
        except OSError as exc:
            remove_dirs(created)
            raise FileError("cannot create directory: %s" % (exc.strerror or exc), path=path)
        created.append(path)
    return created


def remove_dirs(created):
    """Remove directories made by :func:`make_dirs` (innermost first), when still empty."""
    for path in reversed(created):
        try:
            os.rmdir(path)
        except OSError:
            pass


class Staged(object):
    """A candidate for ``path`` written to a temporary file beside it (or in ``directory``, which must be on the same
    filesystem, for a daemon that would read a file beside it); :meth:`commit` replaces ``path`` with it."""

    def __init__(self, path, text, suffix=".tmp", directory=None, like=None):
        """``like``: the file whose owner, group and mode a new ``path`` gets (default: ``path`` itself, 0644 when
        it does not exist)."""
        self.path = path
        directory = directory or os.path.dirname(path) or "."
        try:
            fd, self.tmp_path = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=suffix, dir=directory)
        except OSError as exc:
            raise FileError("cannot create a temporary file in %s: %s" % (directory, exc.strerror or exc), path=path)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(text.encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
            _copy_ownership(like if like and not os.path.lexists(path) else path, self.tmp_path)
            _copy_xattrs(path, self.tmp_path)
        except (IOError, OSError) as exc:
            self.discard()
            raise FileError("cannot write a candidate: %s" % (exc.strerror or exc), path=path)
        except FileError:
            self.discard()
            raise

    def commit(self):
        try:
            os.replace(self.tmp_path, self.path)
        except OSError as exc:
            self.discard()
            raise FileError("cannot replace: %s" % (exc.strerror or exc), path=self.path)
        _fsync_dir(os.path.dirname(self.path))

    def discard(self):
        try:
            os.unlink(self.tmp_path)
        except OSError:
            pass


def _copy_ownership(live, candidate):
    """Give ``candidate`` the owner, group and mode of ``live`` (0644 when ``live`` does not exist)."""
    try:
        current = os.stat(live)
    except OSError:
        os.chmod(candidate, NEW_FILE_MODE)
        return
    os.chmod(candidate, stat.S_IMODE(current.st_mode))
    mine = os.stat(candidate)
    if (mine.st_uid, mine.st_gid) != (current.st_uid, current.st_gid):
        try:
            os.chown(candidate, current.st_uid, current.st_gid)
        except OSError as exc:
            raise FileError("cannot keep its owner %d:%d (%s); run as root" % (current.st_uid, current.st_gid, exc.strerror),
                            path=live)


def _copy_xattrs(live, candidate):
    """Give ``candidate`` the extended attributes of ``live`` (none when it does not exist, or where the filesystem has
    none): its POSIX ACLs (``system.posix_acl_access``), its SELinux label (``security.selinux``), ``user.*`` and the
    rest, after the mode and owner (an ACL's mask is the mode's group bits, so the pair stays as it was). One that cannot
    be copied is an error naming it: the live file is then left as it was, rather than replaced by one that a
    confined daemon may not be allowed to read."""
    if not hasattr(os, "listxattr"):
        return
    try:
        names = os.listxattr(live)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTSUP, getattr(errno, "EOPNOTSUPP", errno.ENOTSUP)):
            return
        raise FileError("cannot read its extended attributes: %s" % (exc.strerror or exc), path=live)
    for name in names:
        try:
            value = os.getxattr(live, name)
            try:
                if os.getxattr(candidate, name) == value:  # a label the new file got already (SELinux' default)
                    continue
            except OSError:
                pass
            os.setxattr(candidate, name, value)
        except OSError as exc:
            if exc.errno == getattr(errno, "ENODATA", None):  # removed in between
                continue
            raise FileError("cannot keep its extended attribute %s on the new version (%s), so it was not replaced; run "
                            "as root, or remove the attribute if it is not needed" % (name, exc.strerror or exc),
                            path=live)


def _fsync_dir(directory):
    try:
        fd = os.open(directory or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove(path):
    """Delete ``path`` (gone already is fine)."""
    try:
        os.unlink(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise FileError("cannot remove: %s" % (exc.strerror or exc), path=path)


# Where backups go by default: a directory of its own, which no container runtime reads (issue 26: a backup beside a
# CRI-O drop-in is itself a drop-in, since CRI-O reads every file under crio.conf.d). Debian's /var/backups is where
# the system keeps copies of its own files; it is created where missing (RHEL, SUSE).
BACKUP_DIR = "/var/backups/kubegpu"
BACKUP_DIR_MODE = 0o700  # configs can hold registry credentials


def backup_name(path, now=None, pid=None, directory=None):
    """Where a backup of ``path`` goes: named like ansible's ``backup_local`` (``<name>.<pid>.<YYYY-MM-DD@HH:MM:SS>~``),
    beside ``path``, or, with ``directory``, under it at ``path``'s own absolute path (``/var/backups/kubegpu`` +
    ``/etc/crio/crio.conf.d/99-nvidia.toml``), so that files of one name in two directories never meet."""
    stamp = time.strftime("%Y-%m-%d@%H:%M:%S~", time.localtime(time.time() if now is None else now))
    if directory:
        path = os.path.join(directory, os.path.abspath(path).lstrip("/"))
    return "%s.%s.%s" % (path, os.getpid() if pid is None else pid, stamp)


def backup(path, directory=None):
    """Copy ``path`` to :func:`backup_name` (its directories made 0700 where missing), keeping owner, group, mode and
    times; returns the copy's path."""
    target = backup_name(path, directory=directory)
    try:
        if directory:
            for created in make_dirs(os.path.dirname(target)):
                os.chmod(created, BACKUP_DIR_MODE)
        shutil.copy2(path, target)
        current = os.stat(path)
        os.chown(target, current.st_uid, current.st_gid)
    except (IOError, OSError) as exc:
        raise FileError("cannot back up to %s: %s" % (target, getattr(exc, "strerror", None) or exc), path=path)
    return target


def command_line(command, target):
    """The argv of a ``validate`` command: ``command`` split like a shell would, ``%s`` replaced by ``target``."""
    if "%s" not in command:
        raise FileError("validate must contain %%s where the candidate file goes: %r" % command)
    try:
        return [part.replace("%s", target) for part in shlex.split(command)]
    except ValueError as exc:
        raise FileError("validate is not a valid command line (%s): %r" % (exc, command))


def run_command(argv):
    """Run ``argv`` without a shell; returns ``(rc, stdout, stderr)``. The module passes AnsibleModule's instead."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        return 127, "", "%s: %s" % (argv[0], exc.strerror or exc)
    out, err = proc.communicate()
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def validate(argv, runner=run_command, shown=None, path=None):
    """Run a validation command; a non-zero exit raises :class:`ValidationError` with its output.

    ``shown`` is what the message calls the command (the user's ``validate`` string), ``argv`` by default.
    Returns ``stdout`` on success.
    """
    rc, out, err = runner(argv)
    if rc != 0:
        lines = [line for line in (err or out or "").strip().splitlines() if line.strip()]
        reason = lines[-1] if lines else "no output"
        raise ValidationError("validation failed (%s exited %d: %s); the live file was left as it was"
                              % (shown or " ".join(argv), rc, reason), path=path,
                              rc=rc, stdout=out, stderr=err, cmd=argv)
    return out
