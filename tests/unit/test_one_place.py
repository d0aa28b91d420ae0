# SPDX-License-Identifier: GPL-3.0-or-later
"""One place for each fact: where YAML has to repeat a value that the code defines once (a role default that mirrors a
module default, an argument spec's documented default, the runtimes the role knows), this fails when the copies
drift apart, naming both places.

Module defaults are read from each module's DOCUMENTATION, which ``ansible-test sanity`` (validate-modules) keeps equal
to its argument spec, whose defaults come from the constants under plugins/module_utils.
"""

import re
from pathlib import Path

import pytest
import yaml

from ansible_cli import documented_options
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import args as nv_args
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import registry

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
MODULE_TASK = re.compile(r"^kubegpu\.cluster\.(\w+)$")
# "{{ var }}", "{{ var or omit }}", "{{ var | default(omit) }}", "{{ var | default(omit, true) }}"
PLAIN_VAR = re.compile(r"^\{\{\s*(\w+)\s*(or omit|\|\s*default\(omit(, true)?\))?\s*\}\}$")


def load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def module_options(module):
    """A module's documented options (with the options of its doc fragments that it extends)."""
    return documented_options(module)


def role_defaults(role):
    return load(ROOT / "roles" / role / "defaults" / "main.yml")


def literal(value):
    """Whether a role default is a plain value (not a template that reads something else)."""
    return "{{" not in yaml.safe_dump(value)


def tasks(role):
    for path in sorted((ROOT / "roles" / role / "tasks").glob("*.yml")):
        for task in load(path) or []:
            yield path, task


def role_to_module():
    """``(role, variable, module, option, where)`` for every module option a role task sets from one variable."""
    out = []
    for role in ROLES:
        for path, task in tasks(role):
            for key, args in task.items():
                match = MODULE_TASK.match(key)
                if not match or not isinstance(args, dict):
                    continue
                for option, value in args.items():
                    var = PLAIN_VAR.match(value) if isinstance(value, str) else None
                    if var:
                        out.append((role, var.group(1), match.group(1), option, path.relative_to(ROOT)))
    return out


def mirrored():
    """The mappings where a role default mirrors a module default: a plain value on both sides (not a template, not
    another role's variable, not a module option without a default, not "" standing for "omit")."""
    out = []
    for role, var, module, option, where in role_to_module():
        defaults = role_defaults(role)
        spec = module_options(module).get(option) or {}
        if var not in defaults or not literal(defaults[var]) or "default" not in spec:
            continue
        if spec.get("type") == "str" and defaults[var] == "" and spec["default"] is None:
            continue
        out.append((role, var, module, option, str(where)))
    return out


MAPPINGS = role_to_module()
MIRRORED = mirrored()


def test_the_roles_pass_their_variables_to_modules():
    """The mappings are read from the task files; too few would make the next test pass on nothing."""
    modules = set(m[2] for m in MAPPINGS)
    assert {"device_plugin_deploy", "gpu_node_labels", "gpu_proof", "nvidia_runtime_config"} <= modules
    assert len(MAPPINGS) > 40 and len(MIRRORED) > 25


@pytest.mark.parametrize("role, var, module, option, where", MIRRORED, ids=["%s->%s.%s" % (m[1], m[2], m[3]) for m in MIRRORED])
def test_a_role_default_equals_the_module_default_it_mirrors(role, var, module, option, where):
    spec = module_options(module)[option]
    have = role_defaults(role)[var]
    assert have == spec["default"], ("%s: %s defaults to %r in roles/%s/defaults/main.yml, but %s's %s defaults to %r"
                                     % (where, var, have, role, module, option, spec["default"]))
    choices = (load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
               .get(var, {}).get("choices"))
    if choices is not None and spec.get("choices") is not None:
        assert sorted(map(str, choices)) == sorted(map(str, spec["choices"])), (var, module, option)


def argument_spec_options(role):
    """``(entry point, name, spec)`` of every option of every entry point of a role, sub-options left out."""
    specs = load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]
    for entry, spec in sorted(specs.items()):
        for name, option in sorted((spec.get("options") or {}).items()):
            yield entry, name, option


