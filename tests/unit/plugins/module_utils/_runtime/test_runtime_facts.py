# SPDX-License-Identifier: GPL-3.0-or-later
"""container_runtime_facts' readers: systemd's unit properties and command lines, the daemons' reports, packages and
files. The texts are what the node image's systemd, dockerd 20.10 and containerd 1.6 print (see
molecule/container_toolkit for the module against the daemons themselves)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import facts
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import engine as runner
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import Host
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.containerd import containerd_report
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.crio import crio_report
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.docker import docker_report

RUNNING = " ; ignore_errors=no ; start_time=[Wed 2026-11-25 04:24:15 UTC] ; stop_time=[n/a] ; pid=945 ; code=(null) ; status=0/0 }"
SHOW = """ExecStart={ path=/usr/sbin/dockerd ; argv[]=/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock $DOCKER_OPTS""" \
    + RUNNING + """
Environment=
EnvironmentFiles=/etc/default/docker (ignore_errors=yes)
EnvironmentFiles=/etc/docker/extra.env (ignore_errors=no)
Id=docker.service
LoadState=loaded
ActiveState=active
UnitFileState=enabled

ExecStart={ path=/usr/bin/containerd ; argv[]=/usr/bin/containerd""" + RUNNING + """
Environment=GOTRACEBACK=crash LANG=C
Id=containerd.service
LoadState=loaded
ActiveState=active
UnitFileState=enabled

Environment=
Id=k3s.service
LoadState=not-found
ActiveState=inactive
UnitFileState=

ExecStart={ path=/usr/local/bin/k3s ; argv[]=/usr/local/bin/k3s agent""" + RUNNING + """
Id=k3s-agent.service
LoadState=loaded
ActiveState=active
UnitFileState=enabled
"""

DEFAULT_DOCKER = """# Here in Debian, this file is sourced by:
#   - systemd's docker.service
export http_proxy="http://127.0.0.1:3128/"
DOCKER_OPTS="--default-runtime=runc --log-level=warn"
; a comment too
not a setting
"""

CONTAINERD_DUMP = """version = 2
root = "/var/lib/containerd"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    enable_cdi = false
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "nvidia"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
            SystemdCgroup = true
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            BinaryName = ""
            SystemdCgroup = true
"""

CONTAINERD_V3 = """version = 3
[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
"""

CRIO_CONFIG = """[crio.runtime]
default_runtime = "nvidia"
[crio.runtime.runtimes.crun]
runtime_path = "/usr/bin/crun"
runtime_type = "oci"
[crio.runtime.runtimes.nvidia]
runtime_path = "/usr/bin/nvidia-container-runtime"
runtime_type = "oci"
"""


def test_systemctl_show_of_several_units_keeps_repeated_properties():
    units = facts.parse_show(SHOW)
    assert sorted(units) == ["containerd.service", "docker.service", "k3s-agent.service", "k3s.service"]
    docker = units["docker.service"]
    assert docker["UnitFileState"] == ["enabled"] and docker["ActiveState"] == ["active"]
    assert facts.environment_files(docker["EnvironmentFiles"]) == [("/etc/default/docker", True),
                                                                   ("/etc/docker/extra.env", False)]
    assert facts.exec_argv(docker["ExecStart"][0]) == [
        "/usr/sbin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock", "$DOCKER_OPTS"]
    assert facts.parse_environment(units["containerd.service"]["Environment"]) == {"GOTRACEBACK": "crash", "LANG": "C"}
    assert units["k3s.service"]["UnitFileState"] == [""]


def test_exec_start_without_a_command_line_is_empty():
    assert facts.exec_argv("") == [] and facts.exec_argv(None) == []
    assert facts.exec_argv("{ path=/bin/true ; argv[]=/bin/true }") == ["/bin/true"]


def test_environment_file_as_systemd_reads_it():
    assert facts.parse_environment_file(DEFAULT_DOCKER) == {
        "http_proxy": "http://127.0.0.1:3128/", "DOCKER_OPTS": "--default-runtime=runc --log-level=warn"}
    assert facts.parse_environment_file(None) == {}


@pytest.mark.parametrize("argv, env, words", [
    (["/usr/sbin/dockerd", "-H", "fd://", "$DOCKER_OPTS"], {"DOCKER_OPTS": "--default-runtime=runc --log-level=warn"},
     ["/usr/sbin/dockerd", "-H", "fd://", "--default-runtime=runc", "--log-level=warn"]),
    (["/usr/sbin/dockerd", "${DOCKER_OPTS}"], {"DOCKER_OPTS": "--config-file /srv/d.json"},
     ["/usr/sbin/dockerd", "--config-file", "/srv/d.json"]),
    (["/usr/sbin/dockerd", "$DOCKER_OPTS", "--data-root=$ROOT/x"], {"ROOT": "/srv"},
     ["/usr/sbin/dockerd", "--data-root=/srv/x"]),  # unset: nothing
])
def test_variables_are_expanded_and_split(argv, env, words):
    assert facts.expand(argv, env) == words


def test_flags_and_their_values():
    words = ["--default-runtime=runc", "-H", "fd://", "--config-file", "/srv/d.json", "--debug", "--config-file=/x.json"]
    assert facts.flag_names(words) == ["--default-runtime", "--config-file", "--debug", "--config-file"]
    assert facts.flag_value(words, "--config-file") == "/x.json"  # the last one wins, as for dockerd
    assert facts.flag_value(["--config-file", "/srv/d.json"], "--config-file") == "/srv/d.json"
    assert facts.flag_value(["--config-file", "--debug"], "--config-file") is None
    assert facts.flag_value(["--debug"], "--config-file") is None


def test_unit_facts_pick_the_enabled_unit_and_expand_its_environment(tmp_path):
    default = tmp_path / "docker"
    default.write_text(DEFAULT_DOCKER)
    text = SHOW.replace("/etc/default/docker", str(default))
    units = facts.parse_show(text)
    from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import registry
    docker = facts._unit_facts(registry.get("docker"), units)  # pylint: disable=protected-access
    assert docker["service"] == "docker" and docker["active"] == "active"
    assert docker["flags"] == ["--containerd", "--default-runtime", "--log-level"]
    assert docker["environment_files"] == [str(default), "/etc/docker/extra.env"]  # a missing file gives nothing
    k3s = facts._unit_facts(registry.get("k3s"), units)  # pylint: disable=protected-access
    assert k3s["service"] == "k3s-agent" and k3s["unit_states"] == {"k3s": None, "k3s-agent": "enabled"}
    assert k3s["command_line"] == ["/usr/local/bin/k3s", "agent"]
    crio = facts._unit_facts(registry.get("crio"), {})  # pylint: disable=protected-access
    assert crio["service"] == "crio" and crio["command_line"] == [] and crio["unit_states"] == {"crio": None}


def test_docker_info_report():
    info = {"DefaultRuntime": "nvidia", "Runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"},
                                                     "runc": {"path": "runc"}}}
    got = docker_report(json.dumps(info))
    assert got == {"source": "docker info", "ok": True, "error": None, "default_runtime": "nvidia", "cdi": None,
                   "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "type": None},
                                "runc": {"path": "runc", "type": None}}, "live_restore": None}
    assert docker_report(json.dumps(dict(info, LiveRestoreEnabled=False)))["live_restore"] is False
    assert docker_report(json.dumps(dict(info, LiveRestoreEnabled=True)))["live_restore"] is True
    assert docker_report("Cannot connect to the Docker daemon")["ok"] is False
    assert docker_report("[]")["error"] == "not a JSON object"


def test_containerd_reports_of_both_plugin_layouts():
    got = containerd_report(CONTAINERD_DUMP, "containerd config dump")
    assert got["ok"] and got["default_runtime"] == "nvidia" and got["cdi"] is False
    assert got["runtimes"] == {
        "nvidia": {"type": "io.containerd.runc.v2", "path": "/usr/bin/nvidia-container-runtime", "systemd_cgroup": True},
        "runc": {"type": "io.containerd.runc.v2", "path": "", "systemd_cgroup": True}}
    v3 = containerd_report(CONTAINERD_V3, "/run/k0s/containerd-cri.toml")
    assert v3["ok"] and v3["default_runtime"] == "runc" and v3["cdi"] is None and v3["source"] == "/run/k0s/containerd-cri.toml"
    assert containerd_report('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd\n', "x")["ok"] is False
    assert containerd_report("version = 2\n", "x")["error"] == "no CRI runtime plugin table"


def test_crio_and_crictl_reports():
    got = crio_report(CRIO_CONFIG)
    assert got["default_runtime"] == "nvidia"
    assert got["runtimes"]["nvidia"] == {"path": "/usr/bin/nvidia-container-runtime", "type": "oci"}
    info = {"config": {"enableCDI": True, "containerd": {"defaultRuntimeName": "nvidia", "runtimes": {
        "nvidia": {"runtimeType": "io.containerd.runc.v2", "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"}}}}}}
    cri = facts.crictl_report(json.dumps(info))
    assert cri["ok"] and cri["cdi"] is True and cri["default_runtime"] == "nvidia"
    assert cri["runtimes"] == {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "type": "io.containerd.runc.v2"}}
    assert facts.crictl_report('{"status": {}}')["error"] == "no config.containerd in its answer"


def test_installed_packages_only():
    dpkg = ("nvidia-container-toolkit\t1.19.0-1\tii \nnvidia-docker2\t2.14.0-1\trc \n"
            "libnvidia-container1\t1.19.0-1\thi \nnvidia-container-toolkit-base\t1.19.0-1\thn \n")
    held = []
    assert facts.parse_dpkg(dpkg, held) == {"nvidia-container-toolkit": "1.19.0-1", "libnvidia-container1": "1.19.0-1"}
    assert held == ["libnvidia-container1"]  # on hold and installed; a hold on a package not installed is no package
    rpm = "nvidia-container-toolkit\t1.17.8-1\npackage nvidia-docker2 is not installed\n"
    assert facts.parse_rpm(rpm) == {"nvidia-container-toolkit": "1.17.8-1"}


def test_files_are_described_without_failing(tmp_path):
    text = tmp_path / "repo.list"
    text.write_text("deb [signed-by=/k.asc] http://127.0.0.1:8088/stable/deb/amd64 /\n")
    os.chmod(str(text), 0o640)
    binary = tmp_path / "key.gpg"
    binary.write_bytes(b"\x99\x01\xff\xfe")
    got = facts.describe_file(str(text))
    assert got["exists"] and not got["directory"] and got["mode"] == "0640" and got["content"].startswith("deb [")
    assert len(got["sha256"]) == 64
    assert facts.describe_file(str(binary))["content"] is None
    assert facts.describe_file(str(tmp_path))["directory"] is True
    assert facts.describe_file(str(tmp_path / "missing")) == {"exists": False, "error": None}


class _Host(Host):
    """Commands answered from a table by their first two words; records what ran."""

    def __init__(self, answers, binaries=("dockerd", "docker")):
        super(_Host, self).__init__(run_command=self._run, get_bin_path=lambda n: "/usr/bin/" + n if n in binaries else None)
        self.answers = answers
        self.ran = []

    def _run(self, argv):
        words = " ".join([os.path.basename(argv[0])] + list(argv[1:2]))
        self.ran.append(words)
        return self.answers.get(words, (127, "", "%s: not found" % argv[0]))


def test_a_docker_daemon_that_answers_gives_its_version_without_starting_dockerd():
    info = json.dumps({"ServerVersion": "20.10.24+dfsg1", "DefaultRuntime": "nvidia",
                       "Runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}, "runc": {"path": "runc"}}})
    host = _Host({"docker info": (0, info, "")})
    docker = facts.gather({"runtimes": ["docker"]}, host)["runtimes"]["docker"]
    assert host.ran == ["docker info"]  # once: for the version and for the report
    assert (docker["version"], docker["version_output"]) == ("20.10.24", "docker info: ServerVersion 20.10.24+dfsg1")
    assert docker["reports"]["default_runtime"] == "nvidia" and docker["reports"]["ok"]


def test_a_docker_daemon_that_does_not_answer_is_asked_through_its_binary():
    host = _Host({"docker info": (1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock"),
                  "dockerd --version": (0, "Docker version 20.10.24+dfsg1, build 297e128\n", "")})
    docker = facts.gather({"runtimes": ["docker"]}, host)["runtimes"]["docker"]
    assert host.ran == ["docker info", "dockerd --version"]
    assert docker["version"] == "20.10.24" and not docker["reports"]["ok"]
    assert "Cannot connect to the Docker daemon" in docker["reports"]["error"]


def test_without_the_docker_cli_dockerd_tells_its_version():
    host = _Host({"dockerd --version": (0, "Docker version 24.0.7, build 311b9ff\n", "")}, binaries=("dockerd",))
    docker = facts.gather({"runtimes": ["docker"], "report": False}, host)["runtimes"]["docker"]
    assert host.ran == ["dockerd --version"] and docker["version"] == "24.0.7" and docker["reports"] is None


def test_without_the_docker_cli_the_report_says_so():
    host = _Host({"dockerd --version": (0, "Docker version 24.0.7, build 311b9ff\n", "")}, binaries=("dockerd",))
    docker = facts.gather({"runtimes": ["docker"]}, host)["runtimes"]["docker"]
    assert host.ran == ["dockerd --version"]  # no "docker info" run through a CLI that is not there
    assert not docker["reports"]["ok"] and "docker CLI is not installed" in docker["reports"]["error"]


def test_a_plan_with_state_absent_tells_whether_removal_would_change_a_file(tmp_path):
    # what the container_toolkit role asks with container_toolkit_state=absent: a rerun after the removal calls nothing
    path = tmp_path / "daemon.json"
    path.write_text('{\n    "log-driver": "json-file",\n    "default-runtime": "runc"\n}\n')
    # as the module's argument spec fills them in
    plan = {"runtime": "docker", "config_path": str(path), "runtime_name": "nvidia",
            "runtime_path": "/usr/bin/nvidia-container-runtime"}
    found = {"docker": {"config_file": None}}
    assert facts.plan_changes([dict(plan, state="absent")], found, Host())["docker"]["changed"] is False
    engine_params = dict(facts.PLAN_DEFAULTS, **plan)
    runner.run(engine_params)
    absent = facts.plan_changes([dict(plan, state="absent")], found, Host())["docker"]
    assert absent["changed"] is True and sorted(absent["files"]) == sorted([str(path), str(path) + ".kubegpu.json"])
    assert facts.plan_changes([plan], found, Host())["docker"]["changed"] is False
    runner.run(dict(engine_params, state="absent"))
    assert facts.plan_changes([dict(plan, state="absent")], found, Host())["docker"]["changed"] is False
    assert path.read_text() == '{\n    "log-driver": "json-file",\n    "default-runtime": "runc"\n}\n'


@pytest.mark.parametrize("live_restore, configured, warned", [
    (False, False, True),   # the plan changes daemon.json: docker restarts and stops every container
    (True, False, False),   # live-restore keeps them running
    (False, True, False),   # nothing to change, no restart
    (None, False, False),   # an older docker that does not say: no guess
])
def test_a_docker_restart_that_stops_every_container_is_warned_about(tmp_path, live_restore, configured, warned):
    """Issue 26: runtime restarts hit every GPU node at once, and nothing said that docker's stop its containers."""
    path = tmp_path / "daemon.json"
    path.write_text("{}\n")
    plan = {"runtime": "docker", "config_path": str(path), "runtime_name": "nvidia",
            "runtime_path": "/usr/bin/nvidia-container-runtime"}
    if configured:
        runner.run(dict(facts.PLAN_DEFAULTS, **plan))
    info = {"ServerVersion": "24.0.7", "DefaultRuntime": "runc", "Runtimes": {"runc": {"path": "runc"}}}
    if live_restore is not None:
        info["LiveRestoreEnabled"] = live_restore
    host = _Host({"docker info": (0, json.dumps(info), "")})
    got = facts.gather({"runtimes": ["docker"], "plans": [plan]}, host)
    assert got["runtimes"]["docker"]["reports"]["live_restore"] is live_restore
    assert got["plans"]["docker"]["changed"] is not configured
    assert bool([w for w in host.warnings if "stops every container" in w and "live-restore" in w]) is warned
