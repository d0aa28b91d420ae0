/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The installed driver and the loaded kernel module (README.md, "Driver packages and the kernel module").
 *
 * Without the driver file ($FAKE_NVML_DRIVER_FILE, else /usr/lib/fake-nvml/driver-version) nothing here applies: the
 * profile's driver_version is what NVML reports, as before. The sandbox's stand-in driver packages
 * (sandbox/aptrepo) install that file, one line with the version of the user-space libraries they bring.
 *
 * The kernel module's version is the module file ($FAKE_NVML_MODULE_FILE, else /run/fake-nvml/module-version; /run is
 * a tmpfs, so a reboot unloads it). When it is missing, init "loads the module" by writing the driver file's version
 * there, as NVML and libcuda load the module through nvidia-modprobe on first use; a process that may not write it
 * sees the driver not loaded. When the two differ (a package upgrade without a reboot), init answers
 * NVML_ERROR_LIB_RM_VERSION_MISMATCH, as the real library does ("Driver/library version mismatch"). When they agree,
 * that version is the driver version and the NVML version is derived from it and the profile's CUDA version.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakenvml.h"

static const char *env_or(const char *name, const char *fallback)
{
    const char *env = getenv(name);

    return (env != NULL && env[0] != '\0') ? env : fallback;
}

/* The first line of path into buf: 0, or an errno (ENOENT when there is no file, EINVAL when it is not a version). */
static int read_version(const char *path, char *buf, size_t len)
{
    FILE *fp = fopen(path, "r");
    size_t n, i;
    int err;

    if (fp == NULL)
        return errno;
    if (fgets(buf, (int)len, fp) == NULL) {
        err = ferror(fp) ? EIO : EINVAL;
        fclose(fp);
        return err;
    }
    fclose(fp);
    n = strcspn(buf, "\r\n");
    buf[n] = '\0';
    if (n == 0)
        return EINVAL;
    for (i = 0; i < n; i++)
        if (!((buf[i] >= '0' && buf[i] <= '9') || buf[i] == '.'))
            return EINVAL;
    return 0;
}

/* "Load the module": write version to path atomically (a temporary file beside it, then rename). */
static int load_module(const char *path, const char *version)
{
    char tmp[PATH_MAX], dir[PATH_MAX];
    char *slash;
    int fd, err = 0;
    size_t len = strlen(version);

    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (slash != NULL && slash != dir) {
        *slash = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return errno;
    }
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= sizeof(tmp))
        return ENAMETOOLONG;
    fd = mkstemp(tmp);
    if (fd < 0)
        return errno;
    if (fchmod(fd, 0644) != 0 || write(fd, version, len) != (ssize_t)len || write(fd, "\n", 1) != 1)
        err = errno ? errno : EIO;
    if (close(fd) != 0 && err == 0)
        err = errno;
    if (err == 0 && rename(tmp, path) != 0)
        err = errno;
    if (err != 0)
        unlink(tmp);
    return err;
}

nvmlReturn_t fake_driver_apply(struct fake_profile *p, char *msg, size_t msglen)
{
    const char *driver_path = env_or(FAKE_DRIVER_FILE_ENV, FAKE_DEFAULT_DRIVER_FILE);
    const char *module_path = env_or(FAKE_MODULE_FILE_ENV, FAKE_DEFAULT_MODULE_FILE);
    char library[FAKE_STR_MAX - 16], module[FAKE_STR_MAX - 16];   /* room for nvml_version's "<cuda major>." */
    int err;

    err = read_version(driver_path, library, sizeof(library));
    if (err == ENOENT || err == ENOTDIR)
        return NVML_SUCCESS;   /* no stand-in driver installed: the profile's version */
    if (err != 0) {
        snprintf(msg, msglen, "fake NVML: %s: %s", driver_path,
                 err == EINVAL ? "not a driver version (one line of digits and dots)" : strerror(err));
        return NVML_ERROR_UNKNOWN;
    }
    err = read_version(module_path, module, sizeof(module));
    if (err == ENOENT) {
        if (load_module(module_path, library) != 0)
            return NVML_ERROR_DRIVER_NOT_LOADED;   /* as nvidia-modprobe run without the right to load it */
        snprintf(module, sizeof(module), "%s", library);
    } else if (err != 0) {
        snprintf(msg, msglen, "fake NVML: %s: %s", module_path,
                 err == EINVAL ? "not a driver version (one line of digits and dots)" : strerror(err));
        return NVML_ERROR_UNKNOWN;
    }
    if (strcmp(module, library) != 0)
        return NVML_ERROR_LIB_RM_VERSION_MISMATCH;
    snprintf(p->driver_version, sizeof(p->driver_version), "%s", library);
    snprintf(p->nvml_version, sizeof(p->nvml_version), "%d.%s", p->cuda_driver_version / 1000, library);
    return NVML_SUCCESS;
}
