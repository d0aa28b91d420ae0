# SPDX-License-Identifier: GPL-3.0-or-later
"""The CDI spec after a change (nvidia_cdi_spec's work) with a stand-in nvidia-ctk: which specs, which names, the
refresh service's environment, the UUID check, check mode, removal. NVIDIA's real nvidia-ctk runs it in
tests/sandbox/test_cdi_after_mig_change.py."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import cdi


def gpu(*devices):
    return {"present": True, "count": len(devices), "devices": list(devices)}


def whole(index):
    return {"index": index, "uuid": "GPU-%d" % index, "mig": {"current": False, "devices": []}}


def mig(index, *slots):
    return {"index": index, "uuid": "GPU-%d" % index,
            "mig": {"current": True, "devices": [{"uuid": "MIG-%d-%d" % (index, s)} for s in slots]}}


class FakeCtk(object):
    """nvidia-ctk: ``cdi generate --output=F`` writes a spec naming ``self.devices``; ``cdi list`` lists the specs
    under the spec folders."""

    def __init__(self, spec_dir, devices=(), fail=None):
        self.spec_dir = spec_dir
        self.devices = list(devices)
        self.fail = fail
        self.calls = []

    def __call__(self, args, environ):
        self.calls.append((args[1:], dict(environ)))
        if args[1:3] == ["cdi", "generate"]:
            if self.fail:
                return 1, "", 'level=error msg="%s"' % self.fail
            out = [a for a in args if a.startswith("--output=")][0][len("--output="):]
            with open(out, "w") as handle:
                handle.write("devices: %s\nenv: %s\n" % (",".join(self.devices), sorted(environ.items())))
            return 0, "", 'level=info msg="Generated CDI spec with version 0.5.0"'
        names = []
        for name in sorted(os.listdir(self.spec_dir)):
            if name.endswith(".yaml"):
                with open(os.path.join(self.spec_dir, name)) as handle:
                    listed = handle.readline().split(":", 1)[1].strip()
                names.extend("nvidia.com/gpu=%s" % d for d in listed.split(",") if d)
        return 0, "\n".join(names + ["nvidia.com/gpu=all"] if names else []) + "\n", 'level=info msg="Found"'


@pytest.fixture
def host(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    ctk = tmp_path / "nvidia-ctk"
    ctk.write_text("#!/bin/sh\n")
    ctk.chmod(0o755)
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    params = {"paths": [str(spec_dir / "nvidia.yaml")], "env_file": str(tmp_path / "refresh.env"),
              "nvidia_ctk": str(ctk), "spec_dirs": [str(spec_dir)], "force": False}
    return params, str(spec_dir)


def test_expected_names_are_the_mig_devices_of_mig_gpus_and_the_other_gpus():
    assert cdi.expected_names(gpu(mig(0, 1, 2), whole(1), mig(2))) == ["GPU-1", "MIG-0-1", "MIG-0-2"]
    assert cdi.expected_names({"devices": [{"index": 0, "errors": {"handle": "GPU is lost"}}]}) == []


def test_listed_names_of_the_spec_kind_and_those_by_uuid():
    out = "nvidia.com/gpu=0:0\nnvidia.com/gpu=MIG-a\nnvidia.com/gpu=all\nnvidia.com/gpu=GPU-b\nother.com/x=MIG-c\n"
    assert cdi.listed_names(out, "nvidia.com/gpu") == (["0:0", "GPU-b", "MIG-a", "all"], ["GPU-b", "MIG-a"])


def test_the_refresh_services_environment_file(tmp_path):
    path = tmp_path / "nvidia-cdi-refresh.env"
    assert cdi.read_env_file(str(path)) == {}
    path.write_text("# comment\n; another\n\nNVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.json\n"
                    "NVIDIA_CTK_CDI_GENERATE_VENDOR = \"example.com\"\n")
    assert cdi.read_env_file(str(path)) == {"NVIDIA_CTK_CDI_OUTPUT_FILE_PATH": "/etc/cdi/nvidia.json",
                                            "NVIDIA_CTK_CDI_GENERATE_VENDOR": "example.com"}
    path.write_text("OK=1\nnot a line\n")
    with pytest.raises(FileError) as caught:
        cdi.read_env_file(str(path))
    assert str(path) in caught.value.message and "line 2" in caught.value.message


def test_which_specs_are_the_toolkits(tmp_path):
    unit = tmp_path / "nvidia-cdi-refresh.service"
    static = tmp_path / "etc-cdi" / "nvidia.yaml"
    params = {"refresh_units": [str(unit)], "static_output": str(static)}
    out = str(tmp_path / "run-cdi" / "nvidia.yaml")
    env = {"NVIDIA_CTK_CDI_OUTPUT_FILE_PATH": out}
    assert cdi.spec_paths(params, env) == []
    unit.write_text("[Service]\n")  # the service is installed: its output is in use even before it wrote it
    assert cdi.spec_paths(params, env) == [out]
    static.parent.mkdir()
    static.write_text("devices: []\n")  # the install guide's static spec
    assert cdi.spec_paths(params, env) == [out, str(static)]
    assert cdi.spec_paths(dict(params, paths=["/x/y.json"]), env) == ["/x/y.json"]


def test_a_host_without_the_toolkits_spec_is_left_alone(tmp_path):
    params = {"gpu": gpu(whole(0)), "refresh_units": [], "static_output": str(tmp_path / "none.yaml"),
              "env_file": str(tmp_path / "refresh.env"), "nvidia_ctk": "/nonexistent"}
    with open(params["env_file"], "w") as handle:
        handle.write("NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=%s\n" % (tmp_path / "run.yaml"))
    result = cdi.run(params, runner=None)
    assert result["not_in_use"] and "skipped" not in result and not result["changed"] and result["paths"] == []


def test_a_stale_spec_is_regenerated_checked_and_left_alone_after(host):
    params, spec_dir = host
    ctk = FakeCtk(spec_dir, ["GPU-0", "GPU-1"])
    assert cdi.run(dict(params, gpu=gpu(whole(0), whole(1))), ctk)["regenerated"] == params["paths"]
    ctk.devices = ["MIG-0-1", "MIG-0-2", "GPU-1"]
    after = gpu(mig(0, 1, 2), whole(1))
    check = cdi.run(dict(params, gpu=after), ctk, check_mode=True)
    assert check["changed"] and check["before"] == ["GPU-0", "GPU-1"]
    with open(params["paths"][0]) as handle:
        assert "GPU-0" in handle.read()  # check mode wrote nothing
    done = cdi.run(dict(params, gpu=after), ctk)
    assert done["changed"] and done["devices"] == ["GPU-1", "MIG-0-1", "MIG-0-2"]
    calls = len(ctk.calls)
    again = cdi.run(dict(params, gpu=after), ctk)
    assert not again["changed"] and len(ctk.calls) == calls + 1  # one list, no generation
    assert not cdi.run(dict(params, gpu=after, force=True), ctk)["changed"]  # generated, the same


def test_the_generator_gets_the_services_environment_with_uuid_names(host):
    params, spec_dir = host
    with open(params["env_file"], "w") as handle:
        handle.write("NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES=index\nNVIDIA_CTK_DRIVER_ROOT=/run/nvidia/driver\n"
                     "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/elsewhere.yaml\n")
    ctk = FakeCtk(spec_dir, ["GPU-0"])
    result = cdi.run(dict(params, gpu=gpu(whole(0))), ctk)
    environ = [env for args, env in ctk.calls if args[:2] == ["cdi", "generate"]][0]
    assert environ["NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES"] == "index,uuid"
    assert environ["NVIDIA_CTK_DRIVER_ROOT"] == "/run/nvidia/driver"
    assert "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH" not in environ  # the output is the command line's
    assert "uuid is added" in result["warnings"][0] and params["env_file"] in result["warnings"][0]


def test_a_spec_that_does_not_list_what_nvml_has_fails_naming_both(host):
    params, spec_dir = host
    ctk = FakeCtk(spec_dir, ["GPU-0"])  # the generator names the GPU where NVML says MIG devices
    with pytest.raises(cdi.CdiError) as caught:
        cdi.run(dict(params, gpu=gpu(mig(0, 1))), ctk)
    assert "missing: MIG-0-1" in caught.value.message and "not on the GPUs: GPU-0" in caught.value.message


def test_generation_failures_and_a_missing_nvidia_ctk(host):
    params, spec_dir = host
    with pytest.raises(cdi.CdiError, match="failed for .*nvidia.yaml .rc 1.: .*GPU is lost"):
        cdi.run(dict(params, gpu=gpu(whole(0))), FakeCtk(spec_dir, fail="GPU is lost"))
    with pytest.raises(cdi.CdiError, match="has no nvidia-ctk at /nonexistent: install the toolkit"):
        cdi.run(dict(params, gpu=gpu(whole(0)), nvidia_ctk="/nonexistent"), FakeCtk(spec_dir))


def test_no_device_no_spec(host):
    params, spec_dir = host
    ctk = FakeCtk(spec_dir, ["GPU-0"])
    cdi.run(dict(params, gpu=gpu(whole(0))), ctk)
    empty = gpu(mig(0))
    assert cdi.run(dict(params, gpu=empty), ctk, check_mode=True)["removed"] == params["paths"]
    assert os.path.exists(params["paths"][0])
    assert cdi.run(dict(params, gpu=empty), ctk)["removed"] == params["paths"]
    assert not os.path.exists(params["paths"][0])
    assert not cdi.run(dict(params, gpu=empty), ctk)["changed"]
