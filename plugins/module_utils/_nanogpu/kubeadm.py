# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""nano-gpu's extender in a kubeadm control plane's kube-scheduler (the module scheduler_extender).

kubeadm runs kube-scheduler as a static pod, ``/etc/kubernetes/manifests/kube-scheduler.yaml``, which the kubelet
restarts by itself whenever the file changes. The scheduler reads its extenders from a KubeSchedulerConfiguration
file named by ``--config``. So, on a control-plane node:

- the configuration file (the one ``--config`` names already, else ``/etc/kubernetes/kube-scheduler-config.yaml``)
  gets nano-gpu's entry (:func:`scheduler.extender_entry`, the one place it is rendered) merged into ``extenders``,
  every other setting and extender kept; an existing entry for ``nano-gpu/gpu-percent`` is updated where it stands;
- the manifest gets ``--config``, a read-only hostPath mount of the file, and an annotation with the file's SHA-256,
  so that a change of the file alone also restarts the pod (kube-scheduler reads its config only when it starts);
- both are written atomically (a hidden temporary file beside each, which the kubelet ignores: it skips names
  starting with a dot, kubernetes pkg/kubelet/config/file.go), owner and mode kept, the originals saved once in a
  state directory *outside* the manifests directory (the kubelet would run a copy left there as a second pod);
- ``state=absent`` gives back exactly the original bytes of each file that is still as this module left it, and
  otherwise removes only what it added;
- nothing is written unless every field passes what kube-scheduler would check (:mod:`.scheduler`), and a scheduler
  that does not come back healthy after the change gets the previous files back (:func:`_roll_back`).

Everything here but :func:`run` and the waits is pure, on parsed data or text.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json
import os
import shutil
import ssl
import time

try:
    from urllib.request import HTTPSHandler, ProxyHandler, build_opener
except ImportError:  # Python 2, never the managed hosts of this collection
    HTTPSHandler = ProxyHandler = build_opener = None

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, KubegpuError, OptionError, WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu.scheduler import extender_entry, extender_problems

try:
    import yaml
    YAML_ERROR = None
except ImportError:  # the module reports it (missing_required_lib)
    yaml = None
    YAML_ERROR = "PyYAML"

CONFIG_ANNOTATION = "kubegpu.cluster/scheduler-config-sha256"
RECORD = "record.json"
CONFIG_PREFIX = "kubescheduler.config.k8s.io/"


# --- YAML ----------------------------------------------------------------------------------------------------------

def load(text, path):
    """The data of a YAML text; one FileError with the line and column where it does not parse."""
    try:
        return yaml.safe_load(text) if text and text.strip() else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise FileError("invalid YAML: %s" % (exc.problem or exc.context), path=path,
                        line=mark.line + 1 if mark else None, column=mark.column + 1 if mark else None)
    except yaml.YAMLError as exc:
        raise FileError("invalid YAML: %s" % exc, path=path)


def dump(data):
    """YAML as kubeadm writes its manifests: block style, lists at their key's indentation, the keys' order kept."""
    return yaml.safe_dump(data, default_flow_style=False, sort_keys=False, width=4096)


def sha256(text):
    return hashlib.sha256((text or "").encode("utf-8")).hexdigest()


# --- The KubeSchedulerConfiguration --------------------------------------------------------------------------------

