# SPDX-License-Identifier: GPL-3.0-or-later
"""A stand-in for k0s's worker, for the tests: what k0s does with its containerd's configuration, and nothing else.

k0s (k0sproject/k0s) is not run here, so this plays the part the container_toolkit role meets, as k0s releases on
containerd 1.x do it (pkg/component/worker/containerd: component.go and configurer.go):

- at every start, while /etc/k0s/containerd.toml is missing or its first line is exactly "# k0s_managed=true", k0s
  writes that file again: the marker line, a few lines of comment, "version = 2" and an imports list. A file whose
  first line is anything else belongs to the user: k0s leaves it alone and does not read containerd.d at all;
- the CRI plugin's settings start from containerd's own defaults for that plugin (here: what the containerd that runs
  prints for "config default", its version and its "io.containerd.grpc.v1.cri" table only), with k0s's pause image;
- each file of /etc/k0s/containerd.d/*.toml, in name order, that has a plugins."io.containerd.grpc.v1.cri" table is
  applied to them as an RFC 7396 merge patch (the whole file: tables merge key by key, any other value replaces);
  a file without one is imported by containerd as it is;
- the result is /run/k0s/containerd-cri.toml, the first import of containerd.toml, the other drop-ins after it;
- then containerd runs on containerd.toml with k0s's root, state and socket, beside the system's containerd.

  k0s version                          one line, as k0s prints it
  k0s worker | controller [FLAG...]    the above, then exec containerd (flags are accepted and ignored)

Python's standard library only (3.11: tomllib reads; the small writer below writes), as the node has no tomlkit.
"""

import glob
import math
import os
import re
import subprocess
import sys
import tomllib

VERSION = "v1.32.4+k0s.0"
ETC = "/etc/k0s"
MAIN = ETC + "/containerd.toml"
DROP_INS = ETC + "/containerd.d/*.toml"
DATA_DIR = "/var/lib/k0s"
RUN_DIR = "/run/k0s"
CRI_FILE = RUN_DIR + "/containerd-cri.toml"
CONTAINERD = "/usr/bin/containerd"  # Debian's, in the node image; k0s runs the one it bundles
CRI = "io.containerd.grpc.v1.cri"
MARKER = "# k0s_managed=true"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
HEADER = MARKER + """
# Written again by k0s at every start while the line above is the first (here by the stand-in of sandbox/k0s).
# Put containerd settings in /etc/k0s/containerd.d/*.toml; to manage this file yourself, remove the first line.
"""
BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


class StandInError(Exception):
    """Why k0s would not start: the unit fails with this message."""


# --- a TOML writer for plain data: tables, strings, integers, floats, booleans, arrays of those


def toml_string(text):
    return '"%s"' % "".join(ESCAPES.get(c, c if c >= " " and c != "\x7f" else "\\u%04x" % ord(c)) for c in text)


def toml_key(key):
    return key if BARE_KEY.match(key) else toml_string(key)


def toml_value(value, where):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list) and not any(isinstance(item, dict) for item in value):
        return "[%s]" % ", ".join(toml_value(item, where) for item in value)
    raise StandInError("%s: %r cannot be written by this stand-in (plain values and tables only)"
                       % (".".join(where), value))


def toml_table(path, table, out):
    values = [(k, v) for k, v in table.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in table.items() if isinstance(v, dict)]
    indent = "  " * max(len(path) - 1, 0)
    if path and (values or not tables):  # a table with tables only needs no header of its own, an empty one does
        out.append("\n%s[%s]\n" % (indent, ".".join(toml_key(k) for k in path)))
    for key, value in values:
        out.append("%s%s%s = %s\n" % (indent, "  " if path else "", toml_key(key), toml_value(value, path + (key,))))
    for key, value in tables:
        toml_table(path + (key,), value, out)


def toml_dumps(data):
    """TOML text for data, checked by reading it back."""
    out = []
    toml_table((), data, out)
    text = "".join(out).lstrip("\n")
    if tomllib.loads(text) != data:
        raise StandInError("the TOML written does not read back as the data it was written from")
    return text


# --- what k0s does at a start


def merge_patch(target, patch):
    """RFC 7396: a table merges into a table key by key; anything else replaces (TOML has no null to delete with)."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        merged[key] = merge_patch(merged.get(key), value)
    return merged


def is_managed():
    """No containerd.toml yet, or its first line is the marker exactly (a line ending in CR counts, as in Go)."""
    try:
        with open(MAIN, "rb") as handle:
            first = handle.readline()
    except FileNotFoundError:
        return True
    return first.rstrip(b"\n").removesuffix(b"\r") == MARKER.encode()


def default_cri():
    """containerd's defaults for the CRI plugin, with k0s's pause image: version and the plugin's table only."""
    done = subprocess.run([CONTAINERD, "config", "default"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StandInError("%s config default: %s" % (CONTAINERD, done.stderr.strip()))
    defaults = tomllib.loads(done.stdout)
    cri = (defaults.get("plugins") or {}).get(CRI)
    if defaults.get("version") != 2 or not isinstance(cri, dict):
        raise StandInError("%s is not containerd 1.x (config version 2 with the %s plugin): this stand-in plays k0s on "
                           "containerd 1.x only" % (CONTAINERD, CRI))
    cri["sandbox_image"] = PAUSE_IMAGE
    return {"version": 2, "plugins": {CRI: cri}}


def read_toml(path):
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise StandInError("%s: %s" % (path, exc)) from exc


def write(path, text):
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.chmod(path + ".tmp", 0o644)
    os.replace(path + ".tmp", path)


def configure():
    """Write the CRI file and containerd.toml again, unless the user took containerd.toml over."""
    if not is_managed():
        print("k0s stand-in: %s is not managed by k0s (first line is not %r): left alone, containerd.d not read"
              % (MAIN, MARKER), file=sys.stderr)
        return
    os.makedirs(os.path.dirname(DROP_INS), mode=0o755, exist_ok=True)
    cri = default_cri()
    imports = []
    for path in sorted(glob.glob(DROP_INS)):
        data = read_toml(path)
        if isinstance((data.get("plugins") or {}).get(CRI), dict):
            cri = merge_patch(cri, data)
        else:
            imports.append(path)
    write(CRI_FILE, toml_dumps(cri))
    write(MAIN, HEADER + "\n" + toml_dumps({"version": 2, "imports": [CRI_FILE] + imports}))


def stage_containerd():
    """k0s puts its containerd in <data dir>/bin; here that is Debian's, linked."""
    staged = DATA_DIR + "/bin/containerd"
    os.makedirs(os.path.dirname(staged), mode=0o755, exist_ok=True)
    if os.path.realpath(staged) != CONTAINERD:
        if os.path.lexists(staged):
            os.remove(staged)
        os.symlink(CONTAINERD, staged)


def main(argv):
    if argv[1:2] == ["version"]:
        print(VERSION)
        return 0
    if argv[1:2] in (["worker"], ["controller"]):
        try:
            configure()
            stage_containerd()
        except StandInError as exc:
            print("k0s stand-in: %s" % exc, file=sys.stderr)
            return 1
        os.makedirs(RUN_DIR + "/containerd", mode=0o755, exist_ok=True)
        # exec: containerd is the unit's main process, so systemd sees it run, become ready or fail
        os.execv(CONTAINERD, [CONTAINERD, "--root=" + DATA_DIR + "/containerd", "--state=" + RUN_DIR + "/containerd",
                              "--address=" + RUN_DIR + "/containerd.sock", "--log-level=info", "--config=" + MAIN])
    print("usage: k0s version | worker | controller", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
