# SPDX-License-Identifier: GPL-3.0-or-later
"""Find the NVIDIA device plugin container in a pod and where its config comes from.

Pure functions over pod dicts in API (camelCase) form, so they can be tested without a cluster.

A device plugin pod is one with a container whose image contains ``k8s-device-plugin`` and
that runs the plugin itself: no ``command`` (the image's entrypoint is ``nvidia-device-plugin``)
or a command whose program is ``nvidia-device-plugin``. The same image also runs
``gpu-feature-discovery``, ``config-manager`` and ``mps-control-daemon``; those are not plugins.

The config file path comes from ``--config-file`` or the ``CONFIG_FILE`` env var; it is
followed to the container's volumeMount that holds it, to the pod volume, and to a ConfigMap
name and key (``configMap`` or ``projected`` volumes, with or without ``items`` and ``subPath``).
Guesses, stated here because a kubelet would know better:

* An env var given with ``valueFrom`` is ignored (logged by the caller).
* A config file in any other kind of volume (``emptyDir`` filled by the Helm chart's
  config-manager sidecar, ``hostPath``) cannot be read; the plugin is treated as failing to
  load its config, so nothing is advertised.
"""

from __future__ import annotations

import dataclasses
import posixpath

from .rules import PluginError, parse_cli_args

PLUGIN_IMAGE_MARK = "k8s-device-plugin"
PLUGIN_PROGRAM = "nvidia-device-plugin"
MPS_DAEMON_PROGRAM = "mps-control-daemon"
# Where the plugin and the MPS control daemon see the MPS root (pipes under <root>/<resource>/pipe), whatever it is
# on the host (cmd/mps-control-daemon/mps/root.go; the chart mounts the host's mps.root there in both pods).
MPS_CONTAINER_ROOT = "/mps"


@dataclasses.dataclass(frozen=True)
class ConfigRef:
    """Where a plugin's config file lives: a key of a ConfigMap in the pod's namespace."""

    namespace: str
    name: str
    key: str
    optional: bool = False


@dataclasses.dataclass(frozen=True)
class PluginInputs:
    """Everything of a plugin container that feeds ``rules.parse_config``."""

    container: str
    env: dict
    cli: dict
    config_path: str
    config_ref: ConfigRef | None
    notes: tuple = ()
    mps_host_root: str | None = None  # the host directory the plugin sees at /mps, if any


def plugin_container(pod: dict) -> dict | None:
    """Return the device plugin container of ``pod`` or None if it is not a device plugin pod."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if PLUGIN_IMAGE_MARK not in (container.get("image") or ""):
            continue
        command = container.get("command") or []
        if not command or posixpath.basename(str(command[0])) == PLUGIN_PROGRAM:
            return container
    return None


def is_plugin_pod(pod: dict) -> bool:
    """Tell whether ``pod`` runs the NVIDIA device plugin."""
    return plugin_container(pod) is not None


def mps_daemon_container(pod: dict) -> dict | None:
    """The MPS control daemon container of ``pod`` (the plugin image running ``mps-control-daemon`` as a container,
    not its ``mount-shm`` init step), or None."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        command = [str(c) for c in container.get("command") or []]
        if (PLUGIN_IMAGE_MARK in (container.get("image") or "") and command
                and posixpath.basename(command[0]) == MPS_DAEMON_PROGRAM and "mount-shm" not in command[1:]):
            return container
    return None


def host_path_at(pod: dict, container: dict, mount_path: str) -> str | None:
    """The host directory a container sees at ``mount_path`` (a hostPath volume mounted exactly there), or None."""
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        if posixpath.normpath(mount.get("mountPath", "")) == posixpath.normpath(mount_path):
            host = (volumes.get(mount.get("name")) or {}).get("hostPath") or {}
            return posixpath.normpath(host["path"]) if host.get("path") else None
    return None


def _volume_source(volume: dict, rel: str, namespace: str) -> ConfigRef:
    """Map a path relative to the volume root to a ConfigMap key."""
    if volume.get("configMap") is not None:
        sources = [volume["configMap"]]
    elif volume.get("projected") is not None:
        sources = [s["configMap"] for s in volume["projected"].get("sources") or [] if s.get("configMap") is not None]
    else:
        kinds = sorted(k for k in volume if k != "name")
        raise PluginError(
            "config file is in volume %r of kind %s, which the simulator cannot read" % (volume.get("name"), ",".join(kinds) or "unknown"))
    for source in sources:
        items = source.get("items")
        if items:
            for item in items:
                if posixpath.normpath(item.get("path", "")) == rel:
                    return ConfigRef(namespace, source.get("name", ""), item.get("key", ""), bool(source.get("optional")))
            continue
        if "/" not in rel:
            return ConfigRef(namespace, source.get("name", ""), rel, bool(source.get("optional")))
    raise PluginError("no ConfigMap key of volume %r projects to %r" % (volume.get("name"), rel))


def config_ref_for_path(pod: dict, container: dict, path: str) -> ConfigRef:
    """Follow a config file path through volumeMounts and volumes to a ConfigMap key."""
    path = posixpath.normpath(path)
    best = None
    for mount in container.get("volumeMounts") or []:
        mount_path = posixpath.normpath(mount.get("mountPath", ""))
        if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
            if best is None or len(mount_path) > len(posixpath.normpath(best.get("mountPath", ""))):
                best = mount
    if best is None:
        raise PluginError("config file %s is not inside any volumeMount of container %s" % (path, container.get("name")))
    mount_path = posixpath.normpath(best["mountPath"])
    rel = "" if path == mount_path else path[len(mount_path.rstrip("/")) + 1:]
    sub_path = best.get("subPath") or ""
    rel = posixpath.normpath(posixpath.join(sub_path, rel)) if sub_path else rel
    if not rel or rel == ".":
        raise PluginError("config file %s names a directory (volumeMount %s)" % (path, mount_path))
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    volume = volumes.get(best.get("name"))
    if volume is None:
        raise PluginError("volumeMount %s refers to missing volume %s" % (mount_path, best.get("name")))
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    return _volume_source(volume, rel, namespace)


def plugin_inputs(pod: dict) -> PluginInputs:
    """Collect env, CLI flags and the config source of the device plugin container in ``pod``."""
    container = plugin_container(pod)
    if container is None:
        raise ValueError("not a device plugin pod")
    notes = []
    env = {}
    for var in container.get("env") or []:
        if "value" in var and var.get("value") is not None:
            env[var["name"]] = var["value"]
        elif var.get("valueFrom") is not None:
            notes.append("env %s uses valueFrom, which the simulator ignores" % var.get("name"))
        else:
            env[var["name"]] = ""
    argv = list(container.get("command") or [])[1:] + list(container.get("args") or [])
    cli = parse_cli_args(argv)
    config_path = cli.pop("config-file", None) or env.get("CONFIG_FILE") or ""
    config_ref = config_ref_for_path(pod, container, config_path) if config_path else None
    return PluginInputs(
        container=container.get("name", ""),
        env=env,
        cli=cli,
        config_path=config_path,
        config_ref=config_ref,
        notes=tuple(notes),
        mps_host_root=host_path_at(pod, container, MPS_CONTAINER_ROOT),
    )