def check_config(data, path):
    """Refuse what is not a KubeSchedulerConfiguration whose extenders this module can merge into."""
    if not isinstance(data, dict):
        raise FileError("is not a KubeSchedulerConfiguration (a mapping with apiVersion and kind)", path=path)
    api = data.get("apiVersion")
    if not isinstance(api, str) or not api.startswith(CONFIG_PREFIX):
        raise FileError("is %r, not %s* (a Policy file or another kind cannot take extenders here)" % (api, CONFIG_PREFIX),
                        path=path, field="apiVersion")
    if data.get("kind") != C.SCHEDULER_CONFIG_KIND:
        raise FileError("is %r, not %s" % (data.get("kind"), C.SCHEDULER_CONFIG_KIND), path=path, field="kind")
    extenders = data.get("extenders")
    if extenders is not None and not isinstance(extenders, list):
        raise FileError("is not a list", path=path, field="extenders")
    for index, item in enumerate(extenders or []):
        where = "extenders[%d]" % index
        if not isinstance(item, dict):
            raise FileError("is not a mapping", path=path, field=where)
        if not isinstance(item.get("urlPrefix"), str):
            raise FileError("has no urlPrefix", path=path, field=where)
        resources = item.get("managedResources")
        if resources is not None and (not isinstance(resources, list) or not all(isinstance(r, dict) for r in resources)):
            raise FileError("is not a list of {name, ignoredByScheduler}", path=path, field=where + ".managedResources")
    return data


def is_ours(extender):
    """An extender that manages nano-gpu's resource is nano-gpu's, wherever it points."""
    return any(r.get("name") == C.RESOURCE_NAME for r in extender.get("managedResources") or [])


def merge_extenders(extenders, entry, where="extenders"):
    """``extenders`` with ``entry`` in place of nano-gpu's (where it stands, duplicates dropped), else appended.

    Refuses what kube-scheduler's validation refuses (pkg/scheduler/apis/config/validation: validateExtenders):
    a second extender with a bindVerb ("only one extender can implement bind verb").
    """
    out, placed = [], False
    for item in extenders or []:
        if is_ours(item):
            if not placed:
                out.append(copy.deepcopy(entry))
                placed = True
            continue
        if item.get("bindVerb") and entry.get("bindVerb"):
            raise FileError("the extender at %s implements bind already, and kube-scheduler takes only one extender "
                            "that binds; nano-gpu's binds its pods itself: remove that extender's bindVerb or the "
                            "extender" % item["urlPrefix"], field=where)
        out.append(item)
    if not placed:
        out.append(copy.deepcopy(entry))
    return out


def without_ours(extenders):
    return [item for item in extenders or [] if not is_ours(item)]


def kubespray_extenders(url_prefix, existing=None, weight=1, http_timeout=None, ignorable=False):
    """The value of Kubespray's ``kube_scheduler_extenders`` with nano-gpu's entry merged into ``existing`` (the
    inventory's value): Kubespray's kubescheduler-config.yaml.j2 writes the list under ``extenders:`` as it is."""
    if existing is not None and not isinstance(existing, list):
        raise OptionError(C.KUBESPRAY_EXTENDERS_VARIABLE, "is not a list of extenders")
    for index, item in enumerate(existing or []):
        if not isinstance(item, dict) or not isinstance(item.get("urlPrefix"), str):
            raise OptionError(C.KUBESPRAY_EXTENDERS_VARIABLE, "item %d is not an extender (a mapping with urlPrefix)" % index)
    entry = extender_entry(url_prefix, weight=weight, http_timeout=http_timeout, ignorable=ignorable)
    merged = merge_extenders(existing, entry, where=C.KUBESPRAY_EXTENDERS_VARIABLE)
    problems = extender_problems(merged, where=C.KUBESPRAY_EXTENDERS_VARIABLE)
    if problems:
        raise OptionError(C.KUBESPRAY_EXTENDERS_VARIABLE, "kube-scheduler would refuse it with nano-gpu's entry merged "
                                                          "in: %s" % "; ".join(problems))
    return merged


def new_config(kubeconfig):
    """The file this module creates where there is none: the scheduler's kubeconfig, which must be here because
    kube-scheduler ignores its --kubeconfig flag (kubeadm's) once --config is given (kube-scheduler's flag reference:
    "This parameter is ignored if a config file is specified in --config"), and the extenders. Leader election stays
    on (the v1 default), as kubeadm's --leader-elect=true asks."""
    return {"apiVersion": C.SCHEDULER_CONFIG_API_VERSION, "kind": C.SCHEDULER_CONFIG_KIND,
            "clientConnection": {"kubeconfig": kubeconfig}, "extenders": []}


