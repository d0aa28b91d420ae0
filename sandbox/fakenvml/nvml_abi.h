/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The slice of NVML's public ABI that the fake library implements.
 *
 * Every type, constant and structure below was transcribed from the ctypes
 * definitions in pynvml.py (nvidia-ml-py 13.615.71), which is the binding the
 * project tests against; the pynvml name is given beside each one.  The sizes
 * are pinned with _Static_assert lines of the form
 *     _Static_assert(sizeof(T) == N, "pynvml.Name");
 * and tests/sandbox/test_fake_nvml.py checks every such N against
 * ctypes.sizeof(pynvml.Name), so a drift on either side fails the tests.
 */
#ifndef FAKENVML_NVML_ABI_H
#define FAKENVML_NVML_ABI_H

#include <stddef.h>

/* nvmlReturn_t: NVML_SUCCESS .. NVML_ERROR_UNKNOWN (pynvml module constants) */
typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

/* _nvmlEnableState_t = c_uint */
typedef unsigned int nvmlEnableState_t;
#define NVML_FEATURE_DISABLED 0u
#define NVML_FEATURE_ENABLED 1u

/* _nvmlBrandType_t = c_uint, NVML_BRAND_* */
typedef unsigned int nvmlBrandType_t;
#define NVML_BRAND_GEFORCE 5u
#define NVML_BRAND_TITAN 6u
#define NVML_BRAND_GEFORCE_RTX 15u
#define NVML_BRAND_TITAN_RTX 16u

/* nvmlGpuVirtualizationMode_t, NVML_GPU_VIRTUALIZATION_MODE_* (nvml.h; pynvml reads it into a c_ulonglong, whose
 * low half this enum fills on x86-64) */
typedef unsigned int nvmlGpuVirtualizationMode_t;
#define NVML_GPU_VIRTUALIZATION_MODE_NONE 0u
#define NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH 1u

/* _nvmlDeviceArchitecture_t = c_uint, NVML_DEVICE_ARCH_* */
typedef unsigned int nvmlDeviceArchitecture_t;
#define NVML_DEVICE_ARCH_KEPLER 2u
#define NVML_DEVICE_ARCH_MAXWELL 3u
#define NVML_DEVICE_ARCH_PASCAL 4u
#define NVML_DEVICE_ARCH_VOLTA 5u
#define NVML_DEVICE_ARCH_TURING 6u
#define NVML_DEVICE_ARCH_AMPERE 7u
#define NVML_DEVICE_ARCH_ADA 8u
#define NVML_DEVICE_ARCH_HOPPER 9u
#define NVML_DEVICE_ARCH_BLACKWELL 10u
#define NVML_DEVICE_ARCH_UNKNOWN 0xffffffffu

/* NVML_DEVICE_MIG_DISABLE / NVML_DEVICE_MIG_ENABLE */
#define NVML_DEVICE_MIG_DISABLE 0u
#define NVML_DEVICE_MIG_ENABLE 1u

/* Buffer sizes (pynvml NVML_*_BUFFER_SIZE) */
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_SERIAL_BUFFER_SIZE 30
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

/* Opaque device handle: pynvml c_nvmlDevice_t = POINTER(struct_c_nvmlDevice_t) */
typedef struct nvmlDevice_st *nvmlDevice_t;

/* pynvml.c_nvmlMemory_t */
typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

/* pynvml.c_nvmlMemory_v2_t; version must be nvmlMemory_v2 */
typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 0x02000028u /* pynvml.nvmlMemory_v2 */

/* pynvml.nvmlPciInfo_v2_t: legacy layout written by nvmlDeviceGetPciInfo and _v2 */
typedef struct nvmlPciInfo_v2_st {
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int reserved0;
    unsigned int reserved1;
    unsigned int reserved2;
    unsigned int reserved3;
} nvmlPciInfo_v2_t;

/* pynvml.nvmlPciInfo_t: current layout written by nvmlDeviceGetPciInfo_v3 */
typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

