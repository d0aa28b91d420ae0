/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * libnvidia-ml.so.1 stand-in: answers the NVML calls the project needs from
 * a JSON GPU profile (see README.md), with NVML's real return codes.
 *
 * Conventions shared by every entry point:
 *   - a call before nvmlInit (or after the last nvmlShutdown) answers
 *     NVML_ERROR_UNINITIALIZED;
 *   - an unknown handle, an out-of-range index or a NULL pointer argument
 *     answers NVML_ERROR_INVALID_ARGUMENT;
 *   - then the profile's "errors" maps are consulted (MIG device, its GPU,
 *     top level; the exact name first, then the name without its _vN suffix);
 *   - only then is the answer computed from the profile.
 * Nothing is ever printed: callers (Ansible modules) own stdout.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakenvml.h"

#define API __attribute__((visibility("default")))

/* BEGIN fake_api_names: every exported nvmlReturn_t function; check_profiles.py reads this list */
const char *const fake_api_names[] = {
    "nvmlInit",
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetBrand",
    "nvmlDeviceGetVirtualizationMode",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetPciInfo_v2",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetAttributes_v2",
    "nvmlEventSetCreate",
    "nvmlEventSetFree",
    "nvmlEventSetWait",
    "nvmlEventSetWait_v2",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo",
    "nvmlGpuInstanceGetComputeInstanceById",
    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    "nvmlComputeInstanceGetInfo_v2",
    "nvmlDeviceGetGpuInstances",
    "nvmlGpuInstanceGetComputeInstances",
    "nvmlDeviceSetMigMode",
    "nvmlDeviceGetGpuInstanceProfileInfoV",
    "nvmlDeviceGetGpuInstanceProfileInfoByIdV",
    "nvmlDeviceGetGpuInstancePossiblePlacements",
    "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
    "nvmlDeviceGetGpuInstanceRemainingCapacity",
    "nvmlDeviceCreateGpuInstance",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceDestroy",
    "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
    "nvmlGpuInstanceGetComputeInstancePossiblePlacements",
    "nvmlGpuInstanceGetComputeInstanceRemainingCapacity",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlGpuInstanceCreateComputeInstanceWithPlacement",
    "nvmlComputeInstanceDestroy",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetGpuFabricInfoV",
    NULL,
};
/* END fake_api_names */

static pthread_rwlock_t g_lock = PTHREAD_RWLOCK_INITIALIZER;
static unsigned int g_refcount;          /* nvmlInit calls not yet matched by nvmlShutdown */
static struct fake_profile *g_prof;      /* valid while g_refcount > 0 */
static char g_detail[FAKE_MSG_MAX];      /* why the last nvmlInit answered NVML_ERROR_UNKNOWN */

static void free_event_sets(void);       /* at the last nvmlShutdown: the sets' devices go with the profile */

int fake_api_known(const char *name)
{
    for (const char *const *n = fake_api_names; *n; n++)
        if (strcmp(*n, name) == 0)
            return 1;
    return 0;
}

/* ---------------------------------------------------------------- helpers */

/* Length of fn without a trailing _v<digits>. */
static size_t base_len(const char *fn)
{
    size_t n = strlen(fn);
    size_t i = n;

    while (i > 0 && fn[i - 1] >= '0' && fn[i - 1] <= '9')
        i--;
    if (i < n && i >= 2 && fn[i - 1] == 'v' && fn[i - 2] == '_')
        return i - 2;
    return n;
}

static nvmlReturn_t lookup_err(const struct fake_errs *e, const char *fn)
{
    size_t blen = base_len(fn);

    for (size_t i = 0; i < e->count; i++)
        if (strcmp(e->items[i].function, fn) == 0)
            return e->items[i].code;
    for (size_t i = 0; i < e->count; i++)
        if (strlen(e->items[i].function) == blen && strncmp(e->items[i].function, fn, blen) == 0)
            return e->items[i].code;
    return NVML_SUCCESS;
}

/* Injected answer for fn on device d (NULL for system calls). */
static nvmlReturn_t injected(const struct nvmlDevice_st *d, const char *fn)
{
    nvmlReturn_t rc;

    for (; d != NULL; d = d->parent) {
        rc = lookup_err(&d->errors, fn);
        if (rc != NVML_SUCCESS)
            return rc;
    }
    return lookup_err(&g_prof->errors, fn);
}

/* A handle is valid when it points at an entry of the current device table: a GPU, or a MIG device slot that a
 * compute instance occupies (a destroyed compute instance's handle is invalid, as NVML documents). */
static int handle_ok(nvmlDevice_t h)
{
    uintptr_t p = (uintptr_t)h;
    uintptr_t lo = (uintptr_t)g_prof->devs;
    uintptr_t hi = (uintptr_t)(g_prof->devs + g_prof->dev_count);

    return h != NULL && p >= lo && p < hi && (p - lo) % sizeof(*g_prof->devs) == 0 && (!h->is_mig || h->live);
}

static nvmlReturn_t put_str(char *buf, unsigned int length, const char *s)
{
    size_t n = strlen(s) + 1;

    if (n > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, n);
    return NVML_SUCCESS;
}

/* Common prologue: handle valid, out pointer present, then injected errors. */
#define DEV_PROLOGUE(h, outp, fn)                         \
    do {                                                  \
        nvmlReturn_t rc_;                                 \
        if (!handle_ok(h) || (outp) == NULL)              \
            return NVML_ERROR_INVALID_ARGUMENT;           \
        rc_ = injected((h), (fn));                        \
        if (rc_ != NVML_SUCCESS)                          \
            return rc_;                                   \
    } while (0)

/* Run impl under the read lock once the library is initialised. */
#define LOCKED(expr)                                                        \
    do {                                                                    \
        nvmlReturn_t rc_;                                                   \
        pthread_rwlock_rdlock(&g_lock);                                     \
        rc_ = g_refcount > 0 ? (expr) : NVML_ERROR_UNINITIALIZED;           \
        pthread_rwlock_unlock(&g_lock);                                     \
        return rc_;                                                         \
    } while (0)

/* Run impl under the write lock (MIG reconfiguration) once the library is initialised. */
#define LOCKED_W(expr)                                                      \
    do {                                                                    \
        nvmlReturn_t rc_;                                                   \
        pthread_rwlock_wrlock(&g_lock);                                     \
        rc_ = g_refcount > 0 ? (expr) : NVML_ERROR_UNINITIALIZED;           \
        pthread_rwlock_unlock(&g_lock);                                     \
        return rc_;                                                         \
    } while (0)

/* Before a call that reads the MIG layout: take another process's change to the state file (mig.c). */
static void mig_sync(void)
{
    if (!fake_mig_state_changed())
        return;
    pthread_rwlock_wrlock(&g_lock);
    if (g_refcount > 0 && fake_mig_state_changed())
        fake_mig_state_reload(g_prof);
    pthread_rwlock_unlock(&g_lock);
}

#define MIG_LOCKED(expr)                                                    \
    do {                                                                    \
        mig_sync();                                                         \
        LOCKED(expr);                                                       \
    } while (0)

/* ------------------------------------------------------- init / shutdown */

static const char *profile_path(void)
{
    const char *env = getenv(FAKE_PROFILE_ENV);

    return (env != NULL && env[0] != '\0') ? env : FAKE_DEFAULT_PROFILE;
}

static nvmlReturn_t do_init(const char *entry)
{
    struct fake_profile *p = NULL;
    char msg[FAKE_MSG_MAX];
    nvmlReturn_t rc;

    pthread_rwlock_wrlock(&g_lock);
    if (g_refcount > 0) {
        g_refcount++;
        pthread_rwlock_unlock(&g_lock);
        return NVML_SUCCESS;
    }
    rc = fake_profile_load(profile_path(), &p, msg, sizeof(msg));
    if (rc == NVML_SUCCESS) {
        rc = fake_driver_apply(p, msg, sizeof(msg));   /* the installed driver and the loaded module (driver.c) */
        if (rc != NVML_SUCCESS) {
            fake_profile_free(p);
            p = NULL;
        }
    }
    if (rc == NVML_SUCCESS) {
        rc = fake_mig_state_init(p, msg, sizeof(msg));   /* the MIG layouts the state file keeps */
        if (rc != NVML_SUCCESS) {
            fake_profile_free(p);
            p = NULL;
        }
    }
    if (rc == NVML_SUCCESS) {
        rc = lookup_err(&p->errors, entry);
        if (rc == NVML_SUCCESS)
            rc = lookup_err(&p->errors, "nvmlInit");
        msg[0] = '\0';
        if (rc != NVML_SUCCESS) {
            fake_profile_free(p);
            p = NULL;
        }
    }
    snprintf(g_detail, sizeof(g_detail), "%s", rc == NVML_ERROR_UNKNOWN ? msg : "");
    if (rc == NVML_SUCCESS) {
        g_prof = p;
        g_refcount = 1;
    }
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

API nvmlReturn_t nvmlInit(void)
{
    return do_init("nvmlInit");
}

API nvmlReturn_t nvmlInit_v2(void)
{
    return do_init("nvmlInit_v2");
}

API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;   /* NO_GPUS / NO_ATTACH / FORCE_INIT change nothing for a fake */
    return do_init("nvmlInitWithFlags");
}

API nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t rc = NVML_SUCCESS;

    pthread_rwlock_wrlock(&g_lock);
    if (g_refcount == 0) {
        rc = NVML_ERROR_UNINITIALIZED;
    } else {
        rc = lookup_err(&g_prof->errors, "nvmlShutdown");
        if (rc == NVML_SUCCESS && --g_refcount == 0) {
            free_event_sets();
            fake_profile_free(g_prof);
            g_prof = NULL;
        }
    }
    pthread_rwlock_unlock(&g_lock);
    return rc;
}