def config_with(text, path, entry, kubeconfig):
    """The configuration text with ``entry`` merged (the text itself when nothing changes). The merged ``extenders``
    must pass what kube-scheduler validates (:func:`scheduler.extender_problems`), or nothing is written."""
    data = check_config(load(text, path), path) if text is not None else new_config(kubeconfig)
    merged = dict(data)
    merged["extenders"] = merge_extenders(data.get("extenders"), entry)
    problems = extender_problems(merged["extenders"])
    if problems:
        raise FileError("kube-scheduler would refuse its extenders with nano-gpu's merged in, so nothing was written: "
                        "%s; correct the file" % "; ".join(problems), path=path, field="extenders")
    if text is not None and merged == data:
        return text
    return dump(merged)


def config_without(text, path):
    """The configuration text without nano-gpu's extender (``extenders`` dropped when it is left empty)."""
    data = check_config(load(text, path), path)
    left = without_ours(data.get("extenders"))
    if left == (data.get("extenders") or []):
        return text
    out = dict(data)
    if left:
        out["extenders"] = left
    else:
        out.pop("extenders", None)
    return dump(out)


# --- The static pod manifest ---------------------------------------------------------------------------------------

def scheduler_container(manifest, path):
    if not isinstance(manifest, dict) or manifest.get("kind") != "Pod":
        raise FileError("is not a Pod manifest", path=path, field="kind")
    containers = (manifest.get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers:
        raise FileError("has no containers", path=path, field="spec.containers")
    for container in containers:
        if isinstance(container, dict) and container.get("name") == C.SCHEDULER_CONTAINER:
            return container
    raise FileError("has no container named %s" % C.SCHEDULER_CONTAINER, path=path, field="spec.containers")


def flag(args, name):
    """The value of ``--name=value`` or ``--name value`` in a command, or None."""
    args = [str(a) for a in args or []]
    for index, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg[len(name) + 1:]
        if arg == name and index + 1 < len(args):
            return args[index + 1]
    return None


def _command_key(container):
    """kubeadm puts the flags in ``command``; a hand-written manifest may use ``args``."""
    return "args" if flag(container.get("args"), "--config") is not None or (
        not container.get("command") and container.get("args")) else "command"


def config_path_of(manifest, path):
    container = scheduler_container(manifest, path)
    return flag(container.get("command"), "--config") or flag(container.get("args"), "--config")


def _covered(container, config_path):
    for mount in container.get("volumeMounts") or []:
        mount_path = str(mount.get("mountPath", "")).rstrip("/")
        if mount_path and (config_path == mount_path or config_path.startswith(mount_path + "/")):
            return True
    return False


def manifest_with(manifest, path, config_path, config_sha):
    """The manifest running the scheduler with ``--config=config_path``, the file mounted read-only, and the
    annotation that restarts the pod when the file changes. Returns (manifest, what was added)."""
    out = copy.deepcopy(manifest)
    container = scheduler_container(out, path)
    added = {"flag": None, "volume": None}
    if config_path_of(out, path) is None:
        key = _command_key(container)
        container[key] = list(container.get(key) or []) + ["--config=%s" % config_path]
        added["flag"] = "--config=%s" % config_path
    if not _covered(container, config_path):
        container["volumeMounts"] = list(container.get("volumeMounts") or []) + [
            {"mountPath": config_path, "name": C.SCHEDULER_CONFIG_VOLUME, "readOnly": True}]
        spec = out["spec"]
        spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") != C.SCHEDULER_CONFIG_VOLUME] + [
            {"hostPath": {"path": config_path, "type": "FileOrCreate"}, "name": C.SCHEDULER_CONFIG_VOLUME}]
        added["volume"] = C.SCHEDULER_CONFIG_VOLUME
    metadata = out.setdefault("metadata", {})
    annotations = dict(metadata.get("annotations") or {})
    annotations[CONFIG_ANNOTATION] = config_sha
    metadata["annotations"] = annotations
    return out, added


