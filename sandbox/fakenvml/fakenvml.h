/* SPDX-License-Identifier: GPL-3.0-or-later */
/* Internal data model of the fake NVML library: a parsed GPU profile. */
#ifndef FAKENVML_FAKENVML_H
#define FAKENVML_FAKENVML_H

#include "nvml_abi.h"

#define FAKE_STR_MAX 96     /* longest name/uuid/version string kept, NUL included */
#define FAKE_MSG_MAX 1024   /* longest error detail line */
#define FAKE_DEFAULT_PROFILE "/etc/fake-nvml/profile.json"
#define FAKE_PROFILE_ENV "FAKE_NVML_PROFILE"
#define FAKE_DEFAULT_MIG_STATE "/var/lib/fake-nvml/mig-state.json"
#define FAKE_MIG_STATE_ENV "FAKE_NVML_MIG_STATE"
#define FAKE_DEFAULT_DRIVER_FILE "/usr/lib/fake-nvml/driver-version"   /* installed by a stand-in driver package */
#define FAKE_DRIVER_FILE_ENV "FAKE_NVML_DRIVER_FILE"
#define FAKE_DEFAULT_MODULE_FILE "/run/fake-nvml/module-version"       /* the "loaded kernel module"; gone at reboot */
#define FAKE_MODULE_FILE_ENV "FAKE_NVML_MODULE_FILE"
#define FAKE_MIG_MAX_DEVICES 16     /* largest mig.max_devices: MIG device slots and GPU instances per GPU */
#define FAKE_MIG_MEMORY_SLICES 8    /* memory slices of the A100/H100 geometry (placements count in these) */

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
 * One GPU instance profile a MIG-capable GPU offers; a GPU's table is indexed by the NVML_GPU_INSTANCE_PROFILE_*
 * constant (mig.c builds it: the A100/H100 geometry, values of the profile's listed MIG devices first).
 */
struct fake_gip {
    int present;
    unsigned int id;                 /* nvmlGpuInstanceProfileInfo_t.id (nvidia-smi's profile id) */
    unsigned int slices;             /* compute slices: sliceCount */
    unsigned int mem_slices;         /* memory slices: the size of a placement */
    unsigned int instances;          /* instanceCount */
    unsigned int sms, copy_engines, decoders, encoders, jpegs, ofas;
    unsigned long long memory_mib;
    unsigned int placement_count;    /* 0: the fake cannot place it (no geometry for this profile or GPU) */
    unsigned int starts[FAKE_MIG_MEMORY_SLICES];
};

/* A GPU instance; nvmlGpuInstance_t handles point at one (one array from init to the last shutdown, max_devices per
 * MIG-capable GPU). Its attributes are those of its profile in the GPU's table. */
struct fake_gi {
    struct nvmlDevice_st *gpu;
    int live;
    unsigned int id;                 /* GPU instance id: the swizzId of its placement where the geometry applies */
    unsigned int profile;            /* NVML_GPU_INSTANCE_PROFILE_* */
    unsigned int start, size;        /* placement in memory slices */
};

/*
 * A GPU or a MIG device. The handle given to callers (nvmlDevice_t) is a
 * pointer to one of these, inside one array that lives from nvmlInit to the
 * last nvmlShutdown: GPUs first, then max_devices MIG device slots of every
 * MIG-capable GPU (a slot is live while a compute instance occupies it).
 */
struct nvmlDevice_st {
    int is_mig;
    unsigned int index;              /* GPU index, or MIG slot under its parent */
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
    nvmlGpuVirtualizationMode_t virtualization_mode;  /* GPUs only; a MIG handle answers its GPU's */
    int persistence_mode;
    unsigned int minor_number;
    unsigned int multiprocessor_count;
    /* MIG parent state (GPUs only) */
    int mig_capable, mig_current, mig_pending;
    int mig_reset_required;          /* mig.mode_change "reset" (default where virtualization_mode is passthrough):
                                      * nvmlDeviceSetMigMode only sets the pending mode */
    unsigned int mig_max_devices;
    struct nvmlDevice_st *mig_first;  /* the GPU's mig_max_devices MIG device slots */
    struct fake_gi *gis;             /* the GPU's mig_max_devices GPU instance entries */
    struct fake_gip *gip;            /* NVML_GPU_INSTANCE_PROFILE_COUNT entries (MIG-capable GPUs) */
    int mig_geometry;                /* the A100/H100 geometry applies (max_devices 7): instances can be created */
    struct nvmlDevice_st *mig_listed;  /* the profile's mig.devices, as parsed (the layout without a state entry) */
    unsigned int mig_listed_count;
    int mig_listed_current, mig_listed_pending;   /* the profile's mig.current and mig.pending */
    /* MIG child attributes (MIG devices only) */
    int live;                        /* a compute instance occupies this slot */
    struct fake_gi *gi;              /* its GPU instance */
    unsigned int ci_start;           /* compute instance placement start (size: ci_slices) */
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
    unsigned int dev_count;          /* GPUs plus MIG device slots */
    struct nvmlDevice_st *devs;
    struct nvmlDevice_st *listed;    /* every GPU's mig.devices as parsed (owns their errors) */
    unsigned int listed_count;
    struct fake_gi *gis;             /* every MIG-capable GPU's GPU instance entries */
    unsigned int gi_count;
    struct fake_gip *gips;           /* every MIG-capable GPU's profile table */
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

/* ------------------------------------------------------------ MIG layouts (mig.c) */

#define FAKE_CI_PROFILE_COUNT 9u    /* NVML_COMPUTE_INSTANCE_PROFILE_COUNT */

/* A GPU's MIG layout as the state file holds it. */
struct fake_layout_ci {
    unsigned int id, profile, start, slot;
    int has_slot;
    char uuid[FAKE_STR_MAX];         /* "" when the file gives none */
};

struct fake_layout_gi {
    unsigned int id, profile, start;
    unsigned int ci_count;
    struct fake_layout_ci cis[FAKE_MIG_MAX_DEVICES];
};

struct fake_layout {
    int current, pending;
    unsigned int gi_count;
    struct fake_layout_gi gis[FAKE_MIG_MAX_DEVICES];
};

/* The profile id NVML reports for a GPU instance profile constant (nvidia-smi's ids on A100/H100). */
unsigned int fake_gi_profile_id(unsigned int profile);
/* Compute slices of an NVML_COMPUTE_INSTANCE_PROFILE_* constant (< FAKE_CI_PROFILE_COUNT). */
unsigned int fake_ci_slices(unsigned int profile);

/* After parsing: every MIG-capable GPU's profile table, and its layout from the profile's mig.devices. */
void fake_mig_setup(struct fake_profile *p);
/* The layout a GPU has without a state entry (its mig.devices) applied to its slots. */
void fake_mig_apply_listed(struct nvmlDevice_st *g);

/* Free spans and placements (GPU instances in memory slices, compute instances in compute slices). */
int fake_gi_span_free(const struct nvmlDevice_st *g, unsigned int start, unsigned int size);
int fake_ci_span_free(const struct fake_gi *gi, unsigned int start, unsigned int size);
unsigned int fake_ci_placements(unsigned int gi_slices, unsigned int ci_profile, unsigned int *starts);
unsigned int fake_swizz_id(unsigned int start, unsigned int size);
/* Number of live compute instances in a GPU instance / of GPU instances with a profile on a GPU. */
unsigned int fake_gi_ci_count(const struct fake_gi *gi);
unsigned int fake_gpu_gi_count(const struct nvmlDevice_st *g, unsigned int profile);
/* The MIG profile name of a compute instance of ci_slices in a GPU instance of that profile ("1g.10gb", "1c.2g.20gb",
 * "1g.10gb+me"), as go-nvlib and mig-parted name it. */
void fake_profile_name(const struct nvmlDevice_st *g, unsigned int gi_profile, unsigned int ci_slices, char *out,
                       size_t outlen);
/* Fill a compute instance's MIG device slot (computed attributes, deterministic UUID). */
void fake_ci_fill(struct nvmlDevice_st *m, struct fake_gi *gi, unsigned int id, unsigned int profile,
                  unsigned int start, const char *uuid);

/* The state file: $FAKE_NVML_MIG_STATE, else /var/lib/fake-nvml/mig-state.json. */
const char *fake_mig_state_path(void);
/* At init: apply the state file's entries (no file: nothing). NVML_ERROR_UNKNOWN with msg for a malformed file. */
nvmlReturn_t fake_mig_state_init(struct fake_profile *p, char *msg, size_t msglen);

/* driver.c: the stand-in driver package's version against the "loaded kernel module" (README.md); at init. */
nvmlReturn_t fake_driver_apply(struct fake_profile *p, char *msg, size_t msglen);
/* Before a read: reload the file when another process changed it (a malformed file is ignored). Call unlocked. */
int fake_mig_state_changed(void);
void fake_mig_state_reload(struct fake_profile *p);

/* A mutation: lock the state file, refresh every GPU from it, then change g in memory and commit (the whole file
 * rewritten atomically) or abort (g's layout restored from the file). */
struct fake_txn {
    int lock_fd;
    void *root;                      /* json_t *: the file as read */
};
nvmlReturn_t fake_txn_begin(struct fake_profile *p, struct fake_txn *t, char *msg, size_t msglen);
nvmlReturn_t fake_txn_commit(struct fake_profile *p, struct fake_txn *t, struct nvmlDevice_st *g);
void fake_txn_abort(struct fake_profile *p, struct fake_txn *t, struct nvmlDevice_st *g);

#endif /* FAKENVML_FAKENVML_H */
