# SPDX-License-Identifier: GPL-3.0-or-later
"""A sysfs tree of a test's own (the ``sysfs`` fixture), laid out as the kernel lays it out, for the readers that take
a sysfs root (``_host``, ``_gpus``, ``_amd.sysfs``, ``_intel.sysfs``)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest


class SysfsTree(object):
    """Builds ``<root>/bus/pci/devices``, ``class/drm``, ``class/kfd``, ``module``; paths as sysfs has them, links
    relative as the kernel's are."""

    def __init__(self, root):
        self.root = str(root)
        os.makedirs(os.path.join(self.root, "bus", "pci", "devices"))
        os.makedirs(os.path.join(self.root, "module"))
        self.cards = 0

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path))
        with open(path, "w") as handle:
            handle.write("%s\n" % text)

    def link(self, rel, target):
        path = os.path.join(self.root, rel)
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path))
        os.symlink(target, path)

    def pci(self, address, vendor, device, pci_class="0x038000", driver=None, subsystem=("0x1002", "0x0c34")):
        """A PCI function; ``driver`` bound: the device's driver link and the driver folder's link back."""
        base = "bus/pci/devices/%s" % address
        for name, value in (("vendor", vendor), ("device", device), ("class", pci_class),
                            ("subsystem_vendor", subsystem[0]), ("subsystem_device", subsystem[1])):
            self.write("%s/%s" % (base, name), value)
        if driver:
            self.link("%s/driver" % base, "../../drivers/%s" % driver)
            self.link("bus/pci/drivers/%s/%s" % (driver, address), "../../devices/%s" % address)
        return base

    def drm(self, address, card=None, render=None):
        """cardN and renderDN of a PCI device (the next numbers unless given); returns (card, render)."""
        index = self.cards
        self.cards += 1
        card = card or "card%d" % index
        render = render or "renderD%d" % (128 + index)
        for name in (card, render):
            self.link("class/drm/%s/device" % name, "../../../bus/pci/devices/%s" % address)
        self.write("class/drm/%s-DP-1/status" % card, "disconnected")  # a connector: neither card nor render
        return card, render

    def module(self, name, version=None, pci_driver=True):
        self.write("module/%s/initstate" % name, "live")
        if version:
            self.write("module/%s/version" % name, version)
        if pci_driver:
            self.link("module/%s/drivers/pci:%s" % (name, name), "../../../bus/pci/drivers/%s" % name)

    def kfd_node(self, number, gpu_id, name="", **properties):
        base = "class/kfd/kfd/topology/nodes/%d" % number
        self.write(base + "/gpu_id", gpu_id)
        self.write(base + "/name", name)
        self.write(base + "/properties", "\n".join("%s %d" % item for item in sorted(properties.items())))


@pytest.fixture
def sysfs(tmp_path):
    return SysfsTree(tmp_path / "sys")