def manifest_without(manifest, path, added):
    """The manifest without what :func:`manifest_with` added (``added``: its record; None removes only the
    annotation and the volume of our name, never a ``--config`` this module did not add)."""
    out = copy.deepcopy(manifest)
    container = scheduler_container(out, path)
    added = added or {}
    if added.get("flag"):
        for key in ("command", "args"):
            if container.get(key):
                container[key] = [a for a in container[key] if str(a) != added["flag"]]
    container["volumeMounts"] = [m for m in container.get("volumeMounts") or [] if m.get("name") != C.SCHEDULER_CONFIG_VOLUME]
    if not container["volumeMounts"]:
        del container["volumeMounts"]
    spec = out["spec"]
    if "volumes" in spec:
        spec["volumes"] = [v for v in spec["volumes"] or [] if v.get("name") != C.SCHEDULER_CONFIG_VOLUME]
    annotations = dict((out.get("metadata") or {}).get("annotations") or {})
    annotations.pop(CONFIG_ANNOTATION, None)
    if "metadata" in out:
        if annotations:
            out["metadata"]["annotations"] = annotations
        else:
            out["metadata"].pop("annotations", None)
    return out


# --- On the node ---------------------------------------------------------------------------------------------------

def _read_record(state_dir):
    path = os.path.join(state_dir, RECORD)
    text = _files.read_text(path)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise FileError("is not JSON (%s): it records the originals of the scheduler's files" % exc, path=path)
    if not isinstance(record, dict) or not isinstance(record.get("manifest"), dict):
        raise FileError("is not this module's record", path=path, field="manifest")
    return record


def _write(path, text):
    """Replace ``path`` with ``text`` atomically, owner, group and mode kept (0600 for a new file: it may name
    credentials' paths, and kube-scheduler runs as root)."""
    existed = os.path.exists(path)
    staged = _files.Staged(path, text)
    if not existed:
        os.chmod(staged.tmp_path, 0o600)
    staged.commit()


def _save_original(state_dir, name, source):
    _files.make_dirs(state_dir)
    target = os.path.join(state_dir, name)
    try:
        shutil.copy2(source, target)
        current = os.stat(source)
        os.chown(target, current.st_uid, current.st_gid)
    except (IOError, OSError) as exc:
        raise FileError("cannot keep the original in %s: %s" % (target, exc.strerror or exc), path=source)
    return target


def _read_bytes_as_text(path):
    text = _files.read_text(path)
    if text is None:
        raise FileError("is missing; it holds the original to give back", path=path)
    return text


def _diff(path, before, after):
    return {"before_header": path, "after_header": path, "before": before or "", "after": after or ""}


