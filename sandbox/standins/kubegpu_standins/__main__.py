# SPDX-License-Identifier: GPL-3.0-or-later
"""``python3 -m kubegpu_standins PROGRAM [ARGS...]``: run one stand-in program by the vendor program's name;
``python3 -m kubegpu_standins --install`` writes a launcher for every program at the path the vendor's image has it
(the stand-in images run it at build time, so manifests that name a program find it where they look)."""

from __future__ import annotations

import os
import sys

# program name -> (the path the vendor's image has it at, the module that stands in for it or None: not yet)
PROGRAMS = {
    # NVIDIA k8s-device-plugin image (deployments/container/Dockerfile: /usr/bin/*, ENTRYPOINT nvidia-device-plugin)
    "nvidia-device-plugin": ("/usr/bin/nvidia-device-plugin", "deviceplugin"),
    "gpu-feature-discovery": ("/usr/bin/gpu-feature-discovery", None),
    "mps-control-daemon": ("/usr/bin/mps-control-daemon", "mpsdaemon"),
    "config-manager": ("/usr/bin/config-manager", None),
    # node-feature-discovery image (the collection's manifests run them by name)
    "nfd-master": ("/usr/bin/nfd-master", None),
    "nfd-worker": ("/usr/bin/nfd-worker", None),
    "nfd-gc": ("/usr/bin/nfd-gc", None),
    # AMD's images (_amd/constants.py: WORKDIR /root, ./k8s-device-plugin, ./k8s-node-labeller)
    "k8s-device-plugin": ("/root/k8s-device-plugin", None),
    "k8s-node-labeller": ("/root/k8s-node-labeller", None),
    # Intel's plugin image (its ENTRYPOINT)
    "intel_gpu_device_plugin": ("/usr/local/bin/intel_gpu_device_plugin", None),
    # nano-gpu's images (_nanogpu/constants.py AGENT_COMMAND, AGENT_INSTALLER_COMMAND, SCHEDULER_COMMAND)
    "nano-gpu-agent": ("/usr/bin/nano-gpu-agent", "nanogpu"),
    "install.sh": ("/usr/bin/install.sh", "nanogpu"),
    "nano-gpu-scheduler": ("/usr/bin/nano-gpu-scheduler", "nanogpu"),
}

LAUNCHER = """#!/bin/sh
# kubegpu sandbox stand-in for %(name)s: not the vendor's software (sandbox/standins/README.md)
exec /usr/bin/python3 -m kubegpu_standins %(name)s "$@"
"""


def install():
    for name, (path, _module) in PROGRAMS.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(LAUNCHER % {"name": name})
        os.chmod(path, 0o755)
    return 0


def main(argv):
    if argv[:1] == ["--install"]:
        return install()
    if not argv or argv[0] not in PROGRAMS:
        sys.stderr.write("usage: python3 -m kubegpu_standins {--install|%s} [ARGS...]\n" % "|".join(PROGRAMS))
        return 2
    module = PROGRAMS[argv[0]][1]
    if module == "deviceplugin":
        from . import deviceplugin  # pylint: disable=import-outside-toplevel
        return deviceplugin.main(argv[1:])
    if module == "mpsdaemon":
        from . import mpsdaemon  # pylint: disable=import-outside-toplevel
        return mpsdaemon.main(argv[1:])
    if module == "nanogpu":
        from . import nanogpu  # pylint: disable=import-outside-toplevel
        return nanogpu.main(argv[0], argv[1:])
    from . import waiting  # pylint: disable=import-outside-toplevel
    return waiting.main(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