@pytest.mark.parametrize("role", ROLES)
def test_argument_spec_defaults_equal_the_role_defaults(role):
    defaults = role_defaults(role)
    drift = []
    for entry, name, option in argument_spec_options(role):
        if name in defaults and "default" in option and literal(defaults[name]) and option["default"] != defaults[name]:
            drift.append("%s: meta/argument_specs.yml (%s) says %r, defaults/main.yml %r"
                         % (name, entry, option["default"], defaults[name]))
        if name.startswith(role + "_") and name not in defaults and option.get("default") is not None:
            drift.append("%s: meta/argument_specs.yml (%s) documents a default that defaults/main.yml does not set"
                         % (name, entry))
    assert drift == []


# Role defaults that mirror a constant no module option carries as its default.
CONSTANTS = [
    ("device_plugin", "device_plugin_tolerations", nv.DEFAULT_TOLERATIONS),
    ("gpu_validation", "gpu_validation_tolerations", nv.PROOF_TOLERATIONS),
    ("gpu_driver", "gpu_driver_min_version", nv.DRIVER_MIN_VERSION),
    ("container_toolkit", "container_toolkit_runtime_name", nv.RUNTIME_NAME),
    ("container_toolkit", "container_toolkit_runtime_path", nv.RUNTIME_PATH),
    ("dra", "dra_device_class", nv.DRA_DEVICE_CLASS_GPU),
] + [("container_toolkit", "container_toolkit_%s_config" % name, adapter.config_path)
     for name, adapter in sorted(registry.RUNTIMES.items())] + [
    ("container_toolkit", "container_toolkit_%s_drop_in" % name, adapter.drop_in_path)
    for name, adapter in sorted(registry.RUNTIMES.items()) if adapter.drop_in_path]


@pytest.mark.parametrize("role, var, constant", CONSTANTS, ids=[c[1] for c in CONSTANTS])
def test_a_role_default_equals_the_constant_it_mirrors(role, var, constant):
    assert role_defaults(role).get(var) == constant, "roles/%s/defaults/main.yml: %s" % (role, var)