def plan(params):
    """What ``params`` asks of the node: ``{manifest: (path, before, after), config: (path, before, after),
    record, added}``; reads only."""
    manifest_path = params.get("manifest") or C.SCHEDULER_MANIFEST
    manifest_text = _files.read_text(manifest_path)
    if manifest_text is None:
        raise FileError("is missing: this is not a kubeadm control-plane node (the scheduler is no static pod here); "
                        "on a Kubespray cluster set kube_scheduler_extenders instead (docs/nano-gpu.md)", path=manifest_path)
    manifest = load(manifest_text, manifest_path)
    container = scheduler_container(manifest, manifest_path)
    existing = config_path_of(manifest, manifest_path)
    wanted = params.get("config_path")
    if existing and wanted and os.path.normpath(wanted) != os.path.normpath(existing):
        raise OptionError("config_path", "the scheduler already runs with --config=%s (%s); leave config_path empty "
                                         "or set it to that file" % (existing, manifest_path))
    config_path = existing or wanted or C.SCHEDULER_CONFIG
    record = _read_record(params["state_dir"])
    config_text = _files.read_text(config_path)
    out = {"manifest": [manifest_path, manifest_text, manifest_text], "config": [config_path, config_text, config_text],
           "record": record, "added": None, "container": container,
           # whether each file holds nothing of nano-gpu's now (then it is the original to give back later)
           "clean": {"manifest": manifest_without(manifest, manifest_path, None) == manifest,
                     "config": config_text is None or config_without(config_text, config_path) == config_text}}
    if params["state"] == "present":
        if not params.get("url_prefix"):
            raise OptionError("url_prefix", "is required with state=present (the extender's http://HOST:PORT/scheduler)")
        entry = extender_entry(params["url_prefix"], weight=params.get("weight", 1),
                               http_timeout=params.get("http_timeout"), ignorable=params.get("ignorable", False))
        kubeconfig = flag(container.get("command"), "--kubeconfig") or "/etc/kubernetes/scheduler.conf"
        try:
            new_text = config_with(config_text, config_path, entry, kubeconfig)
        except FileError as exc:
            if exc.path:
                raise
            raise FileError(exc.message, path=config_path)
        out["config"][2] = new_text
        new_manifest, added = manifest_with(manifest, manifest_path, config_path, sha256(new_text))
        if record:  # what an earlier run added stays recorded as added by this module
            added = dict((k, added.get(k) or (record.get("added") or {}).get(k)) for k in ("flag", "volume"))
        out["added"] = added
        out["manifest"][2] = manifest_text if new_manifest == manifest else dump(new_manifest)
        return out
    # absent: the original bytes where the file is as this module left it, else only ours taken out
    if record:
        for key in ("manifest", "config"):
            entry = record.get(key) or {}
            path, current = out[key][0], out[key][1]
            as_left = entry.get("path") == path and entry.get("written_sha256") == sha256(current) and current is not None
            if as_left and (entry.get("created") or entry.get("original")):
                out[key][2] = None if entry.get("created") else _read_bytes_as_text(entry["original"])
                out[key].append("original")
    if len(out["manifest"]) == 3:
        out["manifest"][2] = _text_or_same(manifest_text, manifest_without(manifest, manifest_path, (record or {}).get("added")))
    if len(out["config"]) == 3 and config_text is not None:
        out["config"][2] = config_without(config_text, config_path)
    return out


def _text_or_same(text, data):
    return text if load(text, None) == data else dump(data)


def scheduler_pids(proc="/proc"):
    """PIDs of the kube-scheduler processes on the node, with their command lines."""
    found = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "cmdline"), "rb") as handle:
                argv = handle.read().decode("utf-8", "replace").split("\0")
        except (IOError, OSError):
            continue
        if argv and os.path.basename(argv[0]) == "kube-scheduler":
            found[int(name)] = [a for a in argv if a]
    return found


