/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * The sandbox's stand-in for NVIDIA's CUDA vectorAdd sample (the proof image, nvcr.io/nvidia/k8s/cuda-sample:
 * vectoradd-cuda<version>): a TEST STAND-IN, not NVIDIA software and no CUDA program. Written for this project; see
 * README.md beside it.
 *
 * It needs from the node what vectorAdd needs, and fails where vectorAdd fails:
 *   - the driver's user-space library, put into the container by NVIDIA's container runtime: it dlopens
 *     libnvidia-ml.so.1 (vectorAdd's CUDA runtime dlopens libcuda.so.1; without it cudart answers
 *     cudaErrorInsufficientDriver);
 *   - the driver's CUDA version (nvmlSystemGetCudaDriverVersion_v2, what cuDriverGetVersion answers) must be able to run
 *     the CUDA version this image was built for (PROOF_CUDA_VERSION, from the image's tag): since CUDA 11 an
 *     application runs on any driver of its CUDA major release ("minor version compatibility",
 *     https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html: CUDA 12.x needs a driver of
 *     CUDA 12.0 or later, >= 525), before CUDA 11 on a driver of at least its own version; otherwise cudart's
 *     cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version";
 *   - at least one GPU the runtime gave it: an NVML device whose /dev/nvidia<minor> node is in the container, and
 *     /dev/nvidiactl; otherwise cudaErrorNoDevice, "no CUDA-capable device is detected".
 * The first CUDA call of vectorAdd is cudaMalloc of vector A, so a failure is reported as vectorAdd reports that one
 * (cuda-samples Samples/0_Introduction/vectorAdd/vectorAdd.cu) and the program exits with EXIT_FAILURE. On success it
 * prints vectorAdd's lines, computing the sum on the CPU and checking it as vectorAdd does, and "Test PASSED".
 * What it found is said on stderr, on lines that start with "proof stand-in:".
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef PROOF_CUDA_VERSION
#error "PROOF_CUDA_VERSION (the CUDA version of the image's tag, e.g. \"12.5.0\") must be defined"
#endif

/* cudaGetErrorString's texts (CUDA runtime API, enum cudaError) */
#define CUDA_INSUFFICIENT_DRIVER "CUDA driver version is insufficient for CUDA runtime version"
#define CUDA_NO_DEVICE "no CUDA-capable device is detected"
#define CUDA_DRIVER_MISMATCH "system has unsupported display driver / cuda driver combination"
#define CUDA_UNKNOWN "unknown error"

#define NVML_SUCCESS 0
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_LIB_RM_VERSION_MISMATCH 18

typedef int (*init_fn)(void);
typedef int (*int_fn)(int *);
typedef int (*uint_fn)(unsigned int *);
typedef int (*handle_fn)(unsigned int, void **);
typedef int (*minor_fn)(void *, unsigned int *);
typedef int (*string_fn)(void *, char *, unsigned int);
typedef const char *(*error_fn)(int);
typedef int (*mig_mode_fn)(void *, unsigned int *, unsigned int *);
typedef int (*mig_count_fn)(void *, unsigned int *);
typedef int (*mig_handle_fn)(void *, unsigned int, void **);

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);

    if (p == NULL)
        fprintf(stderr, "proof stand-in: libnvidia-ml.so.1 has no %s\n", name);
    return p;
}

/* vectorAdd's report of its first failing CUDA call, then EXIT_FAILURE */
static void cuda_fails(const char *cuda_error)
{
    fprintf(stderr, "Failed to allocate device vector A (error code %s)!\n", cuda_error);
    exit(EXIT_FAILURE);
}

/* "12.5.0" -> 12050, CUDA's integer form (1000 * major + 10 * minor) */
static int cuda_int(const char *version)
{
    int major = 0, minor = 0;

    if (sscanf(version, "%d.%d", &major, &minor) < 1)
        return -1;
    return 1000 * major + 10 * minor;
}

/* the oldest driver CUDA version that runs an application built with CUDA `built` (minor version compatibility) */
static int oldest_driver_for(int built)
{
    return built >= 11000 ? built / 1000 * 1000 : built;
}