def test_the_role_knows_exactly_the_runtimes_of_the_registry():
    table = load(ROOT / "roles" / "container_toolkit" / "vars" / "main.yml")["_container_toolkit_runtimes"]
    assert sorted(table) == registry.NAMES
    for name, adapter in registry.RUNTIMES.items():
        assert table[name] == {"binary": adapter.binary, "version_args": list(adapter.version_args),
                               "services": list(adapter.services or (adapter.service,))}, name
        for kind in ("configure", "verify"):
            assert (ROOT / "roles" / "container_toolkit" / "tasks" / ("%s_%s.yml" % (kind, name))).is_file()
    generated = load(ROOT / "roles" / "container_toolkit" / "vars" / "main.yml")["_container_toolkit_generated"]
    assert generated == dict((n, a.generated) for n, a in registry.RUNTIMES.items() if getattr(a, "generated", None))
    spec = load(ROOT / "roles" / "container_toolkit" / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(spec["container_toolkit_runtimes"]["choices"]) == registry.NAMES
    assert sorted(module_options("nvidia_runtime_config")["runtime"]["choices"]) == registry.NAMES


def test_the_sharing_sub_options_of_the_role_are_the_modules():
    role = load(ROOT / "roles" / "device_plugin" / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    module = module_options("device_plugin_deploy")["sharing"]["suboptions"]
    assert sorted(role["device_plugin_sharing"]["options"]) == sorted(module) == sorted(nv_args.SHARING_SPEC)
    for name in ("device_plugin_deploy", "gpu_node_labels"):  # both take the plugin config, from one spec
        assert set(nv_args.PLUGIN_CONFIG_ARG_SPEC) <= set(module_options(name)), name
    assert role["device_plugin_sharing"]["options"]["strategy"]["choices"] == list(nv.SHARING_STRATEGIES)


def test_the_health_check_sub_options_of_the_role_are_the_modules():
    role = load(ROOT / "roles" / "device_plugin" / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    module = module_options("device_plugin_deploy")["health_checks"]["suboptions"]
    assert sorted(role["device_plugin_health_checks"]["options"]) == sorted(module) == sorted(nv_args.health_checks_spec())
    for name, spec in nv_args.health_checks_spec().items():
        assert role["device_plugin_health_checks"]["options"][name]["default"] == module[name]["default"] == spec["default"]


def test_the_python_packages_the_roles_ask_for_are_pinned_in_requirements():
    pinned = set(re.match(r"[A-Za-z0-9._-]+", line).group(0).lower()
                 for line in (ROOT / "requirements.txt").read_text().splitlines() if line.strip() and not line.startswith("#"))
    asked = role_defaults("gpu_driver")["gpu_driver_python_packages"] + \
        load(ROOT / "roles" / "container_toolkit" / "vars" / "main.yml")["_container_toolkit_python_packages"]
    assert set(p.lower() for p in asked) <= pinned


def test_a_filter_documents_the_default_its_code_uses():
    source = (ROOT / "plugins" / "filter" / "driver_verdict.py").read_text(encoding="utf-8")
    doc = yaml.safe_load(re.search(r'DOCUMENTATION = r"""(.*?)"""', source, re.S).group(1))
    assert str(doc["options"]["min_version"]["default"]) == nv.DRIVER_MIN_VERSION


@pytest.mark.parametrize("name", ["runtime_report_check", "runtime_decisions"])
def test_the_runtime_filters_document_the_runtime_they_default_to(name):
    """Both take their runtime options from the nvidia_runtime doc fragment, whose defaults are the constants."""
    source = (ROOT / "plugins" / "filter" / (name + ".py")).read_text(encoding="utf-8")
    doc = yaml.safe_load(re.search(r'DOCUMENTATION = r"""(.*?)"""', source, re.S).group(1))
    assert doc["extends_documentation_fragment"] == ["kubegpu.cluster.nvidia_runtime"]
    fragment = (ROOT / "plugins" / "doc_fragments" / "nvidia_runtime.py").read_text(encoding="utf-8")
    options = yaml.safe_load(re.search(r'DOCUMENTATION = r"""(.*?)"""', fragment, re.S).group(1))["options"]
    assert (options["name"]["default"], options["path"]["default"]) == (nv.RUNTIME_NAME, nv.RUNTIME_PATH)


def test_the_proof_options_the_filter_decides_with_are_those_the_module_gets():
    """gpu_validation decides with proof_settled whether gpu_proof has to run: both must see the same options."""
    tasks = load(ROOT / "roles" / "gpu_validation" / "tasks" / "main.yml")
    # the NVIDIA proof (the AMD and Intel proofs, with a vendor, are not decided by the filter)
    [module_args] = [t["kubegpu.cluster.gpu_proof"] for t in tasks
                     if "kubegpu.cluster.gpu_proof" in t and "vendor" not in t["kubegpu.cluster.gpu_proof"]]
    decides = load(ROOT / "roles" / "gpu_validation" / "vars" / "main.yml")["_gpu_validation_decides"]
    assert set(decides) <= set(module_args)
    names = re.compile(r"_?gpu_validation_\w+")
    for option, value in decides.items():
        assert names.findall(value) == names.findall(module_args[option]), option
    # and every option of the module that changes which proofs run or what a record stands for is among them
    deciding = {"nodes", "per_node", "resource", "reprove", "proven_under", "plugin_configs", "image", "command", "args",
                "runtime_class", "success_pattern", "namespace"}
    assert deciding <= set(decides)


def test_the_proof_defaults_settled_fills_in_are_the_modules():
    from ansible_collections.kubegpu.cluster.plugins.module_utils import _vendors  # pylint: disable=import-outside-toplevel
    from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import proof  # pylint: disable=import-outside-toplevel
    from ansible_collections.kubegpu.cluster.plugins.filter.proof_settled import WORKLOAD  # pylint: disable=import-outside-toplevel
    documented = module_options("gpu_proof")
    # image and success_pattern have no default of their own: the vendor's (nvidia by default) fills them in
    default_vendor = _vendors.get(documented["vendor"]["default"])
    filled = WORKLOAD.fill(proof.DECIDING_DEFAULTS)
    assert vars(WORKLOAD) == vars(proof.Workload(**default_vendor.proof))
    for option, value in filled.items():
        default = documented[option].get("default", default_vendor.proof.get(option))
        assert default == value, option
    assert {"image", "success_pattern"} <= set(filled)


def test_the_proof_knows_the_dra_api_as_nvidia_s_driver_does():
    """_k8s/proof.py names resource.k8s.io and its versions itself (_k8s imports no vendor): the same as NVIDIA's."""
    from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import proof  # pylint: disable=import-outside-toplevel
    assert proof.RESOURCE_API_GROUP == nv.DRA_API_GROUP
    assert proof.RESOURCE_API_VERSIONS == nv.DRA_API_VERSIONS
