/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Internal data model of the fake NVML library: a parsed GPU profile. */
#ifndef FAKENVML_FAKENVML_H
#define FAKENVML_FAKENVML_H

#include "nvml_abi.h"

#define FAKE_STR_MAX 96     /* longest name/uuid/version string kept, NUL included */
#define FAKE_MSG_MAX 1024   /* longest error detail line */
#define FAKE_DEFAULT_PROFILE "/etc/fake-nvml/profile.json"
#define FAKE_PROFILE_ENV "FAKE_NVML_PROFILE"

/* One injected failure: NVML function name -> return code. */
struct fake_err {
    char *function;
    nvmlReturn_t code;
};

struct fake_errs {
    struct fake_err *items;
    size_t count;
};

/* One XID event a profile schedules on a GPU: delivered once to each event set the GPU registered
 * nvmlEventTypeXidCriticalError with, after_ms after that registration. */
struct fake_xid {
    unsigned long long xid;
    unsigned long long after_ms;
    unsigned int gi_id, ci_id;      /* 0xFFFFFFFF: the whole GPU */
};

/* A PCI address (the remote end of an NVLink). */
struct fake_pci_addr {
    unsigned int domain, bus, device, function;
};

/*
 * A GPU or a MIG device. The handle given to callers (nvmlDevice_t) is a
 * pointer to one of these, inside one array that lives from nvmlInit to the
 * last nvmlShutdown: GPUs first, then every GPU's MIG devices.
 */
struct nvmlDevice_st {
    int is_mig;
    unsigned int index;              /* GPU index, or MIG index under its parent */
    struct nvmlDevice_st *parent;    /* MIG devices only */
    char name[FAKE_STR_MAX];
    char uuid[FAKE_STR_MAX];
    char serial[FAKE_STR_MAX];
    int has_serial;
    unsigned int pci_domain, pci_bus, pci_device, pci_function;
    unsigned int pci_device_id, pci_subsystem_id;
    unsigned long long memory_total_mib;
    int cc_major, cc_minor;
    nvmlDeviceArchitecture_t architecture;
    nvmlBrandType_t brand;
    int persistence_mode;
    unsigned int minor_number;
    unsigned int multiprocessor_count;
    /* MIG parent state (GPUs only) */
    int mig_capable, mig_current, mig_pending;
    unsigned int mig_max_devices;
    struct nvmlDevice_st *mig_first;  /* first MIG child in the array */
    unsigned int mig_count;
    /* MIG child attributes (MIG devices only) */
    char mig_profile[FAKE_STR_MAX];
    unsigned int gi_slices, ci_slices, gi_id, ci_id;
    unsigned int gi_profile, ci_profile;   /* NVML_GPU_INSTANCE_PROFILE_* / NVML_COMPUTE_INSTANCE_PROFILE_* */
    unsigned int copy_engines, decoders, encoders, jpegs, ofas;
    /* topology (GPUs only): nvmlDeviceGetTopologyCommonAncestor, nvmlDeviceGetNvLink* */
    unsigned int numa_node;
    unsigned int nvlink_count;       /* active links 0 .. nvlink_count-1 */
    struct fake_pci_addr nvlink_remote[NVML_NVLINK_MAX_LINKS];
    /* GPU fabric (GPUs only): nvmlDeviceGetGpuFabricInfo* */
    int has_fabric;
    unsigned char fabric_cluster_uuid[NVML_GPU_FABRIC_UUID_LEN];
    unsigned int fabric_clique_id;
    nvmlGpuFabricState_t fabric_state;
    nvmlReturn_t fabric_status;
    unsigned int fabric_health_mask;
    /* events (GPUs only) */
    unsigned long long event_types;  /* nvmlDeviceGetSupportedEventTypes */
    struct fake_xid *xids;
    size_t xid_count;
    struct fake_errs errors;
};

struct fake_profile {
    char driver_version[FAKE_STR_MAX];
    char nvml_version[FAKE_STR_MAX];
    int cuda_driver_version;
    struct fake_errs errors;
    unsigned int gpu_count;          /* GPUs: devs[0 .. gpu_count-1] */
    unsigned int dev_count;          /* GPUs plus MIG devices */
    struct nvmlDevice_st *devs;
};

/* The NVML_GPU_INSTANCE_PROFILE_<n>_SLICE constant of a slice count, or -1 (profile.c); the
 * NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE constants have the same values. */
int fake_profile_of_slices(unsigned int slices);

/* Names of the NVML functions this library exports (fakenvml.c). */
extern const char *const fake_api_names[];
int fake_api_known(const char *name);

/* Return-code names without the NVML_ERROR_ prefix (profile.c). */
int fake_code_from_name(const char *name, nvmlReturn_t *code);

/*
 * Load and validate a profile. On failure returns the NVML code that
 * nvmlInit must answer and, for NVML_ERROR_UNKNOWN, writes one line into msg.
 */
nvmlReturn_t fake_profile_load(const char *path, struct fake_profile **out, char *msg, size_t msglen);
void fake_profile_free(struct fake_profile *p);

#endif /* FAKENVML_FAKENVML_H */