/* pynvml.c_nvmlDeviceAttributes */
typedef struct nvmlDeviceAttributes_st {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

/* nvmlEventType* (pynvml module constants): bits of an event mask */
#define nvmlEventTypeSingleBitEccError 0x0000000000000001ULL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002ULL
#define nvmlEventTypePState 0x0000000000000004ULL
#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL
#define nvmlEventTypeClock 0x0000000000000010ULL
#define nvmlEventTypePowerSourceChange 0x0000000000000080ULL
#define nvmlEventMigConfigChange 0x0000000000000100ULL

/* c_nvmlEventSet_t = POINTER(struct_c_nvmlEventSet_t): opaque */
typedef struct nvmlEventSet_st *nvmlEventSet_t;

/* c_nvmlEventData_t */
typedef struct nvmlEventData_st {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

/* NVML_GPU_INSTANCE_PROFILE_COUNT, NVML_COMPUTE_INSTANCE_PROFILE_COUNT, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED */
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12u
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9u
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0u

/* c_nvmlGpuInstance_t, c_nvmlComputeInstance_t: opaque */
typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;

/* c_nvmlGpuInstancePlacement_t, c_nvmlComputeInstancePlacement_t */
typedef struct nvmlInstancePlacement_st {
    unsigned int start;
    unsigned int size;
} nvmlInstancePlacement_t;

/* c_nvmlGpuInstanceProfileInfo_t */
typedef struct nvmlGpuInstanceProfileInfo_st {
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

/* c_nvmlGpuInstanceProfileInfo_v2_t: nvmlDeviceGetGpuInstanceProfileInfoV, by its version field */
typedef struct nvmlGpuInstanceProfileInfo_v2_st {
    unsigned int version;
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlGpuInstanceProfileInfo_v2_t;

/* nvmlGpuInstanceProfileInfo_v3_t: not in pynvml; transcribed from nvml.h (go-nvml v0.13.4-1 pkg/nvml/nvml.h):
 * version 3 drops isP2pSupported and adds capabilities after the name */
typedef struct nvmlGpuInstanceProfileInfo_v3_st {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned int capabilities;
} nvmlGpuInstanceProfileInfo_v3_t;
#define nvmlGpuInstanceProfileInfo_v2 0x02000098u /* pynvml.nvmlGpuInstanceProfileInfo_v2 */
#define nvmlGpuInstanceProfileInfo_v3 0x03000098u /* NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 3), nvml.h */

/* c_nvmlGpuInstanceInfo_t */
typedef struct nvmlGpuInstanceInfo_st {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    nvmlInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

/* c_nvmlComputeInstanceProfileInfo_t */
typedef struct nvmlComputeInstanceProfileInfo_st {
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

/* c_nvmlComputeInstanceProfileInfo_v2_t: nvmlGpuInstanceGetComputeInstanceProfileInfoV, by its version field */
typedef struct nvmlComputeInstanceProfileInfo_v2_st {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;

/* nvmlComputeInstanceProfileInfo_v3_t: not in pynvml; nvml.h adds capabilities after the name */
typedef struct nvmlComputeInstanceProfileInfo_v3_st {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned int capabilities;
} nvmlComputeInstanceProfileInfo_v3_t;
#define nvmlComputeInstanceProfileInfo_v2 0x02000088u /* pynvml.nvmlComputeInstanceProfileInfo_v2 */
#define nvmlComputeInstanceProfileInfo_v3 0x0300008Cu /* NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 3), nvml.h */

/* c_nvmlComputeInstanceInfo_t */
typedef struct nvmlComputeInstanceInfo_st {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id;
    unsigned int profileId;
    nvmlInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

/* _nvmlGpuTopologyLevel_t = c_uint, NVML_TOPOLOGY_* */
typedef unsigned int nvmlGpuTopologyLevel_t;
#define NVML_TOPOLOGY_INTERNAL 0u
#define NVML_TOPOLOGY_SINGLE 10u
#define NVML_TOPOLOGY_MULTIPLE 20u
#define NVML_TOPOLOGY_HOSTBRIDGE 30u
#define NVML_TOPOLOGY_NODE 40u
#define NVML_TOPOLOGY_SYSTEM 50u

/* NVML_NVLINK_MAX_LINKS */
#define NVML_NVLINK_MAX_LINKS 36u

/* NVML_GPU_FABRIC_UUID_LEN, _nvmlGpuFabricState_t = c_uint8 (NVML_GPU_FABRIC_STATE_*) */
#define NVML_GPU_FABRIC_UUID_LEN 16
typedef unsigned char nvmlGpuFabricState_t;
#define NVML_GPU_FABRIC_STATE_NOT_SUPPORTED 0u
#define NVML_GPU_FABRIC_STATE_NOT_STARTED 1u
#define NVML_GPU_FABRIC_STATE_IN_PROGRESS 2u
#define NVML_GPU_FABRIC_STATE_COMPLETED 3u

/* c_nvmlGpuFabricInfo_t: written by nvmlDeviceGetGpuFabricInfo (no version field) */
typedef struct nvmlGpuFabricInfo_st {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

/* c_nvmlGpuFabricInfo_v2_t and c_nvmlGpuFabricInfo_v3_t: nvmlDeviceGetGpuFabricInfoV, by their version field */
typedef struct nvmlGpuFabricInfo_v2_st {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;

typedef struct nvmlGpuFabricInfo_v3_st {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;
#define nvmlGpuFabricInfo_v2 0x02000024u /* pynvml.nvmlGpuFabricInfo_v2 */
#define nvmlGpuFabricInfo_v3 0x03000028u /* pynvml.nvmlGpuFabricInfo_v3 */

_Static_assert(sizeof(nvmlMemory_t) == 24, "pynvml.c_nvmlMemory_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "pynvml.c_nvmlMemory_v2_t");
_Static_assert(sizeof(nvmlPciInfo_v2_t) == 52, "pynvml.nvmlPciInfo_v2_t");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "pynvml.nvmlPciInfo_t");
_Static_assert(sizeof(nvmlDeviceAttributes_t) == 40, "pynvml.c_nvmlDeviceAttributes");
_Static_assert(sizeof(nvmlEventData_t) == 32, "pynvml.c_nvmlEventData_t");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48, "pynvml.c_nvmlGpuInstanceProfileInfo_t");
_Static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24, "pynvml.c_nvmlGpuInstanceInfo_t");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == 152, "pynvml.c_nvmlGpuInstanceProfileInfo_v2_t");
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_v2_t) == 136, "pynvml.c_nvmlComputeInstanceProfileInfo_v2_t");
_Static_assert(sizeof(nvmlInstancePlacement_t) == 8, "pynvml.c_nvmlGpuInstancePlacement_t");
_Static_assert((nvmlGpuInstanceProfileInfo_v2 & 0xffffffu) == sizeof(nvmlGpuInstanceProfileInfo_v2_t), "nvmlGpuInstanceProfileInfo_v2 encodes the struct size");
_Static_assert((nvmlGpuInstanceProfileInfo_v3 & 0xffffffu) == sizeof(nvmlGpuInstanceProfileInfo_v3_t), "nvmlGpuInstanceProfileInfo_v3 encodes the struct size");
_Static_assert((nvmlComputeInstanceProfileInfo_v2 & 0xffffffu) == sizeof(nvmlComputeInstanceProfileInfo_v2_t), "nvmlComputeInstanceProfileInfo_v2 encodes the struct size");
_Static_assert((nvmlComputeInstanceProfileInfo_v3 & 0xffffffu) == sizeof(nvmlComputeInstanceProfileInfo_v3_t), "nvmlComputeInstanceProfileInfo_v3 encodes the struct size");
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_t) == 36, "pynvml.c_nvmlComputeInstanceProfileInfo_t");
_Static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32, "pynvml.c_nvmlComputeInstanceInfo_t");
_Static_assert(sizeof(nvmlGpuFabricInfo_t) == 28, "pynvml.c_nvmlGpuFabricInfo_t");
_Static_assert(sizeof(nvmlGpuFabricInfo_v2_t) == 36, "pynvml.c_nvmlGpuFabricInfo_v2_t");
_Static_assert(sizeof(nvmlGpuFabricInfo_v3_t) == 40, "pynvml.c_nvmlGpuFabricInfo_v3_t");
_Static_assert((nvmlGpuFabricInfo_v2 & 0xffffffu) == sizeof(nvmlGpuFabricInfo_v2_t), "nvmlGpuFabricInfo_v2 encodes the struct size");
_Static_assert((nvmlGpuFabricInfo_v3 & 0xffffffu) == sizeof(nvmlGpuFabricInfo_v3_t), "nvmlGpuFabricInfo_v3 encodes the struct size");
_Static_assert((nvmlMemory_v2 & 0xffffffu) == sizeof(nvmlMemory_v2_t), "nvmlMemory_v2 encodes the struct size");

#endif /* FAKENVML_NVML_ABI_H */
