/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * Profile loading for the fake NVML library: parse the JSON profile with
 * jansson, validate every field, and build the device table.
 *
 * The validation rules and the wording of every message are shared with
 * sandbox/fakenvml/check_profiles.py; keep the two in step (the tests feed
 * the same broken profiles to both and compare the field paths).
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "fakenvml.h"

#define PATH_MAX_LEN 256

struct ctx {
    const char *file;
    char *msg;
    size_t msglen;
};

struct name_value {
    const char *name;
    unsigned int value;
};

static const struct name_value arch_names[] = {
    {"kepler", NVML_DEVICE_ARCH_KEPLER},
    {"maxwell", NVML_DEVICE_ARCH_MAXWELL},
    {"pascal", NVML_DEVICE_ARCH_PASCAL},
    {"volta", NVML_DEVICE_ARCH_VOLTA},
    {"turing", NVML_DEVICE_ARCH_TURING},
    {"ampere", NVML_DEVICE_ARCH_AMPERE},
    {"ada", NVML_DEVICE_ARCH_ADA},
    {"hopper", NVML_DEVICE_ARCH_HOPPER},
    {"blackwell", NVML_DEVICE_ARCH_BLACKWELL},
    {NULL, 0},
};

/* NVML_BRAND_* values from pynvml */
static const struct name_value brand_names[] = {
    {"unknown", 0},
    {"quadro", 1},
    {"tesla", 2},
    {"nvs", 3},
    {"grid", 4},
    {"geforce", 5},
    {"titan", 6},
    {"nvidia_vapps", 7},
    {"nvidia_vpc", 8},
    {"nvidia_vcs", 9},
    {"nvidia_vws", 10},
    {"nvidia_cloud_gaming", 11},
    {"quadro_rtx", 12},
    {"nvidia_rtx", 13},
    {"nvidia", 14},
    {"geforce_rtx", 15},
    {"titan_rtx", 16},
    {NULL, 0},
};