API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "The requested vgpu operation is not available on target device, because ECC is enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Ran out of critical resources, other than memory";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "The requested frequency is not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "The provided version is invalid/unsupported";
    case NVML_ERROR_DEPRECATED: return "The requested functionality has been deprecated";
    case NVML_ERROR_NOT_READY: return "The system is not ready for the request";
    case NVML_ERROR_GPU_NOT_FOUND: return "The GPU was not found";
    case NVML_ERROR_INVALID_STATE: return "The operation is not allowed in the current state";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "The requested reset type is not supported";
    case NVML_ERROR_UNKNOWN:
        return g_detail[0] != '\0' ? g_detail : "Unknown Error";
    }
    return "Unknown Error";
}

/* ----------------------------------------------------------------- system */

static nvmlReturn_t sys_string(const char *fn, const char *value, char *buf, unsigned int length)
{
    nvmlReturn_t rc;

    if (buf == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = injected(NULL, fn);
    return rc != NVML_SUCCESS ? rc : put_str(buf, length, value);
}

static nvmlReturn_t sys_cuda(const char *fn, int *version)
{
    nvmlReturn_t rc;

    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = injected(NULL, fn);
    if (rc == NVML_SUCCESS)
        *version = g_prof->cuda_driver_version;
    return rc;
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    LOCKED(sys_string("nvmlSystemGetDriverVersion", g_prof->driver_version, version, length));
}

API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    LOCKED(sys_string("nvmlSystemGetNVMLVersion", g_prof->nvml_version, version, length));
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    LOCKED(sys_cuda("nvmlSystemGetCudaDriverVersion", cudaDriverVersion));
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    LOCKED(sys_cuda("nvmlSystemGetCudaDriverVersion_v2", cudaDriverVersion));
}

/* ------------------------------------------------------------ enumeration */

static nvmlReturn_t dev_count(const char *fn, unsigned int *count)
{
    nvmlReturn_t rc;

    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = injected(NULL, fn);
    if (rc == NVML_SUCCESS)
        *count = g_prof->gpu_count;
    return rc;
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    LOCKED(dev_count("nvmlDeviceGetCount", deviceCount));
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    LOCKED(dev_count("nvmlDeviceGetCount_v2", deviceCount));
}

/* Hand out d after its own injected errors for the lookup function fn. */
static nvmlReturn_t hand_out(struct nvmlDevice_st *d, const char *fn, nvmlDevice_t *device)
{
    nvmlReturn_t rc = injected(d, fn);

    if (rc == NVML_SUCCESS)
        *device = d;
    return rc;
}

static nvmlReturn_t by_index(const char *fn, unsigned int index, nvmlDevice_t *device)
{
    if (device == NULL || index >= g_prof->gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    return hand_out(&g_prof->devs[index], fn, device);
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    LOCKED(by_index("nvmlDeviceGetHandleByIndex", index, device));
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    LOCKED(by_index("nvmlDeviceGetHandleByIndex_v2", index, device));
}

static nvmlReturn_t by_uuid(const char *uuid, nvmlDevice_t *device)
{
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_prof->dev_count; i++)
        if (handle_ok(&g_prof->devs[i]) && strcasecmp(g_prof->devs[i].uuid, uuid) == 0)
            return hand_out(&g_prof->devs[i], "nvmlDeviceGetHandleByUUID", device);
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    MIG_LOCKED(by_uuid(uuid, device));
}

/* Accepts domain:bus:device.function, domain:bus:device and bus:device.function (hex). */
static int parse_pci_query(const char *s, unsigned int *dom, unsigned int *bus, unsigned int *dev,
                           unsigned int *fn)
{
    size_t len = strlen(s);
    int n = -1;

    *dom = 0;
    *fn = 0;
    if (sscanf(s, "%x:%x:%x.%x%n", dom, bus, dev, fn, &n) == 4 && (size_t)n == len)
        return 1;
    n = -1;
    *fn = 0;
    if (sscanf(s, "%x:%x:%x%n", dom, bus, dev, &n) == 3 && (size_t)n == len)
        return 1;
    n = -1;
    *dom = 0;
    if (sscanf(s, "%x:%x.%x%n", bus, dev, fn, &n) == 3 && (size_t)n == len)
        return 1;
    return 0;
}

static nvmlReturn_t by_pci(const char *fn, const char *busId, nvmlDevice_t *device)
{
    unsigned int dom, bus, dev, func;

    if (busId == NULL || device == NULL || !parse_pci_query(busId, &dom, &bus, &dev, &func))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_prof->gpu_count; i++) {
        struct nvmlDevice_st *d = &g_prof->devs[i];

        if (d->pci_domain == dom && d->pci_bus == bus && d->pci_device == dev && d->pci_function == func)
            return hand_out(d, fn, device);
    }
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    LOCKED(by_pci("nvmlDeviceGetHandleByPciBusId", pciBusId, device));
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    LOCKED(by_pci("nvmlDeviceGetHandleByPciBusId_v2", pciBusId, device));
}

/* ------------------------------------------------------- device queries */

/* A MIG handle answers its slot under its GPU: "When used with MIG device handles this API returns indices that can
 * be passed to nvmlDeviceGetMigDeviceHandleByIndex" (nvml.h as vendored in go-nvml v0.13.4-1); nvidia-ctk's CDI
 * generator relies on it (nvidia-container-toolkit pkg/nvcdi/mig-device-nvml.go). */
static nvmlReturn_t get_index(nvmlDevice_t h, unsigned int *index)
{
    DEV_PROLOGUE(h, index, "nvmlDeviceGetIndex");
    *index = h->index;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    LOCKED(get_index(device, index));
}

static nvmlReturn_t get_name(nvmlDevice_t h, char *name, unsigned int length)
{
    DEV_PROLOGUE(h, name, "nvmlDeviceGetName");
    return put_str(name, length, h->name);
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    LOCKED(get_name(device, name, length));
}

static nvmlReturn_t get_uuid(nvmlDevice_t h, char *uuid, unsigned int length)
{
    DEV_PROLOGUE(h, uuid, "nvmlDeviceGetUUID");
    return put_str(uuid, length, h->uuid);
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    LOCKED(get_uuid(device, uuid, length));
}

static nvmlReturn_t get_serial(nvmlDevice_t h, char *serial, unsigned int length)
{
    DEV_PROLOGUE(h, serial, "nvmlDeviceGetSerial");
    if (h->is_mig || !h->has_serial)
        return NVML_ERROR_NOT_SUPPORTED;
    return put_str(serial, length, h->serial);
}

API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    LOCKED(get_serial(device, serial, length));
}

static nvmlReturn_t get_brand(nvmlDevice_t h, nvmlBrandType_t *type)
{
    DEV_PROLOGUE(h, type, "nvmlDeviceGetBrand");
    *type = h->brand;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    LOCKED(get_brand(device, type));
}

/* The profile's virtualization_mode (none: bare metal); a MIG handle answers its GPU's. */
static nvmlReturn_t get_virtualization_mode(nvmlDevice_t h, nvmlGpuVirtualizationMode_t *mode)
{
    DEV_PROLOGUE(h, mode, "nvmlDeviceGetVirtualizationMode");
    *mode = h->is_mig ? h->parent->virtualization_mode : h->virtualization_mode;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *pVirtualMode)
{
    LOCKED(get_virtualization_mode(device, pVirtualMode));
}

static nvmlReturn_t get_minor(nvmlDevice_t h, unsigned int *minor)
{
    DEV_PROLOGUE(h, minor, "nvmlDeviceGetMinorNumber");
    if (h->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *minor = h->minor_number;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    LOCKED(get_minor(device, minorNumber));
}

static nvmlReturn_t get_memory(nvmlDevice_t h, nvmlMemory_t *memory)
{
    DEV_PROLOGUE(h, memory, "nvmlDeviceGetMemoryInfo");
    memory->total = h->memory_total_mib * 1024ULL * 1024ULL;
    memory->used = 0;
    memory->free = memory->total;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    LOCKED(get_memory(device, memory));
}

static nvmlReturn_t get_memory_v2(nvmlDevice_t h, nvmlMemory_v2_t *memory)
{
    DEV_PROLOGUE(h, memory, "nvmlDeviceGetMemoryInfo_v2");
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = h->memory_total_mib * 1024ULL * 1024ULL;
    memory->reserved = 0;
    memory->used = 0;
    memory->free = memory->total;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    LOCKED(get_memory_v2(device, memory));
}

/* MIG handles report the PCI identity of their GPU. */
static const struct nvmlDevice_st *pci_owner(nvmlDevice_t h)
{
    return h->is_mig ? h->parent : h;
}

static nvmlReturn_t get_pci_legacy(nvmlDevice_t h, nvmlPciInfo_v2_t *pci, const char *fn)
{
    const struct nvmlDevice_st *d;

    DEV_PROLOGUE(h, pci, fn);
    d = pci_owner(h);
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busId, sizeof(pci->busId), "%04X:%02X:%02X.%X", d->pci_domain & 0xffffu, d->pci_bus,
             d->pci_device, d->pci_function);
    pci->domain = d->pci_domain;
    pci->bus = d->pci_bus;
    pci->device = d->pci_device;
    pci->pciDeviceId = d->pci_device_id;
    pci->pciSubSystemId = d->pci_subsystem_id;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_v2_t *pci)
{
    LOCKED(get_pci_legacy(device, pci, "nvmlDeviceGetPciInfo"));
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_v2_t *pci)
{
    LOCKED(get_pci_legacy(device, pci, "nvmlDeviceGetPciInfo_v2"));
}