static int is_char_device(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

/* ", MIG on, N MIG devices" / ", MIG off" / "" (not MIG capable): what NVML says of the GPU's MIG mode and layout */
static void describe_mig(void *lib, void *gpu, char *buf, size_t len)
{
    mig_mode_fn get_mode = (mig_mode_fn)dlsym(lib, "nvmlDeviceGetMigMode");
    mig_count_fn get_max = (mig_count_fn)dlsym(lib, "nvmlDeviceGetMaxMigDeviceCount");
    mig_handle_fn get_mig = (mig_handle_fn)dlsym(lib, "nvmlDeviceGetMigDeviceHandleByIndex");
    unsigned int current, pending, max = 0, slot, devices = 0;
    void *mig;

    buf[0] = '\0';
    if (!get_mode || !get_max || !get_mig || get_mode(gpu, &current, &pending) != NVML_SUCCESS)
        return;
    if (!current) {
        snprintf(buf, len, ", MIG off");
        return;
    }
    if (get_max(gpu, &max) == NVML_SUCCESS)
        for (slot = 0; slot < max; slot++)
            if (get_mig(gpu, slot, &mig) == NVML_SUCCESS)
                devices++;
    snprintf(buf, len, ", MIG on, %u MIG devices", devices);
}

/* The GPUs the runtime put into the container: NVML's devices whose /dev/nvidia<minor> is here. */
static int injected_gpus(void *lib)
{
    uint_fn get_count = (uint_fn)sym(lib, "nvmlDeviceGetCount_v2");
    handle_fn get_handle = (handle_fn)sym(lib, "nvmlDeviceGetHandleByIndex_v2");
    minor_fn get_minor = (minor_fn)sym(lib, "nvmlDeviceGetMinorNumber");
    string_fn get_name = (string_fn)sym(lib, "nvmlDeviceGetName");
    string_fn get_uuid = (string_fn)sym(lib, "nvmlDeviceGetUUID");
    unsigned int count = 0, i, minor;
    char name[96], uuid[96], path[64], mig[64];
    void *handle;
    int found = 0;

    if (!get_count || !get_handle || !get_minor || !get_name || !get_uuid)
        return 0;
    if (get_count(&count) != NVML_SUCCESS)
        return 0;
    for (i = 0; i < count; i++) {
        if (get_handle(i, &handle) != NVML_SUCCESS || get_minor(handle, &minor) != NVML_SUCCESS)
            continue;
        snprintf(path, sizeof(path), "/dev/nvidia%u", minor);
        if (!is_char_device(path))
            continue;
        if (get_name(handle, name, sizeof(name)) != NVML_SUCCESS)
            strcpy(name, "?");
        if (get_uuid(handle, uuid, sizeof(uuid)) != NVML_SUCCESS)
            strcpy(uuid, "?");
        describe_mig(lib, handle, mig, sizeof(mig));
        fprintf(stderr, "proof stand-in: GPU %u: %s (%s) at %s%s\n", i, name, uuid, path, mig);
        found++;
    }
    fprintf(stderr, "proof stand-in: %d of the %u GPUs NVML reports are in this container\n", found, count);
    return found;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The MIG capability devices the runtime gave the container (a MIG device's GPU and compute instance access) */
static void injected_caps(void)
{
    char *names[64], line[1024] = "";
    struct dirent *entry;
    size_t n = 0, i;
    DIR *dir = opendir("/dev/nvidia-caps");

    if (dir == NULL)
        return;
    while ((entry = readdir(dir)) != NULL && n < sizeof(names) / sizeof(names[0]))
        if (entry->d_name[0] != '.')
            names[n++] = strdup(entry->d_name);
    closedir(dir);
    qsort(names, n, sizeof(names[0]), by_name);
    for (i = 0; i < n; i++) {
        if (strlen(line) + strlen(names[i]) + 2 < sizeof(line)) {
            strcat(line, " ");
            strcat(line, names[i]);
        }
        free(names[i]);
    }
    fprintf(stderr, "proof stand-in: /dev/nvidia-caps:%s\n", line);
}

/* Everything cudaMalloc would need; returns only when vectorAdd would go on. */
static void check_driver(void)
{
    int built = cuda_int(PROOF_CUDA_VERSION), driver = 0, rc, gpus;
    init_fn init;
    int_fn cuda_version;
    error_fn error_string;
    void *lib;

    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (lib == NULL) {
        fprintf(stderr, "proof stand-in: no driver library: %s\n", dlerror());
        cuda_fails(CUDA_INSUFFICIENT_DRIVER);
    }
    init = (init_fn)sym(lib, "nvmlInit_v2");
    error_string = (error_fn)sym(lib, "nvmlErrorString");
    cuda_version = (int_fn)sym(lib, "nvmlSystemGetCudaDriverVersion_v2");
    if (!init || !error_string || !cuda_version)
        cuda_fails(CUDA_INSUFFICIENT_DRIVER);
    rc = init();
    if (rc != NVML_SUCCESS) {
        fprintf(stderr, "proof stand-in: nvmlInit_v2: %s\n", error_string(rc));
        if (rc == NVML_ERROR_DRIVER_NOT_LOADED)
            cuda_fails(CUDA_NO_DEVICE);
        cuda_fails(rc == NVML_ERROR_LIB_RM_VERSION_MISMATCH ? CUDA_DRIVER_MISMATCH : CUDA_UNKNOWN);
    }
    rc = cuda_version(&driver);
    if (rc != NVML_SUCCESS) {
        fprintf(stderr, "proof stand-in: nvmlSystemGetCudaDriverVersion_v2: %s\n", error_string(rc));
        cuda_fails(CUDA_INSUFFICIENT_DRIVER);
    }
    fprintf(stderr, "proof stand-in: driver CUDA %d.%d, image built for CUDA %s (needs a driver of CUDA %d.%d or later)\n",
            driver / 1000, driver % 1000 / 10, PROOF_CUDA_VERSION, oldest_driver_for(built) / 1000,
            oldest_driver_for(built) % 1000 / 10);
    gpus = injected_gpus(lib);
    injected_caps();
    if (driver < oldest_driver_for(built))
        cuda_fails(CUDA_INSUFFICIENT_DRIVER);
    if (gpus == 0 || !is_char_device("/dev/nvidiactl"))
        cuda_fails(CUDA_NO_DEVICE);
}

int main(void)
{
    int numElements = 50000, threadsPerBlock = 256, blocksPerGrid, i;
    size_t size = numElements * sizeof(float);
    float *h_A, *h_B, *h_C;

    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("[Vector addition of %d elements]\n", numElements);
    h_A = malloc(size);
    h_B = malloc(size);
    h_C = malloc(size);
    if (h_A == NULL || h_B == NULL || h_C == NULL) {
        fprintf(stderr, "Failed to allocate host vectors!\n");
        exit(EXIT_FAILURE);
    }
    for (i = 0; i < numElements; ++i) {
        h_A[i] = rand() / (float)RAND_MAX;
        h_B[i] = rand() / (float)RAND_MAX;
    }
    check_driver();
    printf("Copy input data from the host memory to the CUDA device\n");
    blocksPerGrid = (numElements + threadsPerBlock - 1) / threadsPerBlock;
    printf("CUDA kernel launch with %d blocks of %d threads\n", blocksPerGrid, threadsPerBlock);
    for (i = 0; i < numElements; ++i) /* the kernel's work, on the CPU: there is no GPU behind the fake NVML */
        h_C[i] = h_A[i] + h_B[i] + 0.0f;
    printf("Copy output data from the CUDA device to the host memory\n");
    for (i = 0; i < numElements; ++i) {
        float error = h_A[i] + h_B[i] - h_C[i];

        if (error > 1e-5f || error < -1e-5f) {
            fprintf(stderr, "Result verification failed at element %d!\n", i);
            exit(EXIT_FAILURE);
        }
    }
    printf("Test PASSED\n");
    free(h_A);
    free(h_B);
    free(h_C);
    printf("Done\n");
    return 0;
}
