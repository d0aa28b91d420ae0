/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * kubegpu test stand-in for NVIDIA's libnvidia-container.so.1 (NOT NVIDIA software): it only answers nvc_version()
 * with the package version, laid out like NVIDIA's `struct nvc_version` (nvc.h). No libc: built with -nostdlib,
 * so the package needs no dependency. NVC_MAJOR, NVC_MINOR, NVC_PATCH and NVC_VERSION come from build_repo.sh.
 */

struct nvc_version {
    unsigned int major;
    unsigned int minor;
    unsigned int patch;
    const char *string;
};

static const struct nvc_version version = {NVC_MAJOR, NVC_MINOR, NVC_PATCH, NVC_VERSION};

const struct nvc_version *nvc_version(void)
{
    return &version;
}