static const struct name_value code_names[] = {
    {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED},
    {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT},
    {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED},
    {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION},
    {"ALREADY_INITIALIZED", NVML_ERROR_ALREADY_INITIALIZED},
    {"NOT_FOUND", NVML_ERROR_NOT_FOUND},
    {"INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE},
    {"INSUFFICIENT_POWER", NVML_ERROR_INSUFFICIENT_POWER},
    {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED},
    {"TIMEOUT", NVML_ERROR_TIMEOUT},
    {"IRQ_ISSUE", NVML_ERROR_IRQ_ISSUE},
    {"LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND},
    {"FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND},
    {"CORRUPTED_INFOROM", NVML_ERROR_CORRUPTED_INFOROM},
    {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST},
    {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED},
    {"OPERATING_SYSTEM", NVML_ERROR_OPERATING_SYSTEM},
    {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH},
    {"IN_USE", NVML_ERROR_IN_USE},
    {"MEMORY", NVML_ERROR_MEMORY},
    {"NO_DATA", NVML_ERROR_NO_DATA},
    {"VGPU_ECC_NOT_SUPPORTED", NVML_ERROR_VGPU_ECC_NOT_SUPPORTED},
    {"INSUFFICIENT_RESOURCES", NVML_ERROR_INSUFFICIENT_RESOURCES},
    {"FREQ_NOT_SUPPORTED", NVML_ERROR_FREQ_NOT_SUPPORTED},
    {"ARGUMENT_VERSION_MISMATCH", NVML_ERROR_ARGUMENT_VERSION_MISMATCH},
    {"DEPRECATED", NVML_ERROR_DEPRECATED},
    {"NOT_READY", NVML_ERROR_NOT_READY},
    {"GPU_NOT_FOUND", NVML_ERROR_GPU_NOT_FOUND},
    {"INVALID_STATE", NVML_ERROR_INVALID_STATE},
    {"RESET_TYPE_NOT_SUPPORTED", NVML_ERROR_RESET_TYPE_NOT_SUPPORTED},
    {"UNKNOWN", NVML_ERROR_UNKNOWN},
    {NULL, 0},
};

static const char *const top_keys[] = {
    "description", "driver_version", "nvml_version", "cuda_driver_version", "errors", "devices", NULL,
};
static const char *const device_keys[] = {
    "name", "uuid", "serial", "pci_bus_id", "pci_device_id", "pci_subsystem_id", "memory_total_mib",
    "compute_capability", "architecture", "brand", "persistence_mode", "minor_number",
    "multiprocessor_count", "numa_node", "event_types", "xid_events", "nvlinks", "fabric", "mig", "errors",
    "virtualization_mode", NULL,
};
/* NVML_GPU_VIRTUALIZATION_MODE_* by the names profiles use */
static const struct name_value virtualization_names[] = {
    {"none", 0},
    {"passthrough", 1},
    {"vgpu", 2},
    {"host_vgpu", 3},
    {"host_vsga", 4},
    {NULL, 0},
};
static const char *const fabric_keys[] = {
    "cluster_uuid", "clique_id", "state", "status", "health_mask", NULL,
};
/* NVML_GPU_FABRIC_STATE_* by the names profiles use */
static const struct name_value fabric_state_names[] = {
    {"not_supported", NVML_GPU_FABRIC_STATE_NOT_SUPPORTED},
    {"not_started", NVML_GPU_FABRIC_STATE_NOT_STARTED},
    {"in_progress", NVML_GPU_FABRIC_STATE_IN_PROGRESS},
    {"completed", NVML_GPU_FABRIC_STATE_COMPLETED},
    {NULL, 0},
};
static const char *const xid_keys[] = {
    "xid", "after_ms", "gpu_instance_id", "compute_instance_id", NULL,
};
/* nvmlEventType* bits by the names profiles use */
static const struct name_value event_names[] = {
    {"single_bit_ecc", (unsigned int)nvmlEventTypeSingleBitEccError},
    {"double_bit_ecc", (unsigned int)nvmlEventTypeDoubleBitEccError},
    {"pstate", (unsigned int)nvmlEventTypePState},
    {"xid_critical", (unsigned int)nvmlEventTypeXidCriticalError},
    {"clock", (unsigned int)nvmlEventTypeClock},
    {"power_source_change", (unsigned int)nvmlEventTypePowerSourceChange},
    {"mig_config_change", (unsigned int)nvmlEventMigConfigChange},
    {NULL, 0},
};
static const char *const mig_keys[] = {
    "capable", "current", "pending", "max_devices", "mode_change", "devices", NULL,
};
/* mig.mode_change: when nvmlDeviceSetMigMode takes effect */
static const struct name_value mode_change_names[] = {
    {"immediate", 0},
    {"reset", 1},
    {NULL, 0},
};
static const char *const mig_device_keys[] = {
    "uuid", "profile", "gpu_instance_slices", "compute_instance_slices", "memory_mib",
    "multiprocessor_count", "gpu_instance_id", "compute_instance_id", "copy_engine_count",
    "decoder_count", "encoder_count", "jpeg_count", "ofa_count", "gpu_instance_profile",
    "compute_instance_profile", "errors", NULL,
};

/* NVML_GPU_INSTANCE_PROFILE_<n>_SLICE and NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE by slice count (pynvml constants) */
static const int slice_profiles[9] = {-1, 0x0, 0x1, 0x2, 0x3, -1, 0x6, 0x4, 0x5};

int fake_profile_of_slices(unsigned int slices)
{
    return slices < 9 ? slice_profiles[slices] : -1;
}

int fake_code_from_name(const char *name, nvmlReturn_t *code)
{
    for (const struct name_value *nv = code_names; nv->name; nv++) {
        if (strcmp(nv->name, name) == 0) {
            *code = (nvmlReturn_t)nv->value;
            return 1;
        }
    }
    return 0;
}

__attribute__((format(printf, 3, 4)))
static int fail(struct ctx *c, const char *path, const char *fmt, ...)
{
    char detail[FAKE_MSG_MAX / 2];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    snprintf(c->msg, c->msglen, "fake NVML: %s: %s: %s", c->file, path, detail);
    return -1;
}

/* out = base + "." + key (or key alone at the top level), truncated to PATH_MAX_LEN */
static void join(char *out, const char *base, const char *key)
{
    size_t used = 0;

    out[0] = '\0';
    for (const char *part = base; part != NULL; part = (part == key) ? NULL : key) {
        size_t n = strlen(part);

        if (part == key && used > 0 && used + 1 < PATH_MAX_LEN)
            out[used++] = '.';
        if (n > PATH_MAX_LEN - 1 - used)
            n = PATH_MAX_LEN - 1 - used;
        memcpy(out + used, part, n);
        used += n;
        out[used] = '\0';
    }
}

static int check_keys(struct ctx *c, json_t *obj, const char *base, const char *const *allowed)
{
    const char *key;
    json_t *value;
    char path[PATH_MAX_LEN];

    json_object_foreach(obj, key, value) {
        int ok = key[0] == '_';   /* "_comment" style keys are ignored */
        for (const char *const *a = allowed; !ok && *a; a++)
            ok = strcmp(*a, key) == 0;
        if (!ok) {
            join(path, base, key);
            return fail(c, path, "unknown field");
        }
    }
    (void)value;
    return 0;
}

/* Fetch a member; returns 1 present, 0 absent (ok), -1 error. */
static int member(struct ctx *c, json_t *obj, const char *base, const char *key, int required, json_t **out,
                  char *path)
{
    join(path, base, key);
    *out = json_object_get(obj, key);
    if (*out == NULL) {
        if (required)
            return fail(c, path, "missing required field");
        return 0;
    }
    return 1;
}

static int get_string(struct ctx *c, json_t *obj, const char *base, const char *key, int required,
                      char *out, size_t outlen)
{
    char path[PATH_MAX_LEN];
    json_t *v;
    int r = member(c, obj, base, key, required, &v, path);

    if (r <= 0)
        return r;
    if (!json_is_string(v))
        return fail(c, path, "expected a string");
    if (json_string_length(v) == 0)
        return fail(c, path, "must not be empty");
    if (json_string_length(v) >= outlen)
        return fail(c, path, "longer than %zu characters", outlen - 1);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return fail(c, path, "contains a NUL character");
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 1;
}

static int get_int(struct ctx *c, json_t *obj, const char *base, const char *key, int required,
                   long long min, long long max, long long *out)
{
    char path[PATH_MAX_LEN];
    json_t *v;
    int r = member(c, obj, base, key, required, &v, path);

    if (r <= 0)
        return r;
    if (!json_is_integer(v))
        return fail(c, path, "expected an integer");
    if (json_integer_value(v) < min || json_integer_value(v) > max)
        return fail(c, path, "must be between %lld and %lld", min, max);
    *out = json_integer_value(v);
    return 1;
}

static int get_bool(struct ctx *c, json_t *obj, const char *base, const char *key, int required, int *out)
{
    char path[PATH_MAX_LEN];
    json_t *v;
    int r = member(c, obj, base, key, required, &v, path);

    if (r <= 0)
        return r;
    if (!json_is_boolean(v))
        return fail(c, path, "expected a boolean");
    *out = json_is_true(v);
    return 1;
}

static int get_enum(struct ctx *c, json_t *obj, const char *base, const char *key, const char *what,
                    const struct name_value *table, unsigned int *out)
{
    char path[PATH_MAX_LEN];
    char value[FAKE_STR_MAX];
    char choices[FAKE_MSG_MAX / 2] = "";
    int r = get_string(c, obj, base, key, 1, value, sizeof(value));

    if (r <= 0)
        return r < 0 ? -1 : 0;
    for (const struct name_value *nv = table; nv->name; nv++) {
        if (strcmp(nv->name, value) == 0) {
            *out = nv->value;
            return 1;
        }
        if (choices[0])
            strncat(choices, ", ", sizeof(choices) - strlen(choices) - 1);
        strncat(choices, nv->name, sizeof(choices) - strlen(choices) - 1);
    }
    join(path, base, key);
    return fail(c, path, "unknown %s '%s' (one of: %s)", what, value, choices);
}

static int is_hex_run(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

/* PREFIX-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx */
static int uuid_ok(const char *s, const char *prefix)
{
    static const size_t groups[] = {8, 4, 4, 4, 12};
    size_t plen = strlen(prefix);

    if (strncmp(s, prefix, plen) != 0)
        return 0;
    s += plen;
    for (size_t g = 0; g < 5; g++) {
        if (strlen(s) < groups[g] || !is_hex_run(s, groups[g]))
            return 0;
        s += groups[g];
        if (g < 4) {
            if (*s != '-')
                return 0;
            s++;
        }
    }
    return *s == '\0';
}

static int get_uuid(struct ctx *c, json_t *obj, const char *base, const char *prefix, char *out)
{
    char path[PATH_MAX_LEN];
    int r = get_string(c, obj, base, "uuid", 1, out, FAKE_STR_MAX);

    if (r <= 0)
        return r < 0 ? -1 : 0;
    if (!uuid_ok(out, prefix)) {
        join(path, base, "uuid");
        return fail(c, path, "not a well-formed UUID (expected %sxxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", prefix);
    }
    return 1;
}

/* "00000000:3B:00.0": 8 hex domain, 2 hex bus, 2 hex device, 1 hex function */
static int parse_bus_addr(const char *s, struct fake_pci_addr *a)
{
    unsigned int dom, bus, dev, fn;
    int n = -1;

    if (strlen(s) != 16 || s[8] != ':' || s[11] != ':' || s[14] != '.')
        return 0;
    if (!is_hex_run(s, 8) || !is_hex_run(s + 9, 2) || !is_hex_run(s + 12, 2) || !is_hex_run(s + 15, 1))
        return 0;
    if (sscanf(s, "%8x:%2x:%2x.%1x%n", &dom, &bus, &dev, &fn, &n) != 4 || n != 16)
        return 0;
    if (dev > 0x1f || fn > 7)
        return 0;
    a->domain = dom;
    a->bus = bus;
    a->device = dev;
    a->function = fn;
    return 1;
}

static int parse_bus_id(const char *s, struct nvmlDevice_st *d)
{
    struct fake_pci_addr a;

    if (!parse_bus_addr(s, &a))
        return 0;
    d->pci_domain = a.domain;
    d->pci_bus = a.bus;
    d->pci_device = a.device;
    d->pci_function = a.function;
    return 1;
}

/* "0x1DB410DE" */
static int get_hex32(struct ctx *c, json_t *obj, const char *base, const char *key, int required,
                     unsigned int *out)
{
    char path[PATH_MAX_LEN];
    char value[FAKE_STR_MAX];
    int r = get_string(c, obj, base, key, required, value, sizeof(value));

    if (r <= 0)
        return r;
    if (strlen(value) != 10 || value[0] != '0' || (value[1] != 'x' && value[1] != 'X')
        || !is_hex_run(value + 2, 8)) {
        join(path, base, key);
        return fail(c, path, "not a 32-bit hex id of the form 0x1DB410DE");
    }
    *out = (unsigned int)strtoul(value + 2, NULL, 16);
    return 1;
}

static int get_cc(struct ctx *c, json_t *obj, const char *base, int *major, int *minor)
{
    char path[PATH_MAX_LEN];
    char value[FAKE_STR_MAX];
    const char *dot;
    int r = get_string(c, obj, base, "compute_capability", 1, value, sizeof(value));

    if (r <= 0)
        return r < 0 ? -1 : 0;
    dot = strchr(value, '.');
    if (dot == NULL || dot == value || dot - value > 2 || strlen(dot + 1) != 1
        || !isdigit((unsigned char)dot[1]) || !isdigit((unsigned char)value[0])
        || (dot - value == 2 && !isdigit((unsigned char)value[1]))) {
        join(path, base, "compute_capability");
        return fail(c, path, "not of the form MAJOR.MINOR (e.g. 7.0)");
    }
    *major = atoi(value);
    *minor = dot[1] - '0';
    return 1;
}

static int parse_errors(struct ctx *c, json_t *obj, const char *base, int device_level, struct fake_errs *out)
{
    char path[PATH_MAX_LEN];
    char epath[PATH_MAX_LEN];
    json_t *errs, *v;
    const char *key;
    size_t i = 0;
    int r = member(c, obj, base, "errors", 0, &errs, path);

    if (r <= 0)
        return r;
    if (!json_is_object(errs))
        return fail(c, path, "expected an object");
    out->items = calloc(json_object_size(errs) + 1, sizeof(*out->items));
    if (out->items == NULL)
        return fail(c, path, "out of memory");
    json_object_foreach(errs, key, v) {
        nvmlReturn_t code;

        join(epath, path, key);
        if (!fake_api_known(key))
            return fail(c, epath, "unknown NVML function (see sandbox/fakenvml/README.md for the list)");
        if (device_level && strncmp(key, "nvmlDevice", 10) != 0)
            return fail(c, epath, "not a per-device NVML function (put it in the top-level errors)");
        if (!json_is_string(v))
            return fail(c, epath, "expected a string");
        if (!fake_code_from_name(json_string_value(v), &code))
            return fail(c, epath, "unknown NVML return code '%s' (a name like NOT_SUPPORTED or GPU_IS_LOST)",
                        json_string_value(v));
        out->items[i].function = strdup(key);
        if (out->items[i].function == NULL)
            return fail(c, epath, "out of memory");
        out->items[i].code = code;
        out->count = ++i;
    }
    return 1;
}

static int parse_mig_device(struct ctx *c, json_t *obj, const char *base, struct nvmlDevice_st *parent,
                            struct nvmlDevice_st *m)
{
    long long v;
    int r;
    char path[PATH_MAX_LEN];

    if (!json_is_object(obj))
        return fail(c, base, "expected an object");
    if (check_keys(c, obj, base, mig_device_keys) < 0)
        return -1;
    m->is_mig = 1;
    m->parent = parent;
    if (get_uuid(c, obj, base, "MIG-", m->uuid) < 0)
        return -1;
    if (get_string(c, obj, base, "profile", 1, m->mig_profile, sizeof(m->mig_profile)) < 0)
        return -1;
    if ((size_t)snprintf(m->name, sizeof(m->name), "%s MIG %s", parent->name, m->mig_profile) >= sizeof(m->name)) {
        join(path, base, "profile");
        return fail(c, path, "MIG device name '<GPU name> MIG <profile>' longer than %d characters",
                    FAKE_STR_MAX - 1);
    }
    if (get_int(c, obj, base, "gpu_instance_slices", 1, 1, 8, &v) < 0)
        return -1;
    m->gi_slices = (unsigned int)v;
    if (get_int(c, obj, base, "compute_instance_slices", 1, 1, 8, &v) < 0)
        return -1;
    m->ci_slices = (unsigned int)v;
    if (get_int(c, obj, base, "memory_mib", 1, 1, 1LL << 30, &v) < 0)
        return -1;
    m->memory_total_mib = (unsigned long long)v;
    if (get_int(c, obj, base, "multiprocessor_count", 1, 0, 65535, &v) < 0)
        return -1;
    m->multiprocessor_count = (unsigned int)v;
    if (get_int(c, obj, base, "gpu_instance_id", 1, 0, 65535, &v) < 0)
        return -1;
    m->gi_id = (unsigned int)v;
    if (get_int(c, obj, base, "compute_instance_id", 1, 0, 65535, &v) < 0)
        return -1;
    m->ci_id = (unsigned int)v;
    v = 0;
    if (get_int(c, obj, base, "copy_engine_count", 0, 0, 64, &v) < 0)
        return -1;
    m->copy_engines = (unsigned int)v;
    v = 0;
    if (get_int(c, obj, base, "decoder_count", 0, 0, 64, &v) < 0)
        return -1;
    m->decoders = (unsigned int)v;
    v = 0;
    if (get_int(c, obj, base, "encoder_count", 0, 0, 64, &v) < 0)
        return -1;
    m->encoders = (unsigned int)v;
    v = 0;
    if (get_int(c, obj, base, "jpeg_count", 0, 0, 64, &v) < 0)
        return -1;
    m->jpegs = (unsigned int)v;
    v = 0;
    if (get_int(c, obj, base, "ofa_count", 0, 0, 64, &v) < 0)
        return -1;
    m->ofas = (unsigned int)v;
    v = fake_profile_of_slices(m->gi_slices);
    r = get_int(c, obj, base, "gpu_instance_profile", 0, 0, NVML_GPU_INSTANCE_PROFILE_COUNT - 1, &v);
    if (r < 0)
        return -1;
    if (v < 0) {
        join(path, base, "gpu_instance_profile");
        return fail(c, path, "required when gpu_instance_slices is %u (no NVML_GPU_INSTANCE_PROFILE_%u_SLICE)",
                    m->gi_slices, m->gi_slices);
    }
    m->gi_profile = (unsigned int)v;
    v = fake_profile_of_slices(m->ci_slices);
    r = get_int(c, obj, base, "compute_instance_profile", 0, 0, NVML_COMPUTE_INSTANCE_PROFILE_COUNT - 1, &v);
    if (r < 0)
        return -1;
    if (v < 0) {
        join(path, base, "compute_instance_profile");
        return fail(c, path, "required when compute_instance_slices is %u (no NVML_COMPUTE_INSTANCE_PROFILE_%u_SLICE)",
                    m->ci_slices, m->ci_slices);
    }
    m->ci_profile = (unsigned int)v;
    /* parent-level identity a MIG handle reports through its GPU */
    m->architecture = parent->architecture;
    m->brand = parent->brand;
    m->cc_major = parent->cc_major;
    m->cc_minor = parent->cc_minor;
    return parse_errors(c, obj, base, 1, &m->errors) < 0 ? -1 : 0;
}

static int parse_mig(struct ctx *c, json_t *dev, const char *base, struct nvmlDevice_st *d,
                     struct nvmlDevice_st *next_free, unsigned int *used)
{
    char mbase[PATH_MAX_LEN];
    char path[PATH_MAX_LEN];
    char ibase[PATH_MAX_LEN + 16];
    json_t *mig, *list;
    long long v;
    int r = member(c, dev, base, "mig", 0, &mig, mbase);

    *used = 0;
    d->mig_listed = next_free;
    if (r <= 0)
        return r;
    if (!json_is_object(mig))
        return fail(c, mbase, "expected an object");
    if (check_keys(c, mig, mbase, mig_keys) < 0)
        return -1;
    if (get_bool(c, mig, mbase, "capable", 1, &d->mig_capable) < 0)
        return -1;
    if (get_bool(c, mig, mbase, "current", 0, &d->mig_current) < 0)
        return -1;
    d->mig_pending = d->mig_current;
    if (get_bool(c, mig, mbase, "pending", 0, &d->mig_pending) < 0)
        return -1;
    if (!d->mig_capable && d->mig_current) {
        join(path, mbase, "current");
        return fail(c, path, "MIG mode enabled but mig.capable is false");
    }
    if (!d->mig_capable && d->mig_pending) {
        join(path, mbase, "pending");
        return fail(c, path, "MIG mode pending but mig.capable is false");
    }
    v = d->mig_capable ? 7 : 0;
    if (get_int(c, mig, mbase, "max_devices", 0, 1, FAKE_MIG_MAX_DEVICES, &v) < 0)
        return -1;
    d->mig_max_devices = d->mig_capable ? (unsigned int)v : 0;
    /* a GPU passed through to a VM cannot be reset by the driver: nvml.h, nvmlDeviceSetMigMode */
    d->mig_reset_required = d->virtualization_mode == NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH;
    if (json_object_get(mig, "mode_change") != NULL) {
        unsigned int mode_change = 0;

        if (get_enum(c, mig, mbase, "mode_change", "mode change", mode_change_names, &mode_change) < 0)
            return -1;
        d->mig_reset_required = mode_change == 1;
    }
    r = member(c, mig, mbase, "devices", 0, &list, path);
    if (r < 0)
        return -1;
    if (r == 0)
        return 0;
    if (!json_is_array(list))
        return fail(c, path, "expected an array");
    if (json_array_size(list) > 0 && !d->mig_current)
        return fail(c, path, "MIG devices listed but mig.current is not true");
    if (json_array_size(list) > d->mig_max_devices)
        return fail(c, path, "more MIG devices than max_devices (%u)", d->mig_max_devices);
    for (size_t i = 0; i < json_array_size(list); i++) {
        struct nvmlDevice_st *m = next_free + i;

        if (snprintf(ibase, sizeof(ibase), "%s[%zu]", path, i) >= (int)sizeof(ibase))
            return fail(c, path, "too many entries");
        m->index = (unsigned int)i;
        if (parse_mig_device(c, json_array_get(list, i), ibase, d, m) < 0)
            return -1;
    }
    *used = (unsigned int)json_array_size(list);
    d->mig_listed_count = *used;
    return 1;
}

/* The event types a GPU supports when its profile does not say: ECC events only where the board has ECC (not the
 * GeForce and TITAN brands). */
static unsigned long long default_event_types(nvmlBrandType_t brand)
{
    unsigned long long types = nvmlEventTypePState | nvmlEventTypeXidCriticalError | nvmlEventTypeClock;

    if (brand != NVML_BRAND_GEFORCE && brand != NVML_BRAND_TITAN && brand != NVML_BRAND_GEFORCE_RTX
        && brand != NVML_BRAND_TITAN_RTX)
        types |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
    return types;
}

static int parse_event_types(struct ctx *c, json_t *obj, const char *base, struct nvmlDevice_st *d)
{
    char path[PATH_MAX_LEN];
    char epath[PATH_MAX_LEN + 24];
    char choices[FAKE_MSG_MAX / 2] = "";
    json_t *list, *v;
    size_t i;
    int r = member(c, obj, base, "event_types", 0, &list, path);

    if (r <= 0) {
        d->event_types = default_event_types(d->brand);
        return r;
    }
    if (!json_is_array(list))
        return fail(c, path, "expected an array");
    for (const struct name_value *nv = event_names; nv->name; nv++) {
        if (choices[0])
            strncat(choices, ", ", sizeof(choices) - strlen(choices) - 1);
        strncat(choices, nv->name, sizeof(choices) - strlen(choices) - 1);
    }
    d->event_types = 0;
    json_array_foreach(list, i, v) {
        const struct name_value *nv;

        snprintf(epath, sizeof(epath), "%s[%zu]", path, i);
        if (!json_is_string(v))
            return fail(c, epath, "expected a string");
        for (nv = event_names; nv->name && strcmp(nv->name, json_string_value(v)) != 0; nv++)
            ;
        if (nv->name == NULL)
            return fail(c, epath, "unknown event type '%s' (one of: %s)", json_string_value(v), choices);
        d->event_types |= nv->value;
    }
    return 1;
}

static int parse_xid_events(struct ctx *c, json_t *obj, const char *base, struct nvmlDevice_st *d)
{
    char path[PATH_MAX_LEN];
    char ebase[PATH_MAX_LEN + 24];
    json_t *list, *v;
    size_t i;
    long long n;
    int r = member(c, obj, base, "xid_events", 0, &list, path);

    if (r <= 0)
        return r;
    if (!json_is_array(list))
        return fail(c, path, "expected an array");
    d->xids = calloc(json_array_size(list) + 1, sizeof(*d->xids));
    if (d->xids == NULL)
        return fail(c, path, "out of memory");
    json_array_foreach(list, i, v) {
        struct fake_xid *x = &d->xids[i];

        snprintf(ebase, sizeof(ebase), "%s[%zu]", path, i);
        if (!json_is_object(v))
            return fail(c, ebase, "expected an object");
        if (check_keys(c, v, ebase, xid_keys) < 0)
            return -1;
        if (get_int(c, v, ebase, "xid", 1, 1, 65535, &n) < 0)
            return -1;
        x->xid = (unsigned long long)n;
        n = 0;
        if (get_int(c, v, ebase, "after_ms", 0, 0, 86400000, &n) < 0)
            return -1;
        x->after_ms = (unsigned long long)n;
        n = 0xFFFFFFFFLL;
        if (get_int(c, v, ebase, "gpu_instance_id", 0, 0, 65535, &n) < 0)
            return -1;
        x->gi_id = (unsigned int)n;
        n = 0xFFFFFFFFLL;
        if (get_int(c, v, ebase, "compute_instance_id", 0, 0, 65535, &n) < 0)
            return -1;
        x->ci_id = (unsigned int)n;
        d->xid_count = i + 1;
    }
    return 1;
}

/* "nvlinks": the remote end of each active NVLink, link 0 first (go-gpuallocator internal/links/device.go reads them
 * through nvmlDeviceGetNvLinkState and nvmlDeviceGetNvLinkRemotePciInfo_v2). */
static int parse_nvlinks(struct ctx *c, json_t *obj, const char *base, struct nvmlDevice_st *d)
{
    char path[PATH_MAX_LEN];
    char epath[PATH_MAX_LEN + 24];
    json_t *list, *v;
    size_t i;
    int r = member(c, obj, base, "nvlinks", 0, &list, path);

    if (r <= 0)
        return r;
    if (!json_is_array(list))
        return fail(c, path, "expected an array");
    if (json_array_size(list) > NVML_NVLINK_MAX_LINKS)
        return fail(c, path, "more than %u NVLinks", NVML_NVLINK_MAX_LINKS);
    json_array_foreach(list, i, v) {
        snprintf(epath, sizeof(epath), "%s[%zu]", path, i);
        if (!json_is_string(v))
            return fail(c, epath, "expected a string");
        if (!parse_bus_addr(json_string_value(v), &d->nvlink_remote[i]))
            return fail(c, epath, "not a PCI bus id of the form 00000000:3B:00.0");
        d->nvlink_count = (unsigned int)i + 1;
    }
    return 1;
}

/* "fabric": what nvmlDeviceGetGpuFabricInfo* report for a GPU registered with an NVLink fabric (GFD reads it through
 * go-nvlib's IsFabricAttached for the nvidia.com/gpu.clique label, k8s-device-plugin internal/lm/fabric.go). */
static int parse_fabric(struct ctx *c, json_t *obj, const char *base, struct nvmlDevice_st *d)
{
    char fbase[PATH_MAX_LEN];
    char path[PATH_MAX_LEN];
    char value[FAKE_STR_MAX];
    json_t *fabric;
    long long v;
    unsigned int state = NVML_GPU_FABRIC_STATE_COMPLETED;
    int r = member(c, obj, base, "fabric", 0, &fabric, fbase);

    if (r <= 0)
        return r;
    if (!json_is_object(fabric))
        return fail(c, fbase, "expected an object");
    if (check_keys(c, fabric, fbase, fabric_keys) < 0)
        return -1;
    if (get_string(c, fabric, fbase, "cluster_uuid", 1, value, sizeof(value)) < 0)
        return -1;
    if (!uuid_ok(value, "")) {
        join(path, fbase, "cluster_uuid");
        return fail(c, path, "not a well-formed UUID (expected xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)");
    }
    for (unsigned int k = 0, n = 0; value[k] != '\0' && n < NVML_GPU_FABRIC_UUID_LEN; k += 2) {
        unsigned int byte = 0;

        if (value[k] == '-')
            k++;
        sscanf(value + k, "%2x", &byte);   /* two hex digits: uuid_ok checked the form */
        d->fabric_cluster_uuid[n++] = (unsigned char)byte;
    }
    if (get_int(c, fabric, fbase, "clique_id", 1, 0, 0xFFFFFFFFLL, &v) < 0)
        return -1;
    d->fabric_clique_id = (unsigned int)v;
    if (json_object_get(fabric, "state") != NULL
        && get_enum(c, fabric, fbase, "state", "fabric state", fabric_state_names, &state) < 0)
        return -1;
    d->fabric_state = (nvmlGpuFabricState_t)state;
    d->fabric_status = NVML_SUCCESS;
    r = get_string(c, fabric, fbase, "status", 0, value, sizeof(value));
    if (r < 0)
        return -1;
    if (r > 0 && strcmp(value, "SUCCESS") != 0 && !fake_code_from_name(value, &d->fabric_status)) {
        join(path, fbase, "status");
        return fail(c, path, "unknown NVML return code '%s' (SUCCESS or a name like NOT_SUPPORTED)", value);
    }
    v = 0;
    if (get_int(c, fabric, fbase, "health_mask", 0, 0, 0xFFFFFFFFLL, &v) < 0)
        return -1;
    d->fabric_health_mask = (unsigned int)v;
    d->has_fabric = 1;
    return 1;
}

static int parse_device(struct ctx *c, json_t *obj, const char *base, unsigned int index,
                        struct nvmlDevice_st *d, struct nvmlDevice_st *next_free, unsigned int *mig_used)
{
    char path[PATH_MAX_LEN];
    char busid[FAKE_STR_MAX];
    long long v;
    int r;

    *mig_used = 0;
    if (!json_is_object(obj))
        return fail(c, base, "expected an object");
    if (check_keys(c, obj, base, device_keys) < 0)
        return -1;
    d->index = index;
    if (get_string(c, obj, base, "name", 1, d->name, sizeof(d->name)) < 0)
        return -1;
    if (get_uuid(c, obj, base, "GPU-", d->uuid) < 0)
        return -1;
    r = get_string(c, obj, base, "serial", 0, d->serial, NVML_DEVICE_SERIAL_BUFFER_SIZE);
    if (r < 0)
        return -1;
    d->has_serial = r;
    if (get_string(c, obj, base, "pci_bus_id", 1, busid, sizeof(busid)) < 0)
        return -1;
    if (!parse_bus_id(busid, d)) {
        join(path, base, "pci_bus_id");
        return fail(c, path, "not a PCI bus id of the form 00000000:3B:00.0");
    }
    if (get_hex32(c, obj, base, "pci_device_id", 1, &d->pci_device_id) < 0)
        return -1;
    if (get_hex32(c, obj, base, "pci_subsystem_id", 0, &d->pci_subsystem_id) < 0)
        return -1;
    if (get_int(c, obj, base, "memory_total_mib", 1, 1, 1LL << 30, &v) < 0)
        return -1;
    d->memory_total_mib = (unsigned long long)v;
    if (get_cc(c, obj, base, &d->cc_major, &d->cc_minor) < 0)
        return -1;
    if (get_enum(c, obj, base, "architecture", "architecture", arch_names, &d->architecture) < 0)
        return -1;
    if (get_enum(c, obj, base, "brand", "brand", brand_names, &d->brand) < 0)
        return -1;
    if (json_object_get(obj, "virtualization_mode") != NULL
        && get_enum(c, obj, base, "virtualization_mode", "virtualization mode", virtualization_names,
                    &d->virtualization_mode) < 0)
        return -1;
    if (get_bool(c, obj, base, "persistence_mode", 0, &d->persistence_mode) < 0)
        return -1;
    v = index;
    if (get_int(c, obj, base, "minor_number", 0, 0, 65535, &v) < 0)
        return -1;
    d->minor_number = (unsigned int)v;
    v = 0;
    if (get_int(c, obj, base, "multiprocessor_count", 0, 0, 65535, &v) < 0)
        return -1;
    d->multiprocessor_count = (unsigned int)v;
    v = 0;
    if (get_int(c, obj, base, "numa_node", 0, 0, 255, &v) < 0)
        return -1;
    d->numa_node = (unsigned int)v;
    if (parse_event_types(c, obj, base, d) < 0)
        return -1;
    if (parse_xid_events(c, obj, base, d) < 0)
        return -1;
    if (parse_nvlinks(c, obj, base, d) < 0)
        return -1;
    if (parse_fabric(c, obj, base, d) < 0)
        return -1;
    if (parse_errors(c, obj, base, 1, &d->errors) < 0)
        return -1;
    return parse_mig(c, obj, base, d, next_free, mig_used) < 0 ? -1 : 0;
}

/* Same UUID, bus id or minor number twice makes the table ambiguous. */
static int check_unique(struct ctx *c, struct fake_profile *p)
{
    char path[PATH_MAX_LEN];

    for (unsigned int i = 0; i < p->gpu_count; i++) {
        struct nvmlDevice_st *a = &p->devs[i];

        for (unsigned int j = 0; j < i; j++) {
            struct nvmlDevice_st *b = &p->devs[j];

            if (strcasecmp(a->uuid, b->uuid) == 0) {
                snprintf(path, sizeof(path), "devices[%u].uuid", i);
                return fail(c, path, "duplicate of devices[%u].uuid", j);
            }
            if (a->pci_domain == b->pci_domain && a->pci_bus == b->pci_bus && a->pci_device == b->pci_device
                && a->pci_function == b->pci_function) {
                snprintf(path, sizeof(path), "devices[%u].pci_bus_id", i);
                return fail(c, path, "duplicate of devices[%u].pci_bus_id", j);
            }
            if (a->minor_number == b->minor_number) {
                snprintf(path, sizeof(path), "devices[%u].minor_number", i);
                return fail(c, path, "duplicate of devices[%u].minor_number", j);
            }
        }
        for (unsigned int k = 0; k < a->mig_listed_count; k++) {
            struct nvmlDevice_st *m = &a->mig_listed[k];

            for (unsigned int j = 0; j < p->listed_count; j++) {
                struct nvmlDevice_st *b = &p->listed[j];

                if (b == m || b > m)
                    continue;
                if (strcasecmp(m->uuid, b->uuid) == 0) {
                    snprintf(path, sizeof(path), "devices[%u].mig.devices[%u].uuid", i, k);
                    return fail(c, path, "duplicate of devices[%u].mig.devices[%u].uuid",
                                b->parent->index, b->index);
                }
            }
            for (unsigned int j = 0; j < k; j++) {
                if (a->mig_listed[j].gi_id == m->gi_id && a->mig_listed[j].ci_id == m->ci_id) {
                    snprintf(path, sizeof(path), "devices[%u].mig.devices[%u].gpu_instance_id", i, k);
                    return fail(c, path, "duplicate (gpu_instance_id, compute_instance_id) of devices[%u].mig.devices[%u]",
                                i, j);
                }
            }
        }
    }
    return 0;
}

static size_t count_mig_slots(json_t *devices)
{
    size_t total = 0;

    for (size_t i = 0; i < json_array_size(devices); i++) {
        json_t *mig = json_object_get(json_array_get(devices, i), "mig");
        json_t *list = json_is_object(mig) ? json_object_get(mig, "devices") : NULL;

        if (json_is_array(list))
            total += json_array_size(list);
    }
    return total;
}

static void free_errs(struct fake_errs *e)
{
    for (size_t i = 0; i < e->count; i++)
        free(e->items[i].function);
    free(e->items);
    e->items = NULL;
    e->count = 0;
}

void fake_profile_free(struct fake_profile *p)
{
    if (p == NULL)
        return;
    free_errs(&p->errors);
    if (p->devs) {
        /* MIG device slots borrow the errors of the listed device they show: only GPUs and listed devices own any */
        for (unsigned int i = 0; i < p->gpu_count; i++) {
            free_errs(&p->devs[i].errors);
            free(p->devs[i].xids);
        }
        free(p->devs);
    }
    if (p->listed) {
        for (unsigned int i = 0; i < p->listed_count; i++)
            free_errs(&p->listed[i].errors);
        free(p->listed);
    }
    free(p->gis);
    free(p->gips);
    free(p);
}

static int parse_root(struct ctx *c, json_t *root, struct fake_profile *p)
{
    char path[PATH_MAX_LEN];
    char dbase[PATH_MAX_LEN];
    json_t *devices, *description;
    long long v;
    unsigned int next = 0;
    int r;

    if (!json_is_object(root))
        return fail(c, "top level", "expected an object");
    if (check_keys(c, root, "", top_keys) < 0)
        return -1;
    r = member(c, root, "", "description", 0, &description, path);
    if (r == 1 && !json_is_string(description))
        return fail(c, path, "expected a string");
    if (get_string(c, root, "", "driver_version", 1, p->driver_version, NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE) < 0)
        return -1;
    if (get_int(c, root, "", "cuda_driver_version", 1, 1000, 999999, &v) < 0)
        return -1;
    p->cuda_driver_version = (int)v;
    r = get_string(c, root, "", "nvml_version", 0, p->nvml_version, NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE);
    if (r < 0)
        return -1;
    if (r == 0 && snprintf(p->nvml_version, sizeof(p->nvml_version), "%d.%s", p->cuda_driver_version / 1000,
                           p->driver_version) >= (int)sizeof(p->nvml_version))
        return fail(c, "driver_version", "too long to derive nvml_version from it");
    if (parse_errors(c, root, "", 0, &p->errors) < 0)
        return -1;
    if (member(c, root, "", "devices", 1, &devices, path) < 0)
        return -1;
    if (!json_is_array(devices))
        return fail(c, path, "expected an array");
    p->gpu_count = (unsigned int)json_array_size(devices);
    p->listed_count = (unsigned int)count_mig_slots(devices);
    /* GPUs, then at most FAKE_MIG_MAX_DEVICES MIG device slots and GPU instances per GPU */
    p->devs = calloc((size_t)p->gpu_count * (1 + FAKE_MIG_MAX_DEVICES) + 1, sizeof(*p->devs));
    p->listed = calloc(p->listed_count + 1, sizeof(*p->listed));
    p->gis = calloc((size_t)p->gpu_count * FAKE_MIG_MAX_DEVICES + 1, sizeof(*p->gis));
    p->gips = calloc((size_t)p->gpu_count * NVML_GPU_INSTANCE_PROFILE_COUNT + 1, sizeof(*p->gips));
    if (p->devs == NULL || p->listed == NULL || p->gis == NULL || p->gips == NULL)
        return fail(c, path, "out of memory");
    next = p->gpu_count;
    for (unsigned int i = 0, listed = 0; i < p->gpu_count; i++) {
        struct nvmlDevice_st *d = &p->devs[i];
        unsigned int used = 0;

        snprintf(dbase, sizeof(dbase), "devices[%u]", i);
        if (parse_device(c, json_array_get(devices, i), dbase, i, d, &p->listed[listed], &used) < 0)
            return -1;
        listed += used;
        d->mig_first = &p->devs[next];
        d->gis = &p->gis[p->gi_count];
        d->gip = &p->gips[(size_t)i * NVML_GPU_INSTANCE_PROFILE_COUNT];
        for (unsigned int k = 0; k < d->mig_max_devices; k++) {
            d->mig_first[k].is_mig = 1;
            d->mig_first[k].index = k;
            d->mig_first[k].parent = d;
            d->gis[k].gpu = d;
        }
        next += d->mig_max_devices;
        p->gi_count += d->mig_max_devices;
    }
    p->dev_count = next;
    if (check_unique(c, p) < 0)
        return -1;
    fake_mig_setup(p);
    return 0;
}

nvmlReturn_t fake_profile_load(const char *path, struct fake_profile **out, char *msg, size_t msglen)
{
    struct ctx c = {path, msg, msglen};
    struct fake_profile *p;
    json_error_t jerr;
    struct stat st;
    json_t *root;
    FILE *fp;
    int rc;

    *out = NULL;
    msg[0] = '\0';
    fp = fopen(path, "r");
    if (fp == NULL) {
        int err = errno;

        if (err == ENOENT || err == ENOTDIR)
            return NVML_ERROR_DRIVER_NOT_LOADED;   /* no profile = no driver */
        if (err == EACCES || err == EPERM)
            return NVML_ERROR_NO_PERMISSION;
        snprintf(msg, msglen, "fake NVML: %s: cannot open: %s", path, strerror(err));
        return NVML_ERROR_UNKNOWN;
    }
    if (fstat(fileno(fp), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(fp);
        snprintf(msg, msglen, "fake NVML: %s: is a directory, not a profile file", path);
        return NVML_ERROR_UNKNOWN;
    }
    root = json_loadf(fp, JSON_REJECT_DUPLICATES, &jerr);
    fclose(fp);
    if (root == NULL) {
        snprintf(msg, msglen, "fake NVML: %s: line %d column %d: %s", path, jerr.line, jerr.column, jerr.text);
        return NVML_ERROR_UNKNOWN;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        json_decref(root);
        snprintf(msg, msglen, "fake NVML: %s: out of memory", path);
        return NVML_ERROR_MEMORY;
    }
    rc = parse_root(&c, root, p);
    json_decref(root);
    if (rc < 0) {
        fake_profile_free(p);
        return NVML_ERROR_UNKNOWN;
    }
    *out = p;
    return NVML_SUCCESS;
}