def healthz(url, timeout=2):
    """Whether ``url`` answers ``ok`` (kube-scheduler's serving certificate is self-signed: loopback only, not
    verified, and never through a proxy the environment names)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    opener = build_opener(ProxyHandler({}), HTTPSHandler(context=context))
    try:
        with opener.open(url, timeout=timeout) as response:  # nosec - loopback, fixed path
            return response.status == 200 and response.read().strip() == b"ok"
    except Exception:  # pylint: disable=broad-except  # any failure is "not healthy yet"
        return False


def wait_restarted(before, url, config_flag, present, timeout, sleep=time.sleep, clock=time.time, pids=scheduler_pids,
                   check=healthz, settle=3):
    """Wait (at most ``timeout`` s, 1 s apart) until a kube-scheduler process that was not running before the
    change runs with (``present``) or without ``config_flag``, ``url`` answers ok, and both still hold ``settle`` s
    later (a configuration kube-scheduler refuses ends the process at start; one it takes keeps it running). Returns
    the seconds taken; raises :class:`WaitTimeout` with what was seen last."""
    start = clock()
    last = "no kube-scheduler process yet"
    while True:
        now = pids()
        fresh = dict((p, a) for p, a in now.items() if p not in before and _serves(a, url))
        runs = [p for p, a in fresh.items() if (any(x == config_flag or x.startswith(config_flag + "=")
                                                    for x in a)) == present]
        if runs:
            if check(url):
                sleep(settle)
                if set(runs) & set(pids()) and check(url):
                    return round(clock() - start, 1)
                last = "kube-scheduler %s answered ok at %s, then stopped answering or exited" % (runs[0], url)
            else:
                last = "kube-scheduler %s runs but %s does not answer ok yet" % (runs[0], url)
        elif fresh:
            last = "a new kube-scheduler runs, but %s --config" % ("without" if present else "still with")
        if clock() - start >= timeout:
            raise WaitTimeout("the kubelet did not bring kube-scheduler back healthy as changed within %d s (%s)"
                              % (timeout, last))
        sleep(1)


def _serves(argv, url):
    """Whether a kube-scheduler of command line ``argv`` serves on the port of ``url`` (its --secure-port, 10259 by
    default): a second scheduler on the node (a test's, another profile's) is not the one the kubelet restarted."""
    port = flag(argv, "--secure-port") or str(C.SCHEDULER_SECURE_PORT)
    return url.split("/")[2].rsplit(":", 1)[-1] == port if url.count("/") >= 2 else True


def healthz_url(container):
    args = list(container.get("command") or []) + list(container.get("args") or [])
    port = flag(args, "--secure-port") or str(C.SCHEDULER_SECURE_PORT)
    address = flag(args, "--bind-address") or "127.0.0.1"
    if address in ("0.0.0.0", "::", ""):
        address = "127.0.0.1"
    return "https://%s:%s/healthz" % ("[%s]" % address if ":" in address else address, port)


def run(params, check_mode=False, want_diff=False, waiter=wait_restarted):
    """The module's result."""
    the_plan = plan(params)
    manifest_path, manifest_before, manifest_after = the_plan["manifest"][:3]
    config_path, config_before, config_after = the_plan["config"][:3]
    changed_files = [p for p, b, a in ((config_path, config_before, config_after),
                                       (manifest_path, manifest_before, manifest_after)) if b != a]
    result = {"changed": bool(changed_files), "config_path": config_path, "manifest": manifest_path,
              "files": changed_files, "state_dir": params["state_dir"],
              "restored": [k for k in ("manifest", "config") if len(the_plan[k]) == 4 and the_plan[k][1] != the_plan[k][2]]}
    if params["state"] == "present":
        result["extender"] = next(e for e in load(config_after, config_path)["extenders"] if is_ours(e))
    if want_diff and changed_files:
        result["diff"] = [_diff(config_path, config_before, config_after), _diff(manifest_path, manifest_before, manifest_after)]
    state_dir = params["state_dir"]
    record = the_plan["record"]
    if check_mode:
        return result
    if not changed_files:
        if params["state"] == "absent" and record:
            shutil.rmtree(state_dir, ignore_errors=True)
        return result
    state_before = _read_dir(state_dir)
    before_pids = scheduler_pids()
    if params["state"] == "present":
        record = dict(record or {})
        for key, name, path, before, after in (("manifest", "kube-scheduler.yaml", manifest_path, manifest_before, manifest_after),
                                               ("config", "kube-scheduler-config.yaml", config_path, config_before, config_after)):
            entry = record.get(key)
            if entry is None or entry.get("path") != path or entry.get("written_sha256") != sha256(before):
                # the first run, or the file changed since this module wrote it (a kubeadm upgrade rewrites the
                # manifest): what is there now is the original when it holds nothing of nano-gpu's; otherwise the way
                # back can only take ours out of it
                clean = the_plan["clean"][key]
                entry = {"path": path, "created": before is None and clean,
                         "original": _save_original(state_dir, name, path) if before is not None and clean else None}
            entry["written_sha256"] = sha256(after)
            record[key] = entry
        record["added"] = the_plan["added"]
        _files.make_dirs(state_dir)
        _files.Staged(os.path.join(state_dir, RECORD), json.dumps(record, indent=2, sort_keys=True) + "\n").commit()
    _put(config_path, config_before, config_after, manifest_path, manifest_before, manifest_after)
    if params.get("wait") and manifest_after != manifest_before:
        url = healthz_url(scheduler_container(load(manifest_after, manifest_path), manifest_path))
        result["healthz"] = url
        expect_config = config_path_of(load(manifest_after, manifest_path), manifest_path) is not None
        try:
            result["waited_s"] = waiter(before_pids, url, "--config", expect_config, params["wait_timeout"])
        except WaitTimeout as exc:
            _roll_back(params, the_plan, state_before, exc, waiter)
    if params["state"] == "absent":
        shutil.rmtree(state_dir, ignore_errors=True)
    return result


