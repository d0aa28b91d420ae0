# SPDX-License-Identifier: GPL-3.0-or-later
"""Run in a kubelet node by /opt/kubegpu/venv/bin/python (it has tomlkit). Make this node's containerd (Debian's 1.6,
config version 2) ready for the kubelet, changing only five keys of /etc/containerd/config.toml (tomlkit keeps every
other key, comment and table, so what the collection wrote stays):

  plugins."io.containerd.grpc.v1.cri".sandbox_image                              = argv[1] (kubelet.env PAUSE_IMAGE)
  plugins."io.containerd.grpc.v1.cri".restrict_oom_score_adj                     = true
  plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.runtime_type      = "io.containerd.runc.v2"
  plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options.SystemdCgroup = true
  plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.privileged_without_host_devices = true

restrict_oom_score_adj: the node lacks CAP_SYS_RESOURCE, so no process in it may lower its OOM score below the node's
own; the kubelet asks -998 for every pod sandbox and runc's init then dies ("can't get final child's PID from pipe:
EOF", seen). With it containerd raises such a score to the node's (the setting exists for rootless containerd and kind's
rootless nodes). SystemdCgroup matches the kubelet's cgroupDriver: systemd (containerd 1.6 cannot tell the kubelet its driver; see
sandbox/kubelet/README.md). privileged_without_host_devices: a privileged pod (NVIDIA's MPS control daemon, nano-gpu's
agent) gets neither the host's devices nor "a *:* rwm" in its devices cgroup (containerd's CRI adds
oci.WithHostDevices and oci.WithAllDevicesAllowed only without it); the node, not privileged itself, may not allow all
devices below its own cgroup, and runc failed every privileged container ("failed to write \"a *:* rwm\": ...
devices.allow: operation not permitted", seen). Such a pod keeps the devices NVIDIA's runtime gives it. The collection's
nvidia runtime entry copies runc's keys (plugins/module_utils/_runtime/containerd.py), this one included.
Prints "changed" or "unchanged"; the caller restarts containerd on "changed".

With ``--v3`` (a node whose fleet entry says ``containerd: "2"``: containerd 2.x runs instead of Debian's 1.6,
sandbox/kubelet/README.md "containerd 2.x on a kubelet node") the same settings go to their config version 3 places
(containerd v2.4.2 internal/cri/config/config.go, plugins/cri/runtime/plugin.go's migration of version 2 keys):

  plugins."io.containerd.cri.v1.images".pinned_images.sandbox                     = argv[1]
  plugins."io.containerd.cri.v1.runtime".restrict_oom_score_adj                    = true
  plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.{runtime_type, options.SystemdCgroup,
                                                                   privileged_without_host_devices}
  plugins."io.containerd.cri.v1.runtime".cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  plugins."io.containerd.cri.v1.runtime".cni.{bin_dirs, conf_dir}                 = Debian's /usr/lib/cni, /etc/cni/net.d

CDI itself is always on in containerd 2.x (plugin.go: "enable_cdi ... skip (CDI is always enabled)"); the spec
directories are containerd's defaults (config_unix.go CDISpecDirs), written so that the file says where DRA's specs go.
A version 2 file (the node image's) is kept beside it as config.toml.v2 and replaced by a version 3 file: containerd
2.x would read version 2 too, migrating it in memory, but the collection writes a file's own version (containerd.py
resolve_version) and the node is meant to be a version 3 node.
"""
import os
import sys

import tomlkit

PATH = "/etc/containerd/config.toml"


def table(parent, key):
    if key not in parent:
        parent[key] = tomlkit.table()
    return parent[key]


CDI_SPEC_DIRS = ["/etc/cdi", "/var/run/cdi"]
CNI = {"bin_dirs": ["/usr/lib/cni"], "conf_dir": "/etc/cni/net.d"}


def set_v3(doc, pause):
    """The five settings, CDI's spec directories and the CNI directories at their version 3 places."""
    plugins = table(doc, "plugins")
    images = table(plugins, "io.containerd.cri.v1.images")
    table(images, "pinned_images")["sandbox"] = pause
    runtime = table(plugins, "io.containerd.cri.v1.runtime")
    runtime["restrict_oom_score_adj"] = True
    runtime["cdi_spec_dirs"] = CDI_SPEC_DIRS
    cni = table(runtime, "cni")
    for key, value in CNI.items():
        cni[key] = value
    runc = table(table(table(runtime, "containerd"), "runtimes"), "runc")
    runc["runtime_type"] = "io.containerd.runc.v2"
    table(runc, "options")["SystemdCgroup"] = True
    runc["privileged_without_host_devices"] = True


def main():
    pause = sys.argv[1]
    v3 = "--v3" in sys.argv[2:]
    try:
        with open(PATH, encoding="utf-8") as handle:
            doc = tomlkit.parse(handle.read())
    except FileNotFoundError:
        doc = tomlkit.document()
    before = tomlkit.dumps(doc)
    if v3:
        if doc.get("version", 2) == 2:
            if before.strip():
                os.replace(PATH, PATH + ".v2")
            doc = tomlkit.document()
            doc["version"] = 3
        if doc["version"] != 3:
            print("%s: config version %s; this script writes version 3 (containerd 2.x)" % (PATH, doc["version"]), file=sys.stderr)
            return 1
        set_v3(doc, pause)
        return write(doc, before)
    if "version" not in doc:
        doc["version"] = 2
    if doc["version"] != 2:
        print("%s: config version %s; this script writes version 2 (containerd 1.6)" % (PATH, doc["version"]), file=sys.stderr)
        return 1
    cri = table(table(doc, "plugins"), "io.containerd.grpc.v1.cri")
    cri["sandbox_image"] = pause
    cri["restrict_oom_score_adj"] = True
    runc = table(table(table(cri, "containerd"), "runtimes"), "runc")
    runc["runtime_type"] = "io.containerd.runc.v2"
    table(runc, "options")["SystemdCgroup"] = True
    runc["privileged_without_host_devices"] = True
    return write(doc, before)


def write(doc, before):
    """Write ``doc`` when it differs from ``before``; print changed or unchanged."""
    after = tomlkit.dumps(doc)
    if after == before:
        print("unchanged")
        return 0
    with open(PATH + ".kubegpu-tmp", "w", encoding="utf-8") as handle:
        handle.write(after)
    os.replace(PATH + ".kubegpu-tmp", PATH)
    print("changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