static nvmlReturn_t get_pci_v3(nvmlDevice_t h, nvmlPciInfo_t *pci)
{
    const struct nvmlDevice_st *d;

    DEV_PROLOGUE(h, pci, "nvmlDeviceGetPciInfo_v3");
    d = pci_owner(h);
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", d->pci_domain & 0xffffu,
             d->pci_bus, d->pci_device, d->pci_function);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X", d->pci_domain, d->pci_bus, d->pci_device,
             d->pci_function);
    pci->domain = d->pci_domain;
    pci->bus = d->pci_bus;
    pci->device = d->pci_device;
    pci->pciDeviceId = d->pci_device_id;
    pci->pciSubSystemId = d->pci_subsystem_id;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    LOCKED(get_pci_v3(device, pci));
}

static nvmlReturn_t get_cc(nvmlDevice_t h, int *major, int *minor)
{
    if (minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_PROLOGUE(h, major, "nvmlDeviceGetCudaComputeCapability");
    *major = h->cc_major;
    *minor = h->cc_minor;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    LOCKED(get_cc(device, major, minor));
}

static nvmlReturn_t get_arch(nvmlDevice_t h, nvmlDeviceArchitecture_t *arch)
{
    DEV_PROLOGUE(h, arch, "nvmlDeviceGetArchitecture");
    *arch = h->architecture;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    LOCKED(get_arch(device, arch));
}

static nvmlReturn_t get_persistence(nvmlDevice_t h, nvmlEnableState_t *mode)
{
    DEV_PROLOGUE(h, mode, "nvmlDeviceGetPersistenceMode");
    if (h->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *mode = h->persistence_mode ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    LOCKED(get_persistence(device, mode));
}

/* -------------------------------------------------------------------- MIG */

static nvmlReturn_t get_mig_mode(nvmlDevice_t h, unsigned int *current, unsigned int *pending)
{
    if (pending == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_PROLOGUE(h, current, "nvmlDeviceGetMigMode");
    if (h->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!h->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    *current = h->mig_current ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pending = h->mig_pending ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    MIG_LOCKED(get_mig_mode(device, currentMode, pendingMode));
}

static nvmlReturn_t get_max_mig(nvmlDevice_t h, unsigned int *count)
{
    DEV_PROLOGUE(h, count, "nvmlDeviceGetMaxMigDeviceCount");
    if (h->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* zero when MIG is not supported or not enabled */
    *count = (h->mig_capable && h->mig_current) ? h->mig_max_devices : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    MIG_LOCKED(get_max_mig(device, count));
}

static nvmlReturn_t get_mig_by_index(nvmlDevice_t h, unsigned int index, nvmlDevice_t *mig)
{
    DEV_PROLOGUE(h, mig, "nvmlDeviceGetMigDeviceHandleByIndex");
    if (h->is_mig || !h->mig_capable || !h->mig_current || index >= h->mig_max_devices)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!h->mig_first[index].live)
        return NVML_ERROR_NOT_FOUND;   /* a free slot: no compute instance there */
    *mig = &h->mig_first[index];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice)
{
    MIG_LOCKED(get_mig_by_index(device, index, migDevice));
}

static nvmlReturn_t is_mig_handle(nvmlDevice_t h, unsigned int *is_mig)
{
    DEV_PROLOGUE(h, is_mig, "nvmlDeviceIsMigDeviceHandle");
    *is_mig = h->is_mig ? 1u : 0u;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    LOCKED(is_mig_handle(device, isMigDevice));
}

static nvmlReturn_t parent_of(nvmlDevice_t h, nvmlDevice_t *parent)
{
    DEV_PROLOGUE(h, parent, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    if (!h->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *parent = h->parent;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    LOCKED(parent_of(migDevice, device));
}

static nvmlReturn_t instance_id(nvmlDevice_t h, unsigned int *id, int compute)
{
    DEV_PROLOGUE(h, id, compute ? "nvmlDeviceGetComputeInstanceId" : "nvmlDeviceGetGpuInstanceId");
    if (!h->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = compute ? h->ci_id : h->gi_id;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    LOCKED(instance_id(device, id, 0));
}

API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    LOCKED(instance_id(device, id, 1));
}

static nvmlReturn_t get_attributes(nvmlDevice_t h, nvmlDeviceAttributes_t *attr, const char *fn)
{
    DEV_PROLOGUE(h, attr, fn);
    /* nvml.h: "This API currently only supports MIG device handles". A real H200 on driver 580.159.04 answers
     * NOT_SUPPORTED for its GPU handle (tests/fixtures/realgpu/h200-580.159.04.json, nvml_probe's attributes). */
    if (!h->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(attr, 0, sizeof(*attr));
    attr->multiprocessorCount = h->multiprocessor_count;
    attr->memorySizeMB = h->memory_total_mib;
    attr->sharedCopyEngineCount = h->copy_engines;
    attr->sharedDecoderCount = h->decoders;
    attr->sharedEncoderCount = h->encoders;
    attr->sharedJpegCount = h->jpegs;
    attr->sharedOfaCount = h->ofas;
    attr->gpuInstanceSliceCount = h->gi_slices;
    attr->computeInstanceSliceCount = h->ci_slices;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    LOCKED(get_attributes(device, attributes, "nvmlDeviceGetAttributes"));
}

API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    LOCKED(get_attributes(device, attributes, "nvmlDeviceGetAttributes_v2"));
}

/* ----------------------------------------------------------------- events */

/*
 * An event set: the GPUs registered with it, each with its event mask, the time of its registration and which of its
 * profile's XID events were delivered. Sets live in one list, so that a stale or foreign pointer is refused; the last
 * nvmlShutdown frees them all (their devices go with the profile). The event mutex guards the list and every set;
 * it is taken inside the read lock, and never held while waiting.
 */
struct ev_reg {
    struct nvmlDevice_st *dev;
    unsigned long long mask;
    unsigned long long since_ms;
    unsigned char *delivered;        /* one flag per dev->xids entry */
};

struct nvmlEventSet_st {
    struct nvmlEventSet_st *next;
    struct ev_reg *regs;
    size_t count;
};

static pthread_mutex_t g_ev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvmlEventSet_st *g_sets;

static unsigned long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000ULL + (unsigned long long)ts.tv_nsec / 1000000ULL;
}

static void free_set(struct nvmlEventSet_st *set)
{
    for (size_t i = 0; i < set->count; i++)
        free(set->regs[i].delivered);
    free(set->regs);
    free(set);
}

/* Called with the write lock held (last nvmlShutdown). */
static void free_event_sets(void)
{
    pthread_mutex_lock(&g_ev_lock);
    while (g_sets != NULL) {
        struct nvmlEventSet_st *next = g_sets->next;

        free_set(g_sets);
        g_sets = next;
    }
    pthread_mutex_unlock(&g_ev_lock);
}

/* Whether set is a live event set (g_ev_lock held). */
static int set_ok(nvmlEventSet_t set)
{
    for (struct nvmlEventSet_st *s = g_sets; s != NULL; s = s->next)
        if (s == set)
            return 1;
    return 0;
}

static nvmlReturn_t set_create(nvmlEventSet_t *set)
{
    struct nvmlEventSet_st *s;
    nvmlReturn_t rc;

    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = injected(NULL, "nvmlEventSetCreate");
    if (rc != NVML_SUCCESS)
        return rc;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    pthread_mutex_lock(&g_ev_lock);
    s->next = g_sets;
    g_sets = s;
    pthread_mutex_unlock(&g_ev_lock);
    *set = s;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    LOCKED(set_create(set));
}

static nvmlReturn_t set_free(nvmlEventSet_t set)
{
    nvmlReturn_t rc = NVML_ERROR_INVALID_ARGUMENT;

    pthread_mutex_lock(&g_ev_lock);
    for (struct nvmlEventSet_st **p = &g_sets; *p != NULL; p = &(*p)->next) {
        if (*p == set) {
            rc = injected(NULL, "nvmlEventSetFree");
            if (rc == NVML_SUCCESS) {
                *p = set->next;
                free_set(set);
            }
            break;
        }
    }
    pthread_mutex_unlock(&g_ev_lock);
    return rc;
}

API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    LOCKED(set_free(set));
}

static nvmlReturn_t supported_events(nvmlDevice_t h, unsigned long long *types)
{
    DEV_PROLOGUE(h, types, "nvmlDeviceGetSupportedEventTypes");
    if (h->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;   /* this fake's choice: events are registered on the GPU */
    *types = h->event_types;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    LOCKED(supported_events(device, eventTypes));
}

static nvmlReturn_t register_events(nvmlDevice_t h, unsigned long long types, nvmlEventSet_t set)
{
    struct ev_reg *reg = NULL;
    nvmlReturn_t rc = NVML_SUCCESS;

    if (!handle_ok(h))
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&g_ev_lock);
    if (!set_ok(set))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        rc = injected(h, "nvmlDeviceRegisterEvents");
    if (rc == NVML_SUCCESS && (h->is_mig || (types & ~h->event_types) != 0))
        rc = NVML_ERROR_NOT_SUPPORTED;   /* a type the GPU does not support, as NVML answers */
    for (size_t i = 0; rc == NVML_SUCCESS && i < set->count; i++)
        if (set->regs[i].dev == h)
            reg = &set->regs[i];
    if (rc == NVML_SUCCESS && reg == NULL) {
        struct ev_reg *grown = realloc(set->regs, (set->count + 1) * sizeof(*set->regs));

        if (grown == NULL) {
            rc = NVML_ERROR_MEMORY;
        } else {
            set->regs = grown;
            reg = &set->regs[set->count];
            memset(reg, 0, sizeof(*reg));
            reg->dev = h;
            reg->delivered = calloc(h->xid_count + 1, 1);
            if (reg->delivered == NULL)
                rc = NVML_ERROR_MEMORY;
            else
                set->count++;
        }
    }
    if (rc == NVML_SUCCESS) {
        if ((types & nvmlEventTypeXidCriticalError) && !(reg->mask & nvmlEventTypeXidCriticalError))
            reg->since_ms = now_ms();   /* scheduled XIDs count from here */
        reg->mask |= types;
    }
    pthread_mutex_unlock(&g_ev_lock);
    return rc;
}

API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    LOCKED(register_events(device, eventTypes, set));
}

/*
 * The next scheduled XID of the set: delivered into data when due by now (returns SUCCESS), else the time it is due
 * (*due, NOT_FOUND), or nothing at all (*due = 0, NOT_FOUND). g_ev_lock held.
 */
static nvmlReturn_t next_event(struct nvmlEventSet_st *set, nvmlEventData_t *data, unsigned long long now,
                               unsigned long long *due)
{
    struct ev_reg *best_reg = NULL;
    size_t best = 0;
    unsigned long long best_at = 0;

    for (size_t i = 0; i < set->count; i++) {
        struct ev_reg *reg = &set->regs[i];

        if (!(reg->mask & nvmlEventTypeXidCriticalError))
            continue;
        for (size_t k = 0; k < reg->dev->xid_count; k++) {
            unsigned long long at = reg->since_ms + reg->dev->xids[k].after_ms;

            if (!reg->delivered[k] && (best_reg == NULL || at < best_at)) {
                best_reg = reg;
                best = k;
                best_at = at;
            }
        }
    }
    *due = best_reg != NULL ? best_at : 0;
    if (best_reg == NULL || best_at > now)
        return NVML_ERROR_NOT_FOUND;
    best_reg->delivered[best] = 1;
    data->device = best_reg->dev;
    data->eventType = nvmlEventTypeXidCriticalError;
    data->eventData = best_reg->dev->xids[best].xid;
    data->gpuInstanceId = best_reg->dev->xids[best].gi_id;
    data->computeInstanceId = best_reg->dev->xids[best].ci_id;
    return NVML_SUCCESS;
}

/*
 * Wait up to timeoutms for the next event, as NVML does: NVML_ERROR_TIMEOUT when none comes. The locks are let go
 * while sleeping (a shutdown from another thread is not held up), and the set is looked up again after each sleep.
 */
static nvmlReturn_t set_wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms, const char *fn)
{
    unsigned long long deadline = now_ms() + timeoutms;

    if (data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (;;) {
        unsigned long long now = now_ms(), due = 0, until;
        nvmlReturn_t rc;
        struct timespec ts;

        pthread_rwlock_rdlock(&g_lock);
        if (g_refcount == 0) {
            pthread_rwlock_unlock(&g_lock);
            return NVML_ERROR_UNINITIALIZED;
        }
        pthread_mutex_lock(&g_ev_lock);
        if (!set_ok(set))
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else if ((rc = injected(NULL, fn)) == NVML_SUCCESS)
            rc = next_event(set, data, now, &due);
        pthread_mutex_unlock(&g_ev_lock);
        pthread_rwlock_unlock(&g_lock);
        if (rc != NVML_ERROR_NOT_FOUND)
            return rc;
        if (now >= deadline)
            return NVML_ERROR_TIMEOUT;
        until = (due != 0 && due < deadline) ? due : deadline;
        ts.tv_sec = (time_t)((until - now) / 1000ULL);
        ts.tv_nsec = (long)(((until - now) % 1000ULL) * 1000000ULL);
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
}

API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return set_wait(set, data, timeoutms, "nvmlEventSetWait_v2");
}

API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return set_wait(set, data, timeoutms, "nvmlEventSetWait");
}

/* ----------------------------------------------------- GPU and compute instances */

/*
 * What go-nvlib reads to name a MIG device the way NVIDIA's device plugin and GFD do (go-nvlib
 * pkg/nvlib/device/mig_device.go, GetProfile): the GPU instance and compute instance behind the MIG device, their
 * profile ids, and the profile constants whose info carries those ids; and what mig-parted calls to change a layout
 * (pkg/mig/config/config.go SetMigConfig / ClearMigConfig: GetGpuInstanceProfileInfo, CreateGpuInstance,
 * GetComputeInstanceProfileInfo, CreateComputeInstance, Destroy). A GPU instance handle points at the GPU's
 * struct fake_gi entry; a compute instance handle is the MIG device's own entry (its slot). Profile tables,
 * placements and the state file are mig.c's.
 */

static int gi_ok(nvmlGpuInstance_t h)
{
    struct fake_gi *gi = (struct fake_gi *)h;
    uintptr_t p = (uintptr_t)gi;
    uintptr_t lo = (uintptr_t)g_prof->gis;
    uintptr_t hi = (uintptr_t)(g_prof->gis + g_prof->gi_count);

    return gi != NULL && p >= lo && p < hi && (p - lo) % sizeof(*g_prof->gis) == 0 && gi->live;
}

static int ci_ok(nvmlComputeInstance_t ci)
{
    struct nvmlDevice_st *d = (struct nvmlDevice_st *)ci;

    return handle_ok(d) && d->is_mig;
}

/* The NVML_GPU_INSTANCE_PROFILE_* constant whose profile id is id, or -1. */
static int gi_constant_of_id(unsigned int id)
{
    for (unsigned int c = 0; c < NVML_GPU_INSTANCE_PROFILE_COUNT; c++)
        if (fake_gi_profile_id(c) == id)
            return (int)c;
    return -1;
}

/* GPU g's table entry of a profile id (an id no constant has was refused before): NOT_SUPPORTED when g does not
 * offer it ("If ... profileId isn't supported", nvml.h). */
static nvmlReturn_t entry_of_id(const struct nvmlDevice_st *g, unsigned int id, const struct fake_gip **e,
                                unsigned int *constant)
{
    int c = gi_constant_of_id(id);

    if (c < 0 || !g->mig_capable || !g->gip[c].present)
        return NVML_ERROR_NOT_SUPPORTED;
    *e = &g->gip[c];
    *constant = (unsigned int)c;
    return NVML_SUCCESS;
}

/* "MIG <profile>" as nvidia-smi mig -lgip / -lcip names a profile, for the versioned infos' name. */
static void info_name(const struct nvmlDevice_st *g, unsigned int constant, unsigned int ci_slices, char *out,
                      size_t outlen)
{
    char profile[NVML_DEVICE_NAME_V2_BUFFER_SIZE - 4];

    fake_profile_name(g, constant, ci_slices, profile, sizeof(profile));
    snprintf(out, outlen, "MIG %s", profile);
}

/* The table entry behind a GPU instance profile constant; a MIG handle or a constant >= the count: INVALID_ARGUMENT
 * (callers enumerate constants until then, nvml.h); not MIG capable or not offered: NOT_SUPPORTED. */
static nvmlReturn_t entry_of_constant(nvmlDevice_t h, unsigned int profile, const struct fake_gip **e)
{
    if (h->is_mig || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!h->mig_capable || !h->gip[profile].present)
        return NVML_ERROR_NOT_SUPPORTED;
    *e = &h->gip[profile];
    return NVML_SUCCESS;
}

static nvmlReturn_t gi_profile_info(nvmlDevice_t h, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info)
{
    const struct fake_gip *e = NULL;
    nvmlReturn_t rc;

    DEV_PROLOGUE(h, info, "nvmlDeviceGetGpuInstanceProfileInfo");
    rc = entry_of_constant(h, profile, &e);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(info, 0, sizeof(*info));
    info->id = e->id;
    info->sliceCount = e->slices;
    info->instanceCount = e->instances;
    info->multiprocessorCount = e->sms;
    info->copyEngineCount = e->copy_engines;
    info->decoderCount = e->decoders;
    info->encoderCount = e->encoders;
    info->jpegCount = e->jpegs;
    info->ofaCount = e->ofas;
    info->memorySizeMB = e->memory_mib;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                     nvmlGpuInstanceProfileInfo_t *info)
{
    LOCKED(gi_profile_info(device, profile, info));
}

/* The versioned infos fill nvmlGpuInstanceProfileInfo_v2_t or _v3_t by their version field; another version is
 * INVALID_ARGUMENT ("If ... info->version are invalid", nvml.h). */
static nvmlReturn_t gi_profile_info_v(nvmlDevice_t h, unsigned int profile, int by_id,
                                      nvmlGpuInstanceProfileInfo_v2_t *info)
{
    const char *fn = by_id ? "nvmlDeviceGetGpuInstanceProfileInfoByIdV" : "nvmlDeviceGetGpuInstanceProfileInfoV";
    const struct fake_gip *e = NULL;
    unsigned int version, constant = profile;
    nvmlReturn_t rc;

    if (!handle_ok(h) || info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    version = info->version;
    if (version != nvmlGpuInstanceProfileInfo_v2 && version != nvmlGpuInstanceProfileInfo_v3)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (by_id) {
        int c = gi_constant_of_id(profile);

        if (c < 0 || h->is_mig)
            return NVML_ERROR_INVALID_ARGUMENT;
        constant = (unsigned int)c;
    }
    rc = injected(h, fn);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = entry_of_constant(h, constant, &e);
    if (rc != NVML_SUCCESS)
        return rc;
    if (version == nvmlGpuInstanceProfileInfo_v2) {
        memset(info, 0, sizeof(*info));
        info->version = version;
        info->id = e->id;
        info->sliceCount = e->slices;
        info->instanceCount = e->instances;
        info->multiprocessorCount = e->sms;
        info->copyEngineCount = e->copy_engines;
        info->decoderCount = e->decoders;
        info->encoderCount = e->encoders;
        info->jpegCount = e->jpegs;
        info->ofaCount = e->ofas;
        info->memorySizeMB = e->memory_mib;
        info_name(h, constant, e->slices, info->name, sizeof(info->name));
    } else {
        nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *)info;

        memset(v3, 0, sizeof(*v3));
        v3->version = version;
        v3->id = e->id;
        v3->sliceCount = e->slices;
        v3->instanceCount = e->instances;
        v3->multiprocessorCount = e->sms;
        v3->copyEngineCount = e->copy_engines;
        v3->decoderCount = e->decoders;
        v3->encoderCount = e->encoders;
        v3->jpegCount = e->jpegs;
        v3->ofaCount = e->ofas;
        v3->memorySizeMB = e->memory_mib;
        info_name(h, constant, e->slices, v3->name, sizeof(v3->name));
    }
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                      nvmlGpuInstanceProfileInfo_v2_t *info)
{
    LOCKED(gi_profile_info_v(device, profile, 0, info));
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
                                                          nvmlGpuInstanceProfileInfo_v2_t *info)
{
    LOCKED(gi_profile_info_v(device, profileId, 1, info));
}

/* Every placement of a profile, free or not ("regardless of whether MIG is enabled or not", nvml.h); placements NULL:
 * only the count; a buffer smaller than the count: INSUFFICIENT_SIZE with the count. */
static nvmlReturn_t gi_placements(nvmlDevice_t h, unsigned int profile_id, nvmlInstancePlacement_t *placements,
                                  unsigned int *count, const char *fn)
{
    const struct fake_gip *e = NULL;
    unsigned int constant;
    nvmlReturn_t rc;

    if (!handle_ok(h) || count == NULL || h->is_mig || gi_constant_of_id(profile_id) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = injected(h, fn);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = entry_of_id(h, profile_id, &e, &constant);
    if (rc != NVML_SUCCESS)
        return rc;
    if (placements != NULL && *count < e->placement_count) {
        *count = e->placement_count;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int k = 0; placements != NULL && k < e->placement_count; k++) {
        placements[k].start = e->starts[k];
        placements[k].size = e->mem_slices;
    }
    *count = e->placement_count;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                               nvmlInstancePlacement_t *placements,
                                                               unsigned int *count)
{
    LOCKED(gi_placements(device, profileId, placements, count, "nvmlDeviceGetGpuInstancePossiblePlacements_v2"));
}

/* The first version (go-nvml falls back to it when _v2 is missing) answers the same. */
API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                            nvmlInstancePlacement_t *placements, unsigned int *count)
{
    LOCKED(gi_placements(device, profileId, placements, count, "nvmlDeviceGetGpuInstancePossiblePlacements"));
}

/* Whether a GPU instance may go at this placement: its memory slices free and its id (the span's swizzId) unused. */
static int gi_place_ok(const struct nvmlDevice_st *g, unsigned int start, unsigned int size)
{
    unsigned int id = fake_swizz_id(start, size);

    for (unsigned int k = 0; k < g->mig_max_devices; k++)
        if (g->gis[k].live && g->gis[k].id == id)
            return 0;
    return fake_gi_span_free(g, start, size);
}

/* How many more instances of a profile fit: the profile's instance count less the existing ones, and at most the
 * placements that are free together (taken in order; with power-of-two aligned spans that is the most there are). */
static unsigned int gi_capacity(struct nvmlDevice_st *g, unsigned int constant)
{
    const struct fake_gip *e = &g->gip[constant];
    unsigned int have = fake_gpu_gi_count(g, constant), n = 0;
    unsigned int chosen[FAKE_MIG_MEMORY_SLICES];

    for (unsigned int k = 0; k < e->placement_count; k++) {
        int ok = gi_place_ok(g, e->starts[k], e->mem_slices);

        for (unsigned int j = 0; ok && j < n; j++)
            ok = e->starts[k] >= chosen[j] + e->mem_slices || chosen[j] >= e->starts[k] + e->mem_slices;
        if (ok)
            chosen[n++] = e->starts[k];
    }
    if (have >= e->instances)
        return 0;
    return n < e->instances - have ? n : e->instances - have;
}

static nvmlReturn_t gi_remaining(nvmlDevice_t h, unsigned int profile_id, unsigned int *count)
{
    const struct fake_gip *e = NULL;
    unsigned int constant;
    nvmlReturn_t rc;

    if (!handle_ok(h) || count == NULL || h->is_mig || gi_constant_of_id(profile_id) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = injected(h, "nvmlDeviceGetGpuInstanceRemainingCapacity");
    if (rc != NVML_SUCCESS)
        return rc;
    if (!h->mig_capable || !h->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;   /* "If device doesn't have MIG mode enabled" (nvml.h) */
    rc = entry_of_id(h, profile_id, &e, &constant);
    if (rc != NVML_SUCCESS)
        return rc;
    *count = gi_capacity(h, constant);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                           unsigned int *count)
{
    MIG_LOCKED(gi_remaining(device, profileId, count));
}

/* A mutation could not start or end: the detail line of a malformed state file for nvmlErrorString. */
static nvmlReturn_t txn_failed(nvmlReturn_t rc, const char *msg)
{
    if (rc == NVML_ERROR_UNKNOWN && msg[0] != '\0')
        snprintf(g_detail, sizeof(g_detail), "%s", msg);
    return rc;
}

/*
 * nvmlDeviceSetMigMode. Changing the mode while GPU instances exist answers IN_USE and changes nothing (the driver
 * will not switch a GPU whose instances are in use; nvml.h: activationStatus IN_USE "if device unbind fails because
 * the device isn't idle"). mig.mode_change "immediate" (default): the mode is current at once, activationStatus
 * SUCCESS; "reset": only the pending mode changes and activationStatus is RESET_REQUIRED, as where a GPU reset or a
 * reboot must activate it (nvml.h: "VM reboot is required ... NVML_ERROR_RESET_REQUIRED"); mig_state.py reset plays
 * that reset. Requesting the current mode cancels a pending change.
 */
static nvmlReturn_t set_mig_mode(nvmlDevice_t h, unsigned int mode, nvmlReturn_t *status)
{
    char msg[FAKE_MSG_MAX];
    struct fake_txn t;
    nvmlReturn_t rc;
    int busy = 0;

    if (!handle_ok(h) || status == NULL || h->is_mig || mode > NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = injected(h, "nvmlDeviceSetMigMode");
    if (rc != NVML_SUCCESS)
        return rc;
    if (!h->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    rc = fake_txn_begin(g_prof, &t, msg, sizeof(msg));
    if (rc != NVML_SUCCESS)
        return txn_failed(rc, msg);
    for (unsigned int k = 0; k < h->mig_max_devices; k++)
        busy |= h->gis[k].live;
    if ((int)mode != h->mig_current && busy) {
        fake_txn_abort(g_prof, &t, h);
        *status = NVML_ERROR_IN_USE;
        return NVML_ERROR_IN_USE;
    }
    h->mig_pending = (int)mode;
    if (!h->mig_reset_required)
        h->mig_current = (int)mode;
    rc = fake_txn_commit(g_prof, &t, h);
    if (rc == NVML_SUCCESS)
        *status = h->mig_current == h->mig_pending ? NVML_SUCCESS : NVML_ERROR_RESET_REQUIRED;
    return rc;
}

API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus)
{
    LOCKED_W(set_mig_mode(device, mode, activationStatus));
}

/*
 * nvmlDeviceCreateGpuInstance (placement NULL: the first free placement the profile lists) and
 * nvmlDeviceCreateGpuInstanceWithPlacement. The id is the swizzId of the placement's span, as nvidia-smi shows GPU
 * instance ids (7-13 for 1g, 3-5 for 2g, 1-2 for 3g). MIG off: NOT_SUPPORTED; a profile id no constant has:
 * INVALID_ARGUMENT; one the GPU does not offer, or one this fake cannot place (no geometry): NOT_SUPPORTED; a
 * placement not in the profile's list: INVALID_ARGUMENT; no room (the profile's instance count reached, or the
 * memory slices taken): INSUFFICIENT_RESOURCES.
 */
static nvmlReturn_t create_gi(nvmlDevice_t h, unsigned int profile_id, int with_placement,
                              const nvmlInstancePlacement_t *placement, nvmlGpuInstance_t *out, const char *fn)
{
    const struct fake_gip *e = NULL;
    struct fake_gi *gi = NULL;
    unsigned int constant = 0, start = 0;
    char msg[FAKE_MSG_MAX];
    struct fake_txn t;
    nvmlReturn_t rc;
    int found = 0;

    if (!handle_ok(h) || out == NULL || h->is_mig || (with_placement && placement == NULL)
        || gi_constant_of_id(profile_id) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = injected(h, fn);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!h->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    rc = fake_txn_begin(g_prof, &t, msg, sizeof(msg));
    if (rc != NVML_SUCCESS)
        return txn_failed(rc, msg);
    rc = h->mig_current ? entry_of_id(h, profile_id, &e, &constant) : NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS && e->placement_count == 0)
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS && with_placement) {
        for (unsigned int k = 0; k < e->placement_count; k++)
            found |= e->starts[k] == placement->start;
        if (!found || placement->size != e->mem_slices)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else if (!gi_place_ok(h, placement->start, e->mem_slices))
            rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
        start = placement->start;
    } else if (rc == NVML_SUCCESS) {
        for (unsigned int k = 0; k < e->placement_count && !found; k++) {
            if (gi_place_ok(h, e->starts[k], e->mem_slices)) {
                start = e->starts[k];
                found = 1;
            }
        }
        if (!found)
            rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    if (rc == NVML_SUCCESS && fake_gpu_gi_count(h, constant) >= e->instances)
        rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (unsigned int k = 0; rc == NVML_SUCCESS && k < h->mig_max_devices && gi == NULL; k++)
        if (!h->gis[k].live)
            gi = &h->gis[k];
    if (rc == NVML_SUCCESS && gi == NULL)
        rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (rc != NVML_SUCCESS) {
        fake_txn_abort(g_prof, &t, h);
        return rc;
    }
    gi->id = fake_swizz_id(start, e->mem_slices);
    gi->profile = constant;
    gi->start = start;
    gi->size = e->mem_slices;
    gi->live = 1;
    rc = fake_txn_commit(g_prof, &t, h);
    if (rc == NVML_SUCCESS)
        *out = (nvmlGpuInstance_t)gi;
    return rc;
}

API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                             nvmlGpuInstance_t *gpuInstance)
{
    LOCKED_W(create_gi(device, profileId, 0, NULL, gpuInstance, "nvmlDeviceCreateGpuInstance"));
}

API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                          const nvmlInstancePlacement_t *placement,
                                                          nvmlGpuInstance_t *gpuInstance)
{
    LOCKED_W(create_gi(device, profileId, 1, placement, gpuInstance, "nvmlDeviceCreateGpuInstanceWithPlacement"));
}

/* After the refresh a mutation starts with, a GPU instance handle must still be the same instance (another process
 * may have destroyed it, or put another instance in its entry). */
struct gi_identity {
    unsigned int id, profile, start;
};

static struct gi_identity gi_identity_of(const struct fake_gi *gi)
{
    struct gi_identity who = {gi->id, gi->profile, gi->start};

    return who;
}

static int gi_still(nvmlGpuInstance_t h, struct gi_identity who)
{
    const struct fake_gi *gi = (const struct fake_gi *)h;

    return gi_ok(h) && gi->id == who.id && gi->profile == who.profile && gi->start == who.start;
}

/* nvmlGpuInstanceDestroy: IN_USE while compute instances exist ("compute instances are active", nvml.h). */
static nvmlReturn_t destroy_gi(nvmlGpuInstance_t h)
{
    struct fake_gi *gi = (struct fake_gi *)h;
    struct gi_identity who;
    char msg[FAKE_MSG_MAX];
    struct fake_txn t;
    nvmlReturn_t rc;

    if (!gi_ok(h))
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = injected(gi->gpu, "nvmlGpuInstanceDestroy");
    if (rc != NVML_SUCCESS)
        return rc;
    who = gi_identity_of(gi);
    rc = fake_txn_begin(g_prof, &t, msg, sizeof(msg));
    if (rc != NVML_SUCCESS)
        return txn_failed(rc, msg);
    if (!gi_still(h, who))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (fake_gi_ci_count(gi) > 0)
        rc = NVML_ERROR_IN_USE;
    if (rc != NVML_SUCCESS) {
        fake_txn_abort(g_prof, &t, gi->gpu);
        return rc;
    }
    gi->live = 0;
    return fake_txn_commit(g_prof, &t, gi->gpu);
}

API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    LOCKED_W(destroy_gi(gpuInstance));
}

static nvmlReturn_t gi_by_id(nvmlDevice_t h, unsigned int id, nvmlGpuInstance_t *gi)
{
    DEV_PROLOGUE(h, gi, "nvmlDeviceGetGpuInstanceById");
    if (h->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!h->mig_capable || !h->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned int k = 0; k < h->mig_max_devices; k++) {
        if (h->gis[k].live && h->gis[k].id == id) {
            *gi = (nvmlGpuInstance_t)&h->gis[k];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance)
{
    MIG_LOCKED(gi_by_id(device, id, gpuInstance));
}

/* Placement: start and size in memory slices (nvml.h: "Index of first occupied memory slice"). */
static nvmlReturn_t gi_info(nvmlGpuInstance_t h, nvmlGpuInstanceInfo_t *info)
{
    struct fake_gi *gi = (struct fake_gi *)h;
    nvmlReturn_t rc;

    if (!gi_ok(h) || info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = injected(gi->gpu, "nvmlGpuInstanceGetInfo");
    if (rc != NVML_SUCCESS)
        return rc;
    memset(info, 0, sizeof(*info));
    info->device = gi->gpu;
    info->id = gi->id;
    info->profileId = fake_gi_profile_id(gi->profile);
    info->placement.start = gi->start;
    info->placement.size = gi->size;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    MIG_LOCKED(gi_info(gpuInstance, info));
}

static nvmlReturn_t ci_by_id(nvmlGpuInstance_t h, unsigned int id, nvmlComputeInstance_t *ci)
{
    struct fake_gi *gi = (struct fake_gi *)h;
    struct nvmlDevice_st *g;
    nvmlReturn_t rc;

    if (!gi_ok(h) || ci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    g = gi->gpu;
    rc = injected(g, "nvmlGpuInstanceGetComputeInstanceById");
    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned int i = 0; i < g->mig_max_devices; i++) {
        if (g->mig_first[i].live && g->mig_first[i].gi == gi && g->mig_first[i].ci_id == id) {
            *ci = (nvmlComputeInstance_t)&g->mig_first[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                       nvmlComputeInstance_t *computeInstance)
{
    MIG_LOCKED(ci_by_id(gpuInstance, id, computeInstance));
}

/* Compute instance profiles: every constant whose slices fit in the GPU instance, id = the constant, with the
 * instance's share of the GPU instance's SMs and its shared engines; a larger one or an engine profile other than
 * shared (0): NOT_SUPPORTED; constant >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT: INVALID_ARGUMENT. */
static nvmlReturn_t ci_entry(nvmlGpuInstance_t h, unsigned int profile, unsigned int engine, const char *fn,
                             const struct fake_gip **e)
{
    struct fake_gi *gi = (struct fake_gi *)h;
    nvmlReturn_t rc = injected(gi->gpu, fn);

    if (rc != NVML_SUCCESS)
        return rc;
    *e = &gi->gpu->gip[gi->profile];
    if (engine != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED || fake_ci_slices(profile) > (*e)->slices)
        return NVML_ERROR_NOT_SUPPORTED;   /* a compute instance fits in its GPU instance */
    return NVML_SUCCESS;
}

static nvmlReturn_t ci_profile_info(nvmlGpuInstance_t h, unsigned int profile, unsigned int engine,
                                    nvmlComputeInstanceProfileInfo_t *info)
{
    const struct fake_gip *e = NULL;
    unsigned int slices = fake_ci_slices(profile);
    nvmlReturn_t rc;

    if (!gi_ok(h) || info == NULL || profile >= FAKE_CI_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = ci_entry(h, profile, engine, "nvmlGpuInstanceGetComputeInstanceProfileInfo", &e);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(info, 0, sizeof(*info));
    info->id = profile;
    info->sliceCount = slices;
    info->instanceCount = e->slices / slices;
    info->multiprocessorCount = e->sms * slices / e->slices;
    info->sharedCopyEngineCount = e->copy_engines;
    info->sharedDecoderCount = e->decoders;
    info->sharedEncoderCount = e->encoders;
    info->sharedJpegCount = e->jpegs;
    info->sharedOfaCount = e->ofas;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                              unsigned int engProfile,
                                                              nvmlComputeInstanceProfileInfo_t *info)
{
    MIG_LOCKED(ci_profile_info(gpuInstance, profile, engProfile, info));
}

static nvmlReturn_t ci_profile_info_v(nvmlGpuInstance_t h, unsigned int profile, unsigned int engine,
                                      nvmlComputeInstanceProfileInfo_v2_t *info)
{
    struct fake_gi *gi = (struct fake_gi *)h;
    const struct fake_gip *e = NULL;
    unsigned int slices = fake_ci_slices(profile), version;
    nvmlComputeInstanceProfileInfo_t base;
    nvmlReturn_t rc;

    if (!gi_ok(h) || info == NULL || profile >= FAKE_CI_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    version = info->version;
    if (version != nvmlComputeInstanceProfileInfo_v2 && version != nvmlComputeInstanceProfileInfo_v3)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = ci_entry(h, profile, engine, "nvmlGpuInstanceGetComputeInstanceProfileInfoV", &e);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(&base, 0, sizeof(base));
    base.id = profile;
    base.sliceCount = slices;
    base.instanceCount = e->slices / slices;
    base.multiprocessorCount = e->sms * slices / e->slices;
    base.sharedCopyEngineCount = e->copy_engines;
    base.sharedDecoderCount = e->decoders;
    base.sharedEncoderCount = e->encoders;
    base.sharedJpegCount = e->jpegs;
    base.sharedOfaCount = e->ofas;
    /* v2 and v3 share every field up to the name; v3 adds capabilities (0: no graphics) after it */
    memset(info, 0, version == nvmlComputeInstanceProfileInfo_v3 ? sizeof(nvmlComputeInstanceProfileInfo_v3_t)
                                                                 : sizeof(nvmlComputeInstanceProfileInfo_v2_t));
    info->version = version;
    memcpy(&info->id, &base, sizeof(base));
    info_name(gi->gpu, gi->profile, slices, info->name, sizeof(info->name));
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                               unsigned int engProfile,
                                                               nvmlComputeInstanceProfileInfo_v2_t *info)
{
    MIG_LOCKED(ci_profile_info_v(gpuInstance, profile, engProfile, info));
}

static nvmlReturn_t ci_placements(nvmlGpuInstance_t h, unsigned int profile, nvmlInstancePlacement_t *placements,
                                  unsigned int *count)
{
    struct fake_gi *gi = (struct fake_gi *)h;
    const struct fake_gip *e = NULL;
    unsigned int starts[FAKE_MIG_MEMORY_SLICES], n;
    nvmlReturn_t rc;

    if (!gi_ok(h) || count == NULL || profile >= FAKE_CI_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = ci_entry(h, profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                  "nvmlGpuInstanceGetComputeInstancePossiblePlacements", &e);
    if (rc != NVML_SUCCESS)
        return rc;
    n = fake_ci_placements(e->slices, profile, starts);
    if (placements != NULL && *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int k = 0; placements != NULL && k < n; k++) {
        placements[k].start = starts[k];
        placements[k].size = fake_ci_slices(profile);
    }
    *count = n;
    (void)gi;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance,
                                                                     unsigned int profileId,
                                                                     nvmlInstancePlacement_t *placements,
                                                                     unsigned int *count)
{
    MIG_LOCKED(ci_placements(gpuInstance, profileId, placements, count));
}

/* Free placements of a compute instance profile in a GPU instance, taken in order without overlapping each other. */
static unsigned int ci_capacity(const struct fake_gi *gi, unsigned int profile, unsigned int *first)
{
    unsigned int starts[FAKE_MIG_MEMORY_SLICES], chosen[FAKE_MIG_MEMORY_SLICES], n = 0, size = fake_ci_slices(profile);
    unsigned int total = fake_ci_placements(gi->gpu->gip[gi->profile].slices, profile, starts);

    for (unsigned int k = 0; k < total; k++) {
        int ok = fake_ci_span_free(gi, starts[k], size);

        for (unsigned int j = 0; ok && j < n; j++)
            ok = starts[k] >= chosen[j] + size || chosen[j] >= starts[k] + size;
        if (ok)
            chosen[n++] = starts[k];
    }
    if (first != NULL && n > 0)
        *first = chosen[0];
    return n;
}

static nvmlReturn_t ci_remaining(nvmlGpuInstance_t h, unsigned int profile, unsigned int *count)
{
    const struct fake_gip *e = NULL;
    nvmlReturn_t rc;

    if (!gi_ok(h) || count == NULL || profile >= FAKE_CI_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = ci_entry(h, profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                  "nvmlGpuInstanceGetComputeInstanceRemainingCapacity", &e);
    if (rc != NVML_SUCCESS)
        return rc;
    *count = ci_capacity((const struct fake_gi *)h, profile, NULL);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                    unsigned int profileId, unsigned int *count)
{
    MIG_LOCKED(ci_remaining(gpuInstance, profileId, count));
}

/*
 * nvmlGpuInstanceCreateComputeInstance (the first free placement) and ...WithPlacement: the lowest free compute
 * instance id of the GPU instance, the lowest free MIG device slot of the GPU, a UUID derived from the GPU's UUID
 * and the two ids (mig.c). A profile that does not fit: NOT_SUPPORTED; a placement not listed: INVALID_ARGUMENT; no
 * room: INSUFFICIENT_RESOURCES.
 */
static nvmlReturn_t create_ci(nvmlGpuInstance_t h, unsigned int profile, int with_placement,
                              const nvmlInstancePlacement_t *placement, nvmlComputeInstance_t *out, const char *fn)
{
    struct fake_gi *gi = (struct fake_gi *)h;
    const struct fake_gip *e = NULL;
    struct nvmlDevice_st *g, *slot = NULL;
    unsigned int starts[FAKE_MIG_MEMORY_SLICES], n, start = 0, id = 0, size = fake_ci_slices(profile);
    struct gi_identity who;
    char msg[FAKE_MSG_MAX];
    struct fake_txn t;
    nvmlReturn_t rc;
    int found = 0;

    if (!gi_ok(h) || out == NULL || profile >= FAKE_CI_PROFILE_COUNT || (with_placement && placement == NULL))
        return NVML_ERROR_INVALID_ARGUMENT;
    g = gi->gpu;
    rc = injected(g, fn);
    if (rc != NVML_SUCCESS)
        return rc;
    who = gi_identity_of(gi);
    rc = fake_txn_begin(g_prof, &t, msg, sizeof(msg));
    if (rc != NVML_SUCCESS)
        return txn_failed(rc, msg);
    if (!gi_still(h, who))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    e = &g->gip[gi->profile];
    if (rc == NVML_SUCCESS && size > e->slices)
        rc = NVML_ERROR_NOT_SUPPORTED;
    n = rc == NVML_SUCCESS ? fake_ci_placements(e->slices, profile, starts) : 0;
    if (rc == NVML_SUCCESS && with_placement) {
        for (unsigned int k = 0; k < n; k++)
            found |= starts[k] == placement->start;
        if (!found || placement->size != size)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else if (!fake_ci_span_free(gi, placement->start, size))
            rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
        start = placement->start;
    } else if (rc == NVML_SUCCESS && ci_capacity(gi, profile, &start) == 0) {
        rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    for (unsigned int k = 0; rc == NVML_SUCCESS && k < g->mig_max_devices && slot == NULL; k++)
        if (!g->mig_first[k].live)
            slot = &g->mig_first[k];
    if (rc == NVML_SUCCESS && slot == NULL)
        rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (rc != NVML_SUCCESS) {
        fake_txn_abort(g_prof, &t, g);
        return rc;
    }
    for (int taken = 1; taken; id += taken) {
        taken = 0;
        for (unsigned int k = 0; k < g->mig_max_devices; k++)
            taken |= g->mig_first[k].live && g->mig_first[k].gi == gi && g->mig_first[k].ci_id == id;
    }
    fake_ci_fill(slot, gi, id, profile, start, NULL);
    rc = fake_txn_commit(g_prof, &t, g);
    if (rc == NVML_SUCCESS)
        *out = (nvmlComputeInstance_t)slot;
    return rc;
}

API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                      nvmlComputeInstance_t *computeInstance)
{
    LOCKED_W(create_ci(gpuInstance, profileId, 0, NULL, computeInstance, "nvmlGpuInstanceCreateComputeInstance"));
}

API nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gpuInstance,
                                                                   unsigned int profileId,
                                                                   const nvmlInstancePlacement_t *placement,
                                                                   nvmlComputeInstance_t *computeInstance)
{
    LOCKED_W(create_ci(gpuInstance, profileId, 1, placement, computeInstance,
                       "nvmlGpuInstanceCreateComputeInstanceWithPlacement"));
}

/* nvmlComputeInstanceDestroy: its MIG device slot is free again (NOT_FOUND there), its handle invalid. */
static nvmlReturn_t destroy_ci(nvmlComputeInstance_t h)
{
    struct nvmlDevice_st *m = (struct nvmlDevice_st *)h, *g;
    char msg[FAKE_MSG_MAX], uuid[FAKE_STR_MAX];
    unsigned int gi_id, ci_id;
    struct fake_txn t;
    nvmlReturn_t rc;

    if (!ci_ok(h))
        return NVML_ERROR_INVALID_ARGUMENT;
    g = m->parent;
    rc = injected(g, "nvmlComputeInstanceDestroy");
    if (rc != NVML_SUCCESS)
        return rc;
    gi_id = m->gi_id;
    ci_id = m->ci_id;
    snprintf(uuid, sizeof(uuid), "%s", m->uuid);
    rc = fake_txn_begin(g_prof, &t, msg, sizeof(msg));
    if (rc != NVML_SUCCESS)
        return txn_failed(rc, msg);
    if (!ci_ok(h) || m->gi_id != gi_id || m->ci_id != ci_id || strcmp(m->uuid, uuid) != 0) {
        fake_txn_abort(g_prof, &t, g);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    m->live = 0;
    return fake_txn_commit(g_prof, &t, g);
}

API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    LOCKED_W(destroy_ci(computeInstance));
}

static nvmlReturn_t ci_info(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info)
{
    struct nvmlDevice_st *m = (struct nvmlDevice_st *)ci;
    nvmlReturn_t rc;

    if (!ci_ok(ci) || info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = injected(m->parent, "nvmlComputeInstanceGetInfo_v2");
    if (rc != NVML_SUCCESS)
        return rc;
    memset(info, 0, sizeof(*info));
    info->device = m->parent;
    info->gpuInstance = (nvmlGpuInstance_t)m->gi;
    info->id = m->ci_id;
    info->profileId = m->ci_profile;
    info->placement.start = m->ci_start;
    info->placement.size = m->ci_slices;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info)
{
    MIG_LOCKED(ci_info(computeInstance, info));
}

/*
 * The GPU and compute instances of a profile, listed by profile as mig-parted walks them to export or assert a MIG
 * configuration (mig-parted internal/nvlib/mig/mig.go: WalkGpuInstances, WalkComputeInstances). The caller passes
 * an array and its capacity in *count (go-nvml sizes it from the profile info's instanceCount); *count comes back as
 * the number of instances found.
 */
static nvmlReturn_t gpu_instances(nvmlDevice_t h, unsigned int profile_id, nvmlGpuInstance_t *gis, unsigned int *count)
{
    unsigned int found = 0;

    if (gis == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_PROLOGUE(h, count, "nvmlDeviceGetGpuInstances");
    if (h->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!h->mig_capable || !h->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;   /* "If device doesn't have MIG mode enabled" (nvml.h) */
    if (gi_constant_of_id(profile_id) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int k = 0; k < h->mig_max_devices; k++) {
        struct fake_gi *gi = &h->gis[k];

        if (!gi->live || fake_gi_profile_id(gi->profile) != profile_id)
            continue;
        if (found >= *count)
            return NVML_ERROR_INSUFFICIENT_SIZE;
        gis[found++] = (nvmlGpuInstance_t)gi;
    }
    *count = found;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                           nvmlGpuInstance_t *gpuInstances, unsigned int *count)
{
    MIG_LOCKED(gpu_instances(device, profileId, gpuInstances, count));
}

static nvmlReturn_t compute_instances(nvmlGpuInstance_t h, unsigned int profile_id, nvmlComputeInstance_t *cis,
                                      unsigned int *count)
{
    struct fake_gi *gi = (struct fake_gi *)h;
    struct nvmlDevice_st *g;
    unsigned int found = 0;
    nvmlReturn_t rc;

    if (!gi_ok(h) || cis == NULL || count == NULL || profile_id >= FAKE_CI_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    g = gi->gpu;
    rc = injected(g, "nvmlGpuInstanceGetComputeInstances");
    if (rc != NVML_SUCCESS)
        return rc;
    if (fake_ci_slices(profile_id) > g->gip[gi->profile].slices)
        return NVML_ERROR_NOT_SUPPORTED;   /* "If profileId isn't supported" (nvml.h), as its profile info answers */
    for (unsigned int i = 0; i < g->mig_max_devices; i++) {
        struct nvmlDevice_st *m = &g->mig_first[i];

        if (!m->live || m->gi != gi || m->ci_profile != profile_id)
            continue;
        if (found >= *count)
            return NVML_ERROR_INSUFFICIENT_SIZE;
        cis[found++] = (nvmlComputeInstance_t)m;
    }
    *count = found;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                    nvmlComputeInstance_t *computeInstances, unsigned int *count)
{
    MIG_LOCKED(compute_instances(gpuInstance, profileId, computeInstances, count));
}

/* ------------------------------------------------------------- topology */

/*
 * What go-gpuallocator reads when the device plugin answers GetPreferredAllocation for whole GPUs
 * (k8s-device-plugin internal/rm/nvml_manager.go alignedAlloc -> go-gpuallocator internal/links/device.go): the
 * common PCIe ancestor of every pair of GPUs, whose answer must be SUCCESS (any error fails the allocation), and
 * every link 0 .. NVML_NVLINK_MAX_LINKS-1 of each GPU, where NOT_SUPPORTED means "no such link" and any other error
 * fails it too.
 *
 * This fake's rule for the ancestor: GPUs with the same numa_node share a NUMA node (NVML_TOPOLOGY_NODE, nvidia-smi
 * topo's NODE), others are across the SMP interconnect (NVML_TOPOLOGY_SYSTEM, SYS). PCIe switches (PIX/PXB) and
 * host bridges (PHB) are not modelled.
 */
static nvmlReturn_t common_ancestor(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuTopologyLevel_t *level)
{
    nvmlReturn_t rc;

    if (!handle_ok(b) || a == b)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_PROLOGUE(a, level, "nvmlDeviceGetTopologyCommonAncestor");
    rc = injected(b, "nvmlDeviceGetTopologyCommonAncestor");
    if (rc != NVML_SUCCESS)
        return rc;
    if (a->is_mig || b->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;   /* this fake's choice: the PCIe topology is the GPUs' */
    *level = a->numa_node == b->numa_node ? NVML_TOPOLOGY_NODE : NVML_TOPOLOGY_SYSTEM;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                     nvmlGpuTopologyLevel_t *pathInfo)
{
    LOCKED(common_ancestor(device1, device2, pathInfo));
}

/* A link beyond the GPU's active ones answers NOT_SUPPORTED, as on a board without NVLink (go-gpuallocator skips
 * those); a link number beyond NVML_NVLINK_MAX_LINKS is INVALID_ARGUMENT ("if device or link is invalid", nvml.h). */
static nvmlReturn_t nvlink_check(nvmlDevice_t h, unsigned int link, const void *out, const char *fn)
{
    DEV_PROLOGUE(h, out, fn);
    if (link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (h->is_mig || link >= h->nvlink_count)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static nvmlReturn_t nvlink_state(nvmlDevice_t h, unsigned int link, nvmlEnableState_t *active)
{
    nvmlReturn_t rc = nvlink_check(h, link, active, "nvmlDeviceGetNvLinkState");

    if (rc == NVML_SUCCESS)
        *active = NVML_FEATURE_ENABLED;
    return rc;
}

API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    LOCKED(nvlink_state(device, link, isActive));
}

/* The profile's GPU at a PCI address, for the device id of an NVLink's remote end (NULL: an NVSwitch or a GPU the
 * profile does not list). */
static const struct nvmlDevice_st *gpu_at(const struct fake_pci_addr *a)
{
    for (unsigned int i = 0; i < g_prof->gpu_count; i++) {
        const struct nvmlDevice_st *d = &g_prof->devs[i];

        if (d->pci_domain == a->domain && d->pci_bus == a->bus && d->pci_device == a->device
            && d->pci_function == a->function)
            return d;
    }
    return NULL;
}

/* nvmlPciInfo_t of the remote end; "pciSubSystemId is not filled in this function" (nvml.h), so it stays 0. */
static nvmlReturn_t nvlink_remote_v2(nvmlDevice_t h, unsigned int link, nvmlPciInfo_t *pci)
{
    const struct fake_pci_addr *a;
    const struct nvmlDevice_st *peer;
    nvmlReturn_t rc = nvlink_check(h, link, pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");

    if (rc != NVML_SUCCESS)
        return rc;
    a = &h->nvlink_remote[link];
    peer = gpu_at(a);
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", a->domain & 0xffffu, a->bus,
             a->device, a->function);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X", a->domain, a->bus, a->device, a->function);
    pci->domain = a->domain;
    pci->bus = a->bus;
    pci->device = a->device;
    pci->pciDeviceId = peer != NULL ? peer->pci_device_id : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    LOCKED(nvlink_remote_v2(device, link, pci));
}

/* The first version writes the legacy layout, as nvmlDeviceGetPciInfo does. */
static nvmlReturn_t nvlink_remote_v1(nvmlDevice_t h, unsigned int link, nvmlPciInfo_v2_t *pci)
{
    const struct fake_pci_addr *a;
    const struct nvmlDevice_st *peer;
    nvmlReturn_t rc = nvlink_check(h, link, pci, "nvmlDeviceGetNvLinkRemotePciInfo");

    if (rc != NVML_SUCCESS)
        return rc;
    a = &h->nvlink_remote[link];
    peer = gpu_at(a);
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busId, sizeof(pci->busId), "%04X:%02X:%02X.%X", a->domain & 0xffffu, a->bus, a->device,
             a->function);
    pci->domain = a->domain;
    pci->bus = a->bus;
    pci->device = a->device;
    pci->pciDeviceId = peer != NULL ? peer->pci_device_id : 0;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_v2_t *pci)
{
    LOCKED(nvlink_remote_v1(device, link, pci));
}

/* ------------------------------------------------------------ GPU fabric */

/*
 * A GPU's place in an NVLink fabric, from the profile's "fabric"; without one NOT_SUPPORTED ("If device doesn't
 * support gpu fabric", nvml.h), as on every GPU before Hopper and on PCIe boards. go-nvlib's IsFabricAttached
 * (pkg/nvlib/device/device.go) asks nvmlDeviceGetGpuFabricInfo when the library exports it, else
 * nvmlDeviceGetGpuFabricInfoV, and counts a GPU as attached when the state is COMPLETED, the status SUCCESS and the
 * cluster UUID not all zero; GFD then labels nvidia.com/gpu.clique (k8s-device-plugin internal/lm/fabric.go).
 */
static nvmlReturn_t fabric_prologue(nvmlDevice_t h, const void *out, const char *fn)
{
    DEV_PROLOGUE(h, out, fn);
    if (h->is_mig || !h->has_fabric)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static nvmlReturn_t fabric_v1(nvmlDevice_t h, nvmlGpuFabricInfo_t *info)
{
    nvmlReturn_t rc = fabric_prologue(h, info, "nvmlDeviceGetGpuFabricInfo");

    if (rc != NVML_SUCCESS)
        return rc;
    memset(info, 0, sizeof(*info));
    memcpy(info->clusterUuid, h->fabric_cluster_uuid, sizeof(info->clusterUuid));
    info->status = h->fabric_status;
    info->cliqueId = h->fabric_clique_id;
    info->state = h->fabric_state;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo)
{
    LOCKED(fabric_v1(device, gpuFabricInfo));
}

/* The versioned call fills a v2 or v3 structure by its version field; another version is ARGUMENT_VERSION_MISMATCH.
 * The health fields stay "not supported" (0) beyond the profile's health_mask. */
static nvmlReturn_t fabric_v(nvmlDevice_t h, nvmlGpuFabricInfo_v3_t *info)
{
    nvmlReturn_t rc = fabric_prologue(h, info, "nvmlDeviceGetGpuFabricInfoV");
    unsigned int version;

    if (rc != NVML_SUCCESS)
        return rc;
    version = info->version;
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memset(info, 0, version == nvmlGpuFabricInfo_v3 ? sizeof(nvmlGpuFabricInfo_v3_t) : sizeof(nvmlGpuFabricInfo_v2_t));
    info->version = version;
    memcpy(info->clusterUuid, h->fabric_cluster_uuid, sizeof(info->clusterUuid));
    info->status = h->fabric_status;
    info->cliqueId = h->fabric_clique_id;
    info->state = h->fabric_state;
    info->healthMask = h->fabric_health_mask;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfo_v3_t *gpuFabricInfo)
{
    LOCKED(fabric_v(device, gpuFabricInfo));
}