def _put(config_path, config_before, config_after, manifest_path, manifest_before, manifest_after):
    """Write both files in the order that never lets the kubelet start a scheduler on a half-made change: where the new
    manifest reads the configuration, the configuration first (the scheduler the kubelet starts reads it at once),
    else the manifest first (the scheduler must stop reading the file before it changes or goes)."""
    def config():
        if config_after != config_before:
            if config_after is None:
                _files.remove(config_path)
            else:
                _write(config_path, config_after)

    def manifest():
        if manifest_after != manifest_before:
            _write(manifest_path, manifest_after)

    reads_config = manifest_after is not None and config_path_of(load(manifest_after, manifest_path), manifest_path)
    for step in ((config, manifest) if reads_config else (manifest, config)):
        step()


def _read_dir(directory):
    """The files of ``directory`` (name to bytes), or None when it does not exist."""
    if not os.path.isdir(directory):
        return None
    out = {}
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                out[name] = handle.read()
    return out


def _restore_dir(directory, files):
    """``directory`` as :func:`_read_dir` found it (gone when it was not there)."""
    if files is None:
        shutil.rmtree(directory, ignore_errors=True)
        return
    _files.make_dirs(directory)
    for name in os.listdir(directory):
        if name not in files:
            _files.remove(os.path.join(directory, name))
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as handle:
            handle.write(data)


def _roll_back(params, the_plan, state_before, failure, waiter):
    """The new scheduler did not come back healthy: put the previous configuration and manifest back, the way
    container_toolkit puts a runtime's previous files back, wait for the kubelet to run the scheduler on them, and fail
    saying both."""
    manifest_path, manifest_before, manifest_after = the_plan["manifest"][:3]
    config_path, config_before, config_after = the_plan["config"][:3]
    before_pids = scheduler_pids()
    # the other way round: what is there now (after) is replaced by what was there (before)
    _put(config_path, config_before=config_after, config_after=config_before, manifest_path=manifest_path,
         manifest_before=manifest_after, manifest_after=manifest_before)
    _restore_dir(params["state_dir"], state_before)
    old = load(manifest_before, manifest_path)
    url = healthz_url(scheduler_container(old, manifest_path))
    try:
        waited = waiter(before_pids, url, "--config", config_path_of(old, manifest_path) is not None,
                        params["wait_timeout"])
        back = "kube-scheduler is healthy on them again (%s answered ok after %s s)" % (url, waited)
    except WaitTimeout as again:
        back = "kube-scheduler did NOT come back on them either (%s): see the kubelet's log" % again
    raise KubegpuError("%s; the previous %s and %s were put back and %s. What the new scheduler said is in its "
                       "container's log (crictl ps -a --name kube-scheduler, then crictl logs <id>)"
                       % (failure, config_path, manifest_path, back))
