# SPDX-License-Identifier: GPL-3.0-or-later
"""Every role's README.md is what tools/role_readme.py writes from the role's argument spec."""

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir())
REGENERATE = ".venv/bin/python tools/role_readme.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("role_readme", ROOT / "tools" / "role_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


role_readme = load_tool()


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_an_argument_spec(role):
    assert (ROOT / "roles" / role / "meta" / "argument_specs.yml").is_file(), (
        "roles/%s has no meta/argument_specs.yml: every entry point is validated, and its README is generated from it"
        % role)


@pytest.mark.parametrize("role", [r for r in ROLES if (ROOT / "roles" / r / "meta" / "argument_specs.yml").is_file()])
def test_readme_is_in_step_with_the_argument_spec(role):
    path = ROOT / "roles" / role / "README.md"
    assert path.is_file(), "roles/%s/README.md is missing; write it with: %s %s" % (role, REGENERATE, role)
    wanted = role_readme.render(ROOT, role)
    if path.read_text(encoding="utf-8") != wanted:
        pytest.fail("roles/%s/README.md is out of step with its argument spec (or meta/main.yml, defaults, the "
                    "playbooks); regenerate it with: %s %s" % (role, REGENERATE, role), pytrace=False)


def fake_collection(tmp_path):
    """A copy of the collection's metadata with the gpu_driver and python_env roles and the gpu_driver playbook."""
    for name in ("galaxy.yml", "meta/runtime.yml", "playbooks/gpu_driver.yml", "plugins/modules/gpu_facts.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    for role in ("gpu_driver", "python_env"):
        shutil.copytree(ROOT / "roles" / role, tmp_path / "roles" / role)
    return tmp_path


def test_check_names_a_stale_readme_and_writing_fixes_it(tmp_path, capsys):
    root = fake_collection(tmp_path)
    assert role_readme.main(["--root", str(root)]) == 0
    assert role_readme.main(["--root", str(root), "--check"]) == 0
    spec = root / "roles" / "gpu_driver" / "meta" / "argument_specs.yml"
    spec.write_text(spec.read_text().replace("default: 1200", "default: 900"))
    capsys.readouterr()
    assert role_readme.main(["--root", str(root), "--check"]) == 1
    out = capsys.readouterr().out
    assert "-| `gpu_driver_reboot_timeout` | `1200` |" in out and "+| `gpu_driver_reboot_timeout` | `900` |" in out
    assert "regenerate with: %s gpu_driver" % REGENERATE in out and "python_env" not in out.split("regenerate")[1]
    assert role_readme.main(["--root", str(root), "gpu_driver"]) == 0
    assert role_readme.main(["--root", str(root), "--check"]) == 0


def test_required_options_first_then_spec_order_with_defaults_from_the_role(tmp_path):
    root = fake_collection(tmp_path)
    spec = root / "roles" / "python_env" / "meta" / "argument_specs.yml"
    spec.write_text(spec.read_text().replace("""      python_env_pip_extra_args:
        type: str
        default: ""
""", """      python_env_pip_extra_args:
        type: str
        required: true
""").replace("""      python_env_packages:
        type: list
        elements: str
        default: []
""", """      python_env_packages:
        type: list
        elements: str
"""))
    text = role_readme.render(root, "python_env")
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| `")]
    assert rows == ["`python_env_pip_extra_args`", "`python_env_venv`", "`python_env_packages`"]
    assert "| `python_env_pip_extra_args` | *required* |" in text
    assert "| `python_env_packages` | `[]` | list of str |" in text  # from defaults/main.yml
    assert "      python_env_pip_extra_args: <str>" in text  # the example sets what is required


@pytest.mark.parametrize("source, markdown", [
    ("C(nvidia-ml-py) into O(gpu_driver_python_venv)", "`nvidia-ml-py` into `gpu_driver_python_venv`"),
    ("V(true), E(KUBECONFIG), RV(result)", "`true`, `KUBECONFIG`, `result`"),
    ("M(kubegpu.cluster.gpu_facts) and P(kubegpu.cluster.from_toml#filter)",
     "`kubegpu.cluster.gpu_facts` and `kubegpu.cluster.from_toml`"),
    ("O(kubegpu.cluster.device_plugin_deploy#module:sharing)", "`sharing` (`kubegpu.cluster.device_plugin_deploy`)"),
    ("O(state=absent) and V(a\\)b)", "`state=absent` and `a)b`"),
    ("I(only) B(this) U(https://example.com) L(docs,https://example.com/d) R(text,anchor)",
     "*only* **this** <https://example.com> [docs](https://example.com/d) text"),
    ("C(a `b`)", "`` a `b` ``"),
    ("plain CUDA(not markup)", "plain CUDA(not markup)"),
])
def test_markup_becomes_markdown(source, markdown):
    assert role_readme.markup(source) == markdown


def test_table_cells_escape_pipes():
    lines = role_readme.variables_table({"x": {"type": "str", "default": "{{ a | b }}", "description": "a | b"}}, {})
    assert lines[2] == "| `x` | `{{ a \\| b }}` | str | a \\| b |"
