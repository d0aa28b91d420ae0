/* SPDX-License-Identifier: GPL-3.0-or-later */
/*
 * MIG layouts of the fake NVML library: every MIG-capable GPU's table of GPU instance profiles, its GPU and compute
 * instances, and the state file that keeps a layout across processes (see README.md, "MIG reconfiguration").
 *
 * A GPU's layout comes from its entry in the state file when there is one, else from the profile's mig.devices.
 * Every mutation locks the state file (flock on "<state>.lock"), refreshes every GPU from the file, changes one GPU in
 * memory and rewrites the whole file atomically (a temporary file in the same directory, fsync, rename).
 *
 * The validation messages of the state file are shared with sandbox/fakenvml/mig_state.py; keep the two in step
 * (the tests feed the same broken state files to both and compare the lines).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "fakenvml.h"

#define STATE_VERSION 1
#define PATH_LEN 512

/* snprintf that may cut its output (paths and names longer than their buffers are cut, never overrun) */
__attribute__((format(printf, 3, 4)))
static void cutf(char *out, size_t outlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(out, outlen, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------ the A100/H100 geometry */

/*
 * GPU instance profiles of a GPU with 7 compute slices and 8 memory slices (A100, H100): compute slices, memory
 * slices, instance count and the placements nvmlDeviceGetGpuInstancePossiblePlacements_v2 lists, in memory slices.
 * The sizes and counts are nvidia-smi mig -lgip's on A100/H100 (1g x7, 1g+me x1, 1g.20gb x4, 2g x3, 3g x2, 4g x1,
 * 7g x1); a placement's start is a multiple of its size, as the memory spans of NVIDIA's swizzIds are
 * (open-gpu-kernel-modules src/nvidia/src/kernel/gpu/mig_mgr/arch/ampere/kmigmgr_ga100.c, kmigmgrSwizzIdToSpan_GA100:
 * swizzId 0 the whole span, 1-2 halves, 3-6 quarters, 7-14 eighths), and a 1g or 2g instance cannot take the last
 * eighth or quarter: the GPU has 7 compute slices for 8 memory slices.
 */
struct geom {
    unsigned int constant, slices, mem_slices, instances, count;
    unsigned int starts[FAKE_MIG_MEMORY_SLICES];
};

static const struct geom geometry[] = {
    {0x0, 1, 1, 7, 7, {0, 1, 2, 3, 4, 5, 6}},    /* NVML_GPU_INSTANCE_PROFILE_1_SLICE: 1g.10gb */
    {0x7, 1, 1, 1, 7, {0, 1, 2, 3, 4, 5, 6}},    /* NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: 1g.10gb+me */
    {0x9, 1, 2, 4, 4, {0, 2, 4, 6}},             /* NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: 1g.20gb */
    {0x1, 2, 2, 3, 3, {0, 2, 4}},                /* NVML_GPU_INSTANCE_PROFILE_2_SLICE: 2g.20gb */
    {0x2, 3, 4, 2, 2, {0, 4}},                   /* NVML_GPU_INSTANCE_PROFILE_3_SLICE: 3g.40gb */
    {0x3, 4, 4, 1, 1, {0}},                      /* NVML_GPU_INSTANCE_PROFILE_4_SLICE: 4g.40gb */
    {0x4, 7, 8, 1, 1, {0}},                      /* NVML_GPU_INSTANCE_PROFILE_7_SLICE: 7g.80gb */
};

static const struct geom *geom_of(unsigned int constant)
{
    for (size_t i = 0; i < sizeof(geometry) / sizeof(geometry[0]); i++)
        if (geometry[i].constant == constant)
            return &geometry[i];
    return NULL;
}

/* nvidia-smi's profile ids on A100 and H100 (7g 0, 4g 5, 3g 9, 2g 14, 1g.20gb 15, 1g 19, 1g+me 20); other
 * constants 100 + the constant (this fake's). */
unsigned int fake_gi_profile_id(unsigned int profile)
{
    switch (profile) {
    case 0x4: return 0;
    case 0x3: return 5;
    case 0x2: return 9;
    case 0x1: return 14;
    case 0x9: return 15;
    case 0x0: return 19;
    case 0x7: return 20;
    default: return 100 + profile;
    }
}

/* NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE .. _7_SLICE_NVL (nvml.h): 1, 2, 3, 4, 7, 8, 6, 1 (REV1), 7 (NVL) */
static const unsigned int ci_slices_of_profile[FAKE_CI_PROFILE_COUNT] = {1, 2, 3, 4, 7, 8, 6, 1, 7};

unsigned int fake_ci_slices(unsigned int profile)
{
    return profile < FAKE_CI_PROFILE_COUNT ? ci_slices_of_profile[profile] : 0;
}

/* The swizzId of a memory span (kmigmgrSwizzIdToSpan_GA100 read backwards): the GPU instance id NVML reports. */
unsigned int fake_swizz_id(unsigned int start, unsigned int size)
{
    switch (size) {
    case 8: return 0;
    case 4: return 1 + start / 4;
    case 2: return 3 + start / 2;
    default: return 7 + start;
    }
}

/* The span of a swizzId (0-14), or 0 when it has none. */
static int swizz_span(unsigned int id, unsigned int *start, unsigned int *size)
{
    if (id == 0) {
        *start = 0, *size = 8;
    } else if (id <= 2) {
        *start = (id - 1) * 4, *size = 4;
    } else if (id <= 6) {
        *start = (id - 3) * 2, *size = 2;
    } else if (id <= 14) {
        *start = id - 7, *size = 1;
    } else {
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------ profile tables */

/*
 * The table entry of a profile the geometry defines, from the GPU's own numbers: memory floor(total * memory slices
 * / 8) MiB, so that go-nvlib's and mig-parted's names come out as nvidia-smi's (1g.10gb ... 7g.80gb on 80 GB, 1g.5gb
 * ... 7g.40gb on 40 GB); SMs the compute slices times multiprocessor_count / 7 rounded down to an even number
 * (SMs come in TPC pairs; 14 per slice on a 108-SM A100, as nvidia-smi shows), except on a 132-SM Hopper, where they
 * are what a real H200 answered (hopper_sms below); one copy engine per compute slice (eight for the whole Hopper
 * GPU, as the H200 answered); decoders, JPEG and OFA engines as nvidia-smi mig -lgip shows them on A100 (5 NVDECs
 * spread over the memory slices, the JPEG and OFA with the whole GPU) and on Hopper and later (one NVDEC and one
 * JPEG per compute slice, the OFA with the whole GPU); the +me profile has at least one of each.
 *
 * Not modelled: a real GPU's profile memory is not an eighth of the total per memory slice (the H200: 1g 16384,
 * 1g.35gb and 2g 33280, 3g and 4g 71424, 7g 143360 of 143771 MiB); the names come out the same either way.
 */

/* SMs of each GPU instance profile on a 132-SM Hopper GPU, as NVML's nvmlDeviceGetGpuInstanceProfileInfo answered
 * on a real H200, driver 580.159.04 (tests/fixtures/realgpu/h200-580.159.04.json; nvidia-smi mig -lgip agrees). */
static unsigned int hopper_sms(unsigned int constant)
{
    switch (constant) {
    case 0x0: case 0x7: return 16;   /* 1g, 1g+me */
    case 0x9: return 26;             /* 1g with two memory slices (1g.20gb, 1g.35gb) */
    case 0x1: return 32;             /* 2g */
    case 0x2: return 60;             /* 3g */
    case 0x3: return 64;             /* 4g */
    case 0x4: return 132;            /* 7g */
    default: return 0;
    }
}
static void computed_entry(const struct nvmlDevice_st *g, const struct geom *ge, struct fake_gip *e)
{
    int newer = g->architecture == NVML_DEVICE_ARCH_HOPPER || g->architecture == NVML_DEVICE_ARCH_BLACKWELL;

    memset(e, 0, sizeof(*e));
    e->present = 1;
    e->id = fake_gi_profile_id(ge->constant);
    e->slices = ge->slices;
    e->mem_slices = ge->mem_slices;
    e->instances = ge->instances;
    e->memory_mib = g->memory_total_mib * ge->mem_slices / FAKE_MIG_MEMORY_SLICES;
    e->sms = ge->slices * ((g->multiprocessor_count / 7) & ~1u);
    if (newer && g->multiprocessor_count == 132 && hopper_sms(ge->constant))
        e->sms = hopper_sms(ge->constant);
    e->copy_engines = ge->slices + (newer && ge->mem_slices == FAKE_MIG_MEMORY_SLICES);
    e->decoders = newer ? ge->slices : ge->mem_slices * 5 / 8;
    e->jpegs = newer ? ge->slices : (ge->mem_slices == 8);
    e->ofas = ge->mem_slices == 8;
    if (ge->constant == 0x7) {
        e->decoders = e->decoders ? e->decoders : 1;
        e->jpegs = e->jpegs ? e->jpegs : 1;
        e->ofas = 1;
    }
    e->placement_count = ge->count;
    memcpy(e->starts, ge->starts, sizeof(e->starts));
}

/* A profile's entry from the first MIG device the profile lists with it (what the fake answered before it had a
 * table): its slices, memory, engines and its GPU instance's SMs. */
static void listed_entry(const struct nvmlDevice_st *g, const struct nvmlDevice_st *m, struct fake_gip *e)
{
    const struct geom *ge = g->mig_geometry ? geom_of(m->gi_profile) : NULL;

    memset(e, 0, sizeof(*e));
    e->present = 1;
    e->id = fake_gi_profile_id(m->gi_profile);
    e->slices = m->gi_slices;
    e->mem_slices = ge != NULL ? ge->mem_slices : m->gi_slices;
    /* the media-extension profiles (+me) fit once per GPU: "1g.10gb+me ... 1/1" in nvidia-smi mig -lgip */
    if (ge != NULL)
        e->instances = ge->instances;
    else
        e->instances = (m->gi_profile == 0x7 || m->gi_profile == 0x8) ? 1 : g->mig_max_devices / m->gi_slices;
    e->sms = m->multiprocessor_count * m->gi_slices / m->ci_slices;
    e->copy_engines = m->copy_engines;
    e->decoders = m->decoders;
    e->encoders = m->encoders;
    e->jpegs = m->jpegs;
    e->ofas = m->ofas;
    e->memory_mib = m->memory_total_mib;
    if (ge != NULL) {
        e->placement_count = ge->count;
        memcpy(e->starts, ge->starts, sizeof(e->starts));
    }
}

/* ------------------------------------------------------------ spans and placements */

int fake_gi_span_free(const struct nvmlDevice_st *g, unsigned int start, unsigned int size)
{
    for (unsigned int i = 0; i < g->mig_max_devices; i++) {
        const struct fake_gi *o = &g->gis[i];

        if (o->live && start < o->start + o->size && o->start < start + size)
            return 0;
    }
    return 1;
}

int fake_ci_span_free(const struct fake_gi *gi, unsigned int start, unsigned int size)
{
    const struct nvmlDevice_st *g = gi->gpu;

    for (unsigned int i = 0; i < g->mig_max_devices; i++) {
        const struct nvmlDevice_st *m = &g->mig_first[i];

        if (m->live && m->gi == gi && start < m->ci_start + m->ci_slices && m->ci_start < start + size)
            return 0;
    }
    return 1;
}

/*
 * Compute instance placements in a GPU instance of gi_slices compute slices: starts at multiples of the profile's
 * size rounded up to a power of two, as the GPU instance placements are, while the instance fits (3g: 1c at 0, 1,
 * 2, 2c at 0; 7g: 3c at 0 and 4). The counts are those of nvidia-smi mig -lcip (gi_slices / size). Returns the count.
 */
unsigned int fake_ci_placements(unsigned int gi_slices, unsigned int ci_profile, unsigned int *starts)
{
    unsigned int size = fake_ci_slices(ci_profile), align = 1, n = 0;

    if (size == 0 || size > gi_slices)
        return 0;
    while (align < size)
        align <<= 1;
    for (unsigned int start = 0; start + size <= gi_slices && n < FAKE_MIG_MEMORY_SLICES; start += align)
        starts[n++] = start;
    return n;
}

unsigned int fake_gi_ci_count(const struct fake_gi *gi)
{
    unsigned int n = 0;

    for (unsigned int i = 0; i < gi->gpu->mig_max_devices; i++)
        n += gi->gpu->mig_first[i].live && gi->gpu->mig_first[i].gi == gi;
    return n;
}

unsigned int fake_gpu_gi_count(const struct nvmlDevice_st *g, unsigned int profile)
{
    unsigned int n = 0;

    for (unsigned int i = 0; i < g->mig_max_devices; i++)
        n += g->gis[i].live && g->gis[i].profile == profile;
    return n;
}

/* ------------------------------------------------------------ SHA-1 and name-based UUIDs */

/* SHA-1 as FIPS 180-4 specifies it: only for RFC 4122 version 5 UUIDs, not for anything secret. */
struct sha1 {
    uint32_t h[5];
    unsigned char block[64];
    size_t used;
    uint64_t bits;
};

static uint32_t rol32(uint32_t x, unsigned int n)
{
    return (x << n) | (x >> (32 - n));
}

static void sha1_block(struct sha1 *s)
{
    uint32_t w[80], a, b, c, d, e;

    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)s->block[4 * t] << 24 | (uint32_t)s->block[4 * t + 1] << 16
               | (uint32_t)s->block[4 * t + 2] << 8 | (uint32_t)s->block[4 * t + 3];
    for (int t = 16; t < 80; t++)
        w[t] = rol32(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4];
    for (int t = 0; t < 80; t++) {
        uint32_t f, k, tmp;

        if (t < 20)
            f = (b & c) | (~b & d), k = 0x5A827999u;
        else if (t < 40)
            f = b ^ c ^ d, k = 0x6ED9EBA1u;
        else if (t < 60)
            f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDCu;
        else
            f = b ^ c ^ d, k = 0xCA62C1D6u;
        tmp = rol32(a, 5) + f + e + k + w[t];
        e = d, d = c, c = rol32(b, 30), b = a, a = tmp;
    }
    s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d, s->h[4] += e;
}

static void sha1_init(struct sha1 *s)
{
    static const uint32_t h0[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};

    memset(s, 0, sizeof(*s));
    memcpy(s->h, h0, sizeof(h0));
}

static void sha1_update(struct sha1 *s, const void *data, size_t len)
{
    const unsigned char *p = data;

    for (size_t i = 0; i < len; i++) {
        s->block[s->used++] = p[i];
        s->bits += 8;
        if (s->used == 64) {
            sha1_block(s);
            s->used = 0;
        }
    }
}

static void sha1_final(struct sha1 *s, unsigned char out[20])
{
    uint64_t bits = s->bits;
    unsigned char pad = 0x80, zero = 0, len[8];

    sha1_update(s, &pad, 1);
    while (s->used != 56)
        sha1_update(s, &zero, 1);
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha1_update(s, len, 8);
    for (int i = 0; i < 20; i++)
        out[i] = (unsigned char)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}

/*
 * The UUID of a created compute instance: "MIG-" and the RFC 4122 version 5 UUID whose namespace is the GPU's UUID
 * and whose name is "fake-nvml/mig/gi<G>/ci<C>", so that every process and every rerun derives the same one
 * (Python: uuid.uuid5(uuid.UUID(gpu_uuid[4:]), 'fake-nvml/mig/gi%d/ci%d' % (G, C))).
 */
static void mig_uuid(const char *gpu_uuid, unsigned int gi_id, unsigned int ci_id, char *out, size_t outlen)
{
    unsigned char ns[16] = {0}, digest[20];
    char name[64];
    struct sha1 s;
    size_t n = 0;

    for (const char *c = gpu_uuid + 4; *c != '\0' && n < 32; c++) {   /* after "GPU-": 32 hex digits and dashes */
        unsigned int v;

        if (*c == '-')
            continue;
        v = (unsigned int)(*c <= '9' ? *c - '0' : (*c | 0x20) - 'a' + 10);
        ns[n / 2] = (unsigned char)(ns[n / 2] | (n % 2 ? v : v << 4));
        n++;
    }
    snprintf(name, sizeof(name), "fake-nvml/mig/gi%u/ci%u", gi_id, ci_id);
    sha1_init(&s);
    sha1_update(&s, ns, sizeof(ns));
    sha1_update(&s, name, strlen(name));
    sha1_final(&s, digest);
    digest[6] = (unsigned char)((digest[6] & 0x0F) | 0x50);
    digest[8] = (unsigned char)((digest[8] & 0x3F) | 0x80);
    snprintf(out, outlen, "MIG-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7], digest[8],
             digest[9], digest[10], digest[11], digest[12], digest[13], digest[14], digest[15]);
}

/* ------------------------------------------------------------ compute instances */

/*
 * The MIG profile name of a compute instance as go-nvlib (pkg/nvlib/device/mig_profile.go) and mig-parted
 * (pkg/types/mig_profile.go) write it: "<C>c.<G>g.<GB>gb" ("<G>g.<GB>gb" when C == G), "+me" for
 * NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1; GB from getMigMemorySizeGB: the instance's share of the GPU's memory
 * rounded up to eighths, times the GPU's memory in GiB rounded up, rounded.
 */
static void profile_name(const struct nvmlDevice_st *g, unsigned int gi_profile, unsigned int gi_slices,
                         unsigned int ci_slices, unsigned long long memory_mib, char *out, size_t outlen)
{
    unsigned long long total = g->memory_total_mib;
    unsigned long long eighths = (memory_mib * 8 + total - 1) / total;
    unsigned long long total_gb = (total + 1023) / 1024;
    unsigned long long gb = (eighths * total_gb * 2 + 8) / 16;
    const char *suffix = gi_profile == 0x7 ? "+me" : "";

    if (ci_slices == gi_slices)
        snprintf(out, outlen, "%ug.%llugb%s", gi_slices, gb, suffix);
    else
        snprintf(out, outlen, "%uc.%ug.%llugb%s", ci_slices, gi_slices, gb, suffix);
}

void fake_profile_name(const struct nvmlDevice_st *g, unsigned int gi_profile, unsigned int ci_slices, char *out,
                       size_t outlen)
{
    const struct fake_gip *e = &g->gip[gi_profile];

    profile_name(g, gi_profile, e->slices, ci_slices, e->memory_mib, out, outlen);
}

void fake_ci_fill(struct nvmlDevice_st *m, struct fake_gi *gi, unsigned int id, unsigned int profile,
                  unsigned int start, const char *uuid)
{
    struct nvmlDevice_st *g = gi->gpu;
    const struct fake_gip *e = &g->gip[gi->profile];
    unsigned int slot = m->index;

    memset(m, 0, sizeof(*m));
    m->is_mig = 1;
    m->index = slot;
    m->parent = g;
    m->live = 1;
    m->gi = gi;
    m->ci_start = start;
    m->gi_id = gi->id;
    m->ci_id = id;
    m->gi_profile = gi->profile;
    m->ci_profile = profile;
    m->gi_slices = e->slices;
    m->ci_slices = fake_ci_slices(profile);
    m->memory_total_mib = e->memory_mib;
    m->multiprocessor_count = e->slices ? e->sms * m->ci_slices / e->slices : 0;
    m->copy_engines = e->copy_engines;
    m->decoders = e->decoders;
    m->encoders = e->encoders;
    m->jpegs = e->jpegs;
    m->ofas = e->ofas;
    m->architecture = g->architecture;
    m->brand = g->brand;
    m->cc_major = g->cc_major;
    m->cc_minor = g->cc_minor;
    profile_name(g, gi->profile, m->gi_slices, m->ci_slices, e->memory_mib, m->mig_profile, sizeof(m->mig_profile));
    cutf(m->name, sizeof(m->name), "%s MIG %s", g->name, m->mig_profile);
    if (uuid != NULL && uuid[0] != '\0')
        snprintf(m->uuid, sizeof(m->uuid), "%s", uuid);
    else
        mig_uuid(g->uuid, gi->id, id, m->uuid, sizeof(m->uuid));
}

/* A listed MIG device shown in a slot: the profile's own values (name, memory, errors) for that compute instance. */
static void show_listed(struct nvmlDevice_st *m, const struct nvmlDevice_st *listed, struct fake_gi *gi,
                        unsigned int start)
{
    unsigned int slot = m->index;

    *m = *listed;
    m->index = slot;
    m->live = 1;
    m->gi = gi;
    m->ci_start = start;
}

/* ------------------------------------------------------------ layouts */

static struct fake_gi *free_gi_entry(struct nvmlDevice_st *g, struct fake_gi **claimed, unsigned int nclaimed)
{
    for (unsigned int i = 0; i < g->mig_max_devices; i++) {
        int taken = 0;

        for (unsigned int k = 0; k < nclaimed; k++)
            taken |= claimed[k] == &g->gis[i];
        if (!taken)
            return &g->gis[i];
    }
    return NULL;
}

/* The placement of a GPU instance the profile lists: its id's span where that is a placement of its profile and
 * free, else the first free placement, else the first (an impossible layout is shown as written). */
static void place_listed_gi(struct nvmlDevice_st *g, struct fake_gi *gi)
{
    const struct fake_gip *e = &g->gip[gi->profile];
    unsigned int start, size;

    gi->size = e->mem_slices;
    gi->start = 0;
    if (e->placement_count == 0)
        return;
    if (swizz_span(gi->id, &start, &size) && size == e->mem_slices && fake_gi_span_free(g, start, size)) {
        for (unsigned int k = 0; k < e->placement_count; k++) {
            if (e->starts[k] == start) {
                gi->start = start;
                return;
            }
        }
    }
    gi->start = e->starts[0];
    for (unsigned int k = 0; k < e->placement_count; k++) {
        if (fake_gi_span_free(g, e->starts[k], e->mem_slices)) {
            gi->start = e->starts[k];
            return;
        }
    }
}

/* The first free placement of a compute instance profile in a GPU instance, else 0. */
static unsigned int place_listed_ci(const struct fake_gi *gi, unsigned int ci_profile)
{
    unsigned int starts[FAKE_MIG_MEMORY_SLICES];
    unsigned int n = fake_ci_placements(gi->gpu->gip[gi->profile].slices, ci_profile, starts);

    for (unsigned int k = 0; k < n; k++)
        if (fake_ci_span_free(gi, starts[k], fake_ci_slices(ci_profile)))
            return starts[k];
    return 0;
}

void fake_mig_apply_listed(struct nvmlDevice_st *g)
{
    struct fake_gi *claimed[FAKE_MIG_MAX_DEVICES];
    unsigned int nclaimed = 0;

    g->mig_current = g->mig_listed_current;
    g->mig_pending = g->mig_listed_pending;
    for (unsigned int i = 0; i < g->mig_max_devices; i++) {
        g->mig_first[i].live = 0;
        g->gis[i].live = 0;
    }
    for (unsigned int k = 0; k < g->mig_listed_count && k < g->mig_max_devices; k++) {
        const struct nvmlDevice_st *l = &g->mig_listed[k];
        struct fake_gi *gi = NULL;

        for (unsigned int j = 0; j < nclaimed && gi == NULL; j++)
            if (claimed[j]->id == l->gi_id)
                gi = claimed[j];
        if (gi == NULL) {
            gi = free_gi_entry(g, claimed, nclaimed);
            claimed[nclaimed++] = gi;
            gi->id = l->gi_id;
            gi->profile = l->gi_profile;
            place_listed_gi(g, gi);
            gi->live = 1;
        }
        show_listed(&g->mig_first[k], l, gi, place_listed_ci(gi, l->ci_profile));
    }
}

void fake_mig_setup(struct fake_profile *p)
{
    for (unsigned int i = 0; i < p->gpu_count; i++) {
        struct nvmlDevice_st *g = &p->devs[i];
        int set[NVML_GPU_INSTANCE_PROFILE_COUNT];

        g->mig_listed_current = g->mig_current;
        g->mig_listed_pending = g->mig_pending;
        if (!g->mig_capable)
            continue;
        g->mig_geometry = g->mig_max_devices == 7;
        memset(g->gip, 0, sizeof(*g->gip) * NVML_GPU_INSTANCE_PROFILE_COUNT);
        if (g->mig_geometry)
            for (size_t k = 0; k < sizeof(geometry) / sizeof(geometry[0]); k++)
                computed_entry(g, &geometry[k], &g->gip[geometry[k].constant]);
        /* the first listed MIG device of a profile sets its entry (the values it answered before the table): the
         * GPU's own, else one of another GPU of the same model (same name and memory) in the profile's order */
        memset(set, 0, sizeof(set));
        for (unsigned int pass = 0; pass < 2; pass++) {
            for (unsigned int j = 0; j < p->gpu_count; j++) {
                const struct nvmlDevice_st *o = &p->devs[j];

                if ((pass == 0) != (o == g) || strcmp(o->name, g->name) != 0
                    || o->memory_total_mib != g->memory_total_mib)
                    continue;
                for (unsigned int k = 0; k < o->mig_listed_count; k++) {
                    const struct nvmlDevice_st *m = &o->mig_listed[k];

                    if (!set[m->gi_profile]) {
                        listed_entry(g, m, &g->gip[m->gi_profile]);
                        set[m->gi_profile] = 1;
                    }
                }
            }
        }
        fake_mig_apply_listed(g);
    }
}

/* Show a layout (validated against g by state_gpu) in g's slots, keeping the entries of instances that stay. */
static void apply_layout(struct nvmlDevice_st *g, const struct fake_layout *L)
{
    struct fake_gi *map[FAKE_MIG_MAX_DEVICES] = {NULL};
    const struct fake_layout_ci *want[FAKE_MIG_MAX_DEVICES] = {NULL};
    unsigned int want_gi[FAKE_MIG_MAX_DEVICES] = {0};

    g->mig_current = L->current;
    g->mig_pending = L->pending;
    /* GPU instances that stay keep their entry (their handles stay valid); new ones take a free entry */
    for (unsigned int i = 0; i < L->gi_count; i++) {
        for (unsigned int k = 0; k < g->mig_max_devices && map[i] == NULL; k++) {
            struct fake_gi *o = &g->gis[k];

            if (o->live && o->id == L->gis[i].id && o->profile == L->gis[i].profile && o->start == L->gis[i].start)
                map[i] = o;
        }
    }
    for (unsigned int i = 0; i < L->gi_count; i++) {
        if (map[i] != NULL)
            continue;
        for (unsigned int k = 0; k < g->mig_max_devices && map[i] == NULL; k++) {
            int taken = 0;

            for (unsigned int j = 0; j < L->gi_count; j++)
                taken |= map[j] == &g->gis[k];
            if (!taken)
                map[i] = &g->gis[k];
        }
        map[i]->id = L->gis[i].id;
        map[i]->profile = L->gis[i].profile;
        map[i]->start = L->gis[i].start;
        map[i]->size = g->gip[L->gis[i].profile].mem_slices;
    }
    for (unsigned int k = 0; k < g->mig_max_devices; k++) {
        int used = 0;

        for (unsigned int j = 0; j < L->gi_count; j++)
            used |= map[j] == &g->gis[k];
        g->gis[k].live = used;
    }
    for (unsigned int i = 0; i < L->gi_count; i++)
        for (unsigned int c = 0; c < L->gis[i].ci_count; c++) {
            want[L->gis[i].cis[c].slot] = &L->gis[i].cis[c];
            want_gi[L->gis[i].cis[c].slot] = i;
        }
    for (unsigned int k = 0; k < g->mig_max_devices; k++) {
        struct nvmlDevice_st *m = &g->mig_first[k];
        const struct fake_layout_ci *ci = want[k];
        const struct nvmlDevice_st *listed = NULL;
        struct fake_gi *gi;

        if (ci == NULL) {
            m->live = 0;
            continue;
        }
        gi = map[want_gi[k]];
        for (unsigned int j = 0; j < g->mig_listed_count && listed == NULL; j++) {
            const struct nvmlDevice_st *l = &g->mig_listed[j];

            if (ci->uuid[0] != '\0' && strcasecmp(l->uuid, ci->uuid) == 0 && l->gi_id == gi->id && l->ci_id == ci->id
                && l->gi_profile == gi->profile && l->ci_profile == ci->profile)
                listed = l;
        }
        if (listed != NULL)
            show_listed(m, listed, gi, ci->start);
        else
            fake_ci_fill(m, gi, ci->id, ci->profile, ci->start, ci->uuid);
    }
}

/* g's layout, GPU instances by id and compute instances by id (the file's order whatever the creation order). */
static void layout_of(const struct nvmlDevice_st *g, struct fake_layout *L)
{
    memset(L, 0, sizeof(*L));
    L->current = g->mig_current;
    L->pending = g->mig_pending;
    for (unsigned int k = 0; k < g->mig_max_devices; k++) {
        const struct fake_gi *gi = &g->gis[k];
        struct fake_layout_gi *lg;
        unsigned int pos;

        if (!gi->live)
            continue;
        for (pos = 0; pos < L->gi_count && L->gis[pos].id < gi->id; pos++)
            ;
        memmove(&L->gis[pos + 1], &L->gis[pos], (L->gi_count - pos) * sizeof(L->gis[0]));
        L->gi_count++;
        lg = &L->gis[pos];
        memset(lg, 0, sizeof(*lg));
        lg->id = gi->id;
        lg->profile = gi->profile;
        lg->start = gi->start;
        for (unsigned int s = 0; s < g->mig_max_devices; s++) {
            const struct nvmlDevice_st *m = &g->mig_first[s];
            unsigned int at;

            if (!m->live || m->gi != gi)
                continue;
            for (at = 0; at < lg->ci_count && lg->cis[at].id < m->ci_id; at++)
                ;
            memmove(&lg->cis[at + 1], &lg->cis[at], (lg->ci_count - at) * sizeof(lg->cis[0]));
            lg->ci_count++;
            lg->cis[at].id = m->ci_id;
            lg->cis[at].profile = m->ci_profile;
            lg->cis[at].start = m->ci_start;
            lg->cis[at].slot = m->index;
            lg->cis[at].has_slot = 1;
            snprintf(lg->cis[at].uuid, sizeof(lg->cis[at].uuid), "%s", m->uuid);
        }
    }
}

static json_t *layout_json(const struct fake_layout *L)
{
    json_t *obj = json_object(), *gis = json_array();

    json_object_set_new(obj, "current", json_boolean(L->current));
    json_object_set_new(obj, "pending", json_boolean(L->pending));
    for (unsigned int i = 0; i < L->gi_count; i++) {
        json_t *gi = json_object(), *cis = json_array();

        json_object_set_new(gi, "id", json_integer(L->gis[i].id));
        json_object_set_new(gi, "profile", json_integer(L->gis[i].profile));
        json_object_set_new(gi, "start", json_integer(L->gis[i].start));
        for (unsigned int c = 0; c < L->gis[i].ci_count; c++) {
            const struct fake_layout_ci *ci = &L->gis[i].cis[c];
            json_t *o = json_object();

            json_object_set_new(o, "id", json_integer(ci->id));
            json_object_set_new(o, "profile", json_integer(ci->profile));
            json_object_set_new(o, "start", json_integer(ci->start));
            json_object_set_new(o, "slot", json_integer(ci->slot));
            json_object_set_new(o, "uuid", json_string(ci->uuid));
            json_array_append_new(cis, o);
        }
        json_object_set_new(gi, "compute_instances", cis);
        json_array_append_new(gis, gi);
    }
    json_object_set_new(obj, "gpu_instances", gis);
    return obj;
}

/* ------------------------------------------------------------ state file validation */

struct sctx {
    const char *file;
    char *msg;
    size_t msglen;
};

__attribute__((format(printf, 3, 4)))
static int sfail(struct sctx *c, const char *path, const char *fmt, ...)
{
    char detail[FAKE_MSG_MAX / 2];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    snprintf(c->msg, c->msglen, "fake NVML: %s: %s: %s", c->file, path, detail);
    return -1;
}

static int s_keys(struct sctx *c, json_t *obj, const char *base, const char *const *allowed)
{
    const char *key;
    json_t *v;
    char path[PATH_LEN];

    json_object_foreach(obj, key, v) {
        int ok = key[0] == '_';

        for (const char *const *a = allowed; !ok && *a; a++)
            ok = strcmp(*a, key) == 0;
        if (!ok) {
            cutf(path, sizeof(path), "%s%s%s", base, base[0] ? "." : "", key);
            return sfail(c, path, "unknown field");
        }
    }
    (void)v;
    return 0;
}

/* A member: 1 present, 0 absent and optional; -1 missing and required. path receives base.key. */
static int s_member(struct sctx *c, json_t *obj, const char *base, const char *key, int required, json_t **out,
                    char *path)
{
    cutf(path, PATH_LEN, "%s%s%s", base, base[0] ? "." : "", key);
    *out = json_object_get(obj, key);
    if (*out == NULL)
        return required ? sfail(c, path, "missing required field") : 0;
    return 1;
}

static int s_int(struct sctx *c, json_t *obj, const char *base, const char *key, int required, long long lo,
                 long long hi, long long *out)
{
    char path[PATH_LEN];
    json_t *v;
    int r = s_member(c, obj, base, key, required, &v, path);

    if (r <= 0)
        return r;
    if (!json_is_integer(v))
        return sfail(c, path, "expected an integer");
    if (json_integer_value(v) < lo || json_integer_value(v) > hi)
        return sfail(c, path, "must be between %lld and %lld", lo, hi);
    *out = json_integer_value(v);
    return 1;
}

static int s_bool(struct sctx *c, json_t *obj, const char *base, const char *key, int *out)
{
    char path[PATH_LEN];
    json_t *v;
    int r = s_member(c, obj, base, key, 1, &v, path);

    if (r <= 0)
        return r;
    if (!json_is_boolean(v))
        return sfail(c, path, "expected a boolean");
    *out = json_is_true(v);
    return 1;
}

static int s_array(struct sctx *c, json_t *obj, const char *base, const char *key, json_t **out)
{
    char path[PATH_LEN];
    int r = s_member(c, obj, base, key, 1, out, path);

    if (r <= 0)
        return r;
    if (!json_is_array(*out))
        return sfail(c, path, "expected an array");
    return 1;
}

/* PREFIX-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex) */
static int uuid_form(const char *s, const char *prefix)
{
    static const size_t groups[] = {8, 4, 4, 4, 12};
    size_t plen = strlen(prefix);

    if (strncmp(s, prefix, plen) != 0)
        return 0;
    s += plen;
    for (size_t g = 0; g < 5; g++) {
        for (size_t i = 0; i < groups[g]; i++, s++)
            if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') || (*s >= 'A' && *s <= 'F')))
                return 0;
        if (g < 4 && *s++ != '-')
            return 0;
    }
    return *s == '\0';
}

static const char *const state_keys[] = {"version", "gpus", NULL};
static const char *const entry_keys[] = {"current", "pending", "gpu_instances", NULL};
static const char *const gi_keys[] = {"id", "profile", "start", "compute_instances", NULL};
static const char *const ci_keys[] = {"id", "profile", "start", "slot", "uuid", NULL};

static struct nvmlDevice_st *gpu_by_uuid(struct fake_profile *p, const char *uuid)
{
    for (unsigned int i = 0; i < p->gpu_count; i++)
        if (strcasecmp(p->devs[i].uuid, uuid) == 0)
            return &p->devs[i];
    return NULL;
}

/* One compute instance of a GPU entry; path names as mig_state.py writes them. */
static int state_ci(struct sctx *c, json_t *obj, const char *cbase, const char *ibase, unsigned int maxd,
                    const struct fake_gip *gip, unsigned int gi_profile, struct fake_layout_gi *lg,
                    struct fake_layout_ci *ci, char (*seen_slot)[PATH_LEN], char (*seen_uuid)[PATH_LEN],
                    struct fake_layout *L)
{
    char path[PATH_LEN];
    long long v;
    json_t *u;
    int r;

    if (!json_is_object(obj))
        return sfail(c, cbase, "expected an object");
    if (s_keys(c, obj, cbase, ci_keys) < 0)
        return -1;
    if (s_int(c, obj, cbase, "id", 1, 0, 65535, &v) < 0)
        return -1;
    ci->id = (unsigned int)v;
    if (s_int(c, obj, cbase, "profile", 1, 0, FAKE_CI_PROFILE_COUNT - 1, &v) < 0)
        return -1;
    ci->profile = (unsigned int)v;
    if (s_int(c, obj, cbase, "start", 1, 0, FAKE_MIG_MEMORY_SLICES - 1, &v) < 0)
        return -1;
    ci->start = (unsigned int)v;
    r = s_int(c, obj, cbase, "slot", 0, 0, maxd - 1, &v);
    if (r < 0)
        return -1;
    ci->has_slot = r;
    ci->slot = r ? (unsigned int)v : 0;
    ci->uuid[0] = '\0';
    r = s_member(c, obj, cbase, "uuid", 0, &u, path);
    if (r > 0) {
        if (!json_is_string(u))
            return sfail(c, path, "expected a string");
        if (!uuid_form(json_string_value(u), "MIG-"))
            return sfail(c, path, "not a well-formed UUID (expected MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)");
        cutf(ci->uuid, sizeof(ci->uuid), "%s", json_string_value(u));
    }
    if (gip != NULL && fake_ci_slices(ci->profile) > gip[gi_profile].slices) {
        cutf(path, sizeof(path), "%s.profile", cbase);
        return sfail(c, path, "compute instance profile %u does not fit in GPU instance profile %u", ci->profile,
                     gi_profile);
    }
    for (unsigned int j = 0; j < lg->ci_count; j++) {
        if (lg->cis[j].id == ci->id) {
            cutf(path, sizeof(path), "%s.id", cbase);
            return sfail(c, path, "duplicate of %s.compute_instances[%u].id", ibase, j);
        }
    }
    /* slots and UUIDs are unique on the GPU: seen_* hold the path of the compute instance that took each */
    if (ci->has_slot) {
        if (seen_slot[ci->slot][0] != '\0') {
            cutf(path, sizeof(path), "%s.slot", cbase);
            return sfail(c, path, "duplicate of %s.slot", seen_slot[ci->slot]);
        }
        cutf(seen_slot[ci->slot], PATH_LEN, "%s", cbase);
    }
    if (ci->uuid[0] != '\0') {
        for (unsigned int i = 0; i <= L->gi_count; i++) {
            const struct fake_layout_gi *og = i < L->gi_count ? &L->gis[i] : lg;

            for (unsigned int j = 0; j < og->ci_count; j++) {
                if (strcasecmp(og->cis[j].uuid, ci->uuid) == 0) {
                    cutf(path, sizeof(path), "%s.uuid", cbase);
                    return sfail(c, path, "duplicate of %s.uuid", seen_uuid[i * FAKE_MIG_MAX_DEVICES + j]);
                }
            }
        }
    }
    cutf(seen_uuid[L->gi_count * FAKE_MIG_MAX_DEVICES + lg->ci_count], PATH_LEN, "%s", cbase);
    return 0;
}

/* One GPU's entry; g is the profile's GPU of that UUID (NULL: another profile's, checked for form only). */
static int state_gpu(struct sctx *c, json_t *obj, const char *base, struct fake_profile *p, struct nvmlDevice_st *g,
                     struct fake_layout *L)
{
    static char seen_slot[FAKE_MIG_MAX_DEVICES][PATH_LEN];
    static char seen_uuid[FAKE_MIG_MAX_DEVICES * FAKE_MIG_MAX_DEVICES][PATH_LEN];
    char path[PATH_LEN], ibase[PATH_LEN], cbase[PATH_LEN];
    unsigned int maxd = g != NULL ? g->mig_max_devices : FAKE_MIG_MAX_DEVICES;
    const struct fake_gip *gip = g != NULL ? g->gip : NULL;
    unsigned int total = 0;
    json_t *gis, *gv;
    size_t i;

    memset(L, 0, sizeof(*L));
    memset(seen_slot, 0, sizeof(seen_slot));
    memset(seen_uuid, 0, sizeof(seen_uuid));
    if (!json_is_object(obj))
        return sfail(c, base, "expected an object");
    if (s_keys(c, obj, base, entry_keys) < 0)
        return -1;
    if (s_bool(c, obj, base, "current", &L->current) < 0 || s_bool(c, obj, base, "pending", &L->pending) < 0)
        return -1;
    if (s_array(c, obj, base, "gpu_instances", &gis) < 0)
        return -1;
    cutf(path, sizeof(path), "%s.gpu_instances", base);
    if (g != NULL && !g->mig_capable)
        return sfail(c, base, "devices[%u] is not MIG capable", g->index);
    if (json_array_size(gis) > 0 && !L->current)
        return sfail(c, path, "GPU instances listed but current is false");
    if (json_array_size(gis) > maxd)
        return sfail(c, path, "more GPU instances than max_devices (%u)", maxd);
    json_array_foreach(gis, i, gv) {
        struct fake_layout_gi *lg = &L->gis[L->gi_count];
        json_t *cis, *cv;
        long long v;
        size_t k;

        cutf(ibase, sizeof(ibase), "%s[%zu]", path, i);
        memset(lg, 0, sizeof(*lg));
        if (!json_is_object(gv))
            return sfail(c, ibase, "expected an object");
        if (s_keys(c, gv, ibase, gi_keys) < 0)
            return -1;
        if (s_int(c, gv, ibase, "id", 1, 0, 65535, &v) < 0)
            return -1;
        lg->id = (unsigned int)v;
        if (s_int(c, gv, ibase, "profile", 1, 0, NVML_GPU_INSTANCE_PROFILE_COUNT - 1, &v) < 0)
            return -1;
        lg->profile = (unsigned int)v;
        if (s_int(c, gv, ibase, "start", 1, 0, FAKE_MIG_MEMORY_SLICES - 1, &v) < 0)
            return -1;
        lg->start = (unsigned int)v;
        if (s_array(c, gv, ibase, "compute_instances", &cis) < 0)
            return -1;
        if (gip != NULL && !gip[lg->profile].present) {
            cutf(cbase, sizeof(cbase), "%s.profile", ibase);
            return sfail(c, cbase, "GPU instance profile %u is not offered by devices[%u]", lg->profile, g->index);
        }
        for (unsigned int j = 0; j < L->gi_count; j++) {
            if (L->gis[j].id == lg->id) {
                cutf(cbase, sizeof(cbase), "%s.id", ibase);
                return sfail(c, cbase, "duplicate of %s[%u].id", path, j);
            }
        }
        json_array_foreach(cis, k, cv) {
            cutf(cbase, sizeof(cbase), "%s.compute_instances[%zu]", ibase, k);
            if (total >= maxd) {
                cutf(cbase, sizeof(cbase), "%s", path);
                return sfail(c, cbase, "more compute instances than max_devices (%u)", maxd);
            }
            if (state_ci(c, cv, cbase, ibase, maxd, gip, lg->profile, lg, &lg->cis[lg->ci_count], seen_slot,
                         seen_uuid, L) < 0)
                return -1;
            lg->ci_count++;
            total++;
        }
        L->gi_count++;
    }
    /* compute instances without a slot take the lowest free ones, in the file's order */
    for (unsigned int a = 0; a < L->gi_count; a++) {
        for (unsigned int b = 0; b < L->gis[a].ci_count; b++) {
            struct fake_layout_ci *ci = &L->gis[a].cis[b];

            if (ci->has_slot)
                continue;
            for (unsigned int s = 0; s < maxd; s++) {
                if (seen_slot[s][0] == '\0') {
                    ci->slot = s;
                    ci->has_slot = 1;
                    cutf(seen_slot[s], PATH_LEN, "-");
                    break;
                }
            }
        }
    }
    (void)p;
    return 0;
}

/* Validate a parsed state file; layouts[i] and has[i] receive the entry of the profile's GPU i. */
static int state_validate(struct sctx *c, json_t *root, struct fake_profile *p, struct fake_layout *layouts, int *has)
{
    char path[PATH_LEN];
    const char *key;
    json_t *gpus, *entry;
    long long version;
    struct fake_layout scratch;

    memset(has, 0, sizeof(*has) * (p->gpu_count + 1));
    if (!json_is_object(root))
        return sfail(c, "top level", "expected an object");
    if (s_keys(c, root, "", state_keys) < 0)
        return -1;
    if (s_int(c, root, "", "version", 1, LLONG_MIN, LLONG_MAX, &version) < 0)
        return -1;
    if (version != STATE_VERSION)
        return sfail(c, "version", "unsupported version %lld (this library reads %d)", version, STATE_VERSION);
    if (s_member(c, root, "", "gpus", 1, &gpus, path) < 0)
        return -1;
    if (!json_is_object(gpus))
        return sfail(c, "gpus", "expected an object");
    json_object_foreach(gpus, key, entry) {
        struct nvmlDevice_st *g;

        if (key[0] == '_')
            continue;
        cutf(path, sizeof(path), "gpus.%s", key);
        if (!uuid_form(key, "GPU-"))
            return sfail(c, path, "not a GPU UUID (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)");
        g = gpu_by_uuid(p, key);
        if (state_gpu(c, entry, path, p, g, g != NULL ? &layouts[g->index] : &scratch) < 0)
            return -1;
        if (g != NULL)
            has[g->index] = 1;
    }
    return 0;
}

/* ------------------------------------------------------------ state file I/O */

static pthread_mutex_t g_stamp_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} g_stamp;

const char *fake_mig_state_path(void)
{
    const char *env = getenv(FAKE_MIG_STATE_ENV);

    return (env != NULL && env[0] != '\0') ? env : FAKE_DEFAULT_MIG_STATE;
}

static void stamp_now(void)
{
    struct stat st;
    int exists = stat(fake_mig_state_path(), &st) == 0;

    pthread_mutex_lock(&g_stamp_lock);
    memset(&g_stamp, 0, sizeof(g_stamp));
    g_stamp.exists = exists;
    if (exists) {
        g_stamp.dev = st.st_dev;
        g_stamp.ino = st.st_ino;
        g_stamp.size = st.st_size;
        g_stamp.mtime = st.st_mtim;
    }
    pthread_mutex_unlock(&g_stamp_lock);
}

int fake_mig_state_changed(void)
{
    struct stat st;
    int exists = stat(fake_mig_state_path(), &st) == 0;
    int changed;

    pthread_mutex_lock(&g_stamp_lock);
    changed = exists != g_stamp.exists
              || (exists && (st.st_dev != g_stamp.dev || st.st_ino != g_stamp.ino || st.st_size != g_stamp.size
                             || st.st_mtim.tv_sec != g_stamp.mtime.tv_sec
                             || st.st_mtim.tv_nsec != g_stamp.mtime.tv_nsec));
    pthread_mutex_unlock(&g_stamp_lock);
    return changed;
}

/*
 * Read the state file: SUCCESS with *root (NULL when there is none), or NVML_ERROR_UNKNOWN with msg. The file is
 * replaced by rename, never written in place, so a reader without the lock sees one whole version of it.
 */
static nvmlReturn_t read_state(const char *path, json_t **root, char *msg, size_t msglen)
{
    json_error_t jerr;
    struct stat st;
    FILE *fp;

    *root = NULL;
    fp = fopen(path, "r");
    if (fp == NULL) {
        if (errno == ENOENT || errno == ENOTDIR)
            return NVML_SUCCESS;
        snprintf(msg, msglen, "fake NVML: %s: cannot read: %s", path, strerror(errno));
        return NVML_ERROR_UNKNOWN;
    }
    if (fstat(fileno(fp), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(fp);
        snprintf(msg, msglen, "fake NVML: %s: is a directory, not a state file", path);
        return NVML_ERROR_UNKNOWN;
    }
    *root = json_loadf(fp, JSON_REJECT_DUPLICATES, &jerr);
    fclose(fp);
    if (*root == NULL) {
        snprintf(msg, msglen, "fake NVML: %s: line %d column %d: %s", path, jerr.line, jerr.column, jerr.text);
        return NVML_ERROR_UNKNOWN;
    }
    return NVML_SUCCESS;
}

/* Validate root and show every GPU's layout: its entry, else its profile's mig.devices. */
static nvmlReturn_t apply_root(struct fake_profile *p, json_t *root, const char *path, char *msg, size_t msglen)
{
    struct sctx c = {path, msg, msglen};
    struct fake_layout *layouts = calloc(p->gpu_count + 1, sizeof(*layouts));
    int *has = calloc(p->gpu_count + 1, sizeof(*has));
    nvmlReturn_t rc = NVML_SUCCESS;

    if (layouts == NULL || has == NULL) {
        rc = NVML_ERROR_MEMORY;
    } else if (root != NULL && state_validate(&c, root, p, layouts, has) < 0) {
        rc = NVML_ERROR_UNKNOWN;
    } else {
        for (unsigned int i = 0; i < p->gpu_count; i++) {
            if (!p->devs[i].mig_capable)
                continue;
            if (has[i])
                apply_layout(&p->devs[i], &layouts[i]);
            else
                fake_mig_apply_listed(&p->devs[i]);
        }
    }
    free(layouts);
    free(has);
    return rc;
}

nvmlReturn_t fake_mig_state_init(struct fake_profile *p, char *msg, size_t msglen)
{
    const char *path = fake_mig_state_path();
    json_t *root;
    nvmlReturn_t rc;

    stamp_now();
    rc = read_state(path, &root, msg, msglen);
    if (rc == NVML_SUCCESS && root != NULL)
        rc = apply_root(p, root, path, msg, msglen);
    json_decref(root);
    return rc;
}

void fake_mig_state_reload(struct fake_profile *p)
{
    char msg[FAKE_MSG_MAX];
    json_t *root;

    stamp_now();
    if (read_state(fake_mig_state_path(), &root, msg, sizeof(msg)) == NVML_SUCCESS)
        apply_root(p, root, fake_mig_state_path(), msg, sizeof(msg));   /* a malformed file leaves the view as is */
    json_decref(root);
}

static nvmlReturn_t errno_code(int err)
{
    /* as NVML answers a caller who may not change the GPU's configuration */
    if (err == EACCES || err == EPERM || err == EROFS || err == ENOENT || err == ENOTDIR)
        return NVML_ERROR_NO_PERMISSION;
    return NVML_ERROR_UNKNOWN;
}

nvmlReturn_t fake_txn_begin(struct fake_profile *p, struct fake_txn *t, char *msg, size_t msglen)
{
    const char *path = fake_mig_state_path();
    char lock[PATH_LEN];
    json_t *root = NULL;
    nvmlReturn_t rc;

    t->lock_fd = -1;
    t->root = NULL;
    msg[0] = '\0';
    if ((size_t)snprintf(lock, sizeof(lock), "%s.lock", path) >= sizeof(lock))
        return NVML_ERROR_NO_PERMISSION;
    t->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (t->lock_fd < 0)
        return errno_code(errno);
    while (flock(t->lock_fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            rc = errno_code(errno);
            close(t->lock_fd);
            t->lock_fd = -1;
            return rc;
        }
    }
    rc = read_state(path, &root, msg, msglen);
    if (rc == NVML_SUCCESS)
        rc = apply_root(p, root, path, msg, msglen);
    if (rc != NVML_SUCCESS) {
        json_decref(root);
        close(t->lock_fd);   /* releases the lock */
        t->lock_fd = -1;
        return rc;
    }
    stamp_now();
    if (root == NULL) {
        root = json_object();
        json_object_set_new(root, "version", json_integer(STATE_VERSION));
        json_object_set_new(root, "gpus", json_object());
    }
    t->root = root;
    return NVML_SUCCESS;
}

static void txn_end(struct fake_txn *t)
{
    json_decref((json_t *)t->root);
    t->root = NULL;
    if (t->lock_fd >= 0)
        close(t->lock_fd);
    t->lock_fd = -1;
}

void fake_txn_abort(struct fake_profile *p, struct fake_txn *t, struct nvmlDevice_st *g)
{
    char msg[FAKE_MSG_MAX];

    (void)g;
    apply_root(p, (json_t *)t->root, fake_mig_state_path(), msg, sizeof(msg));
    txn_end(t);
}

/* Write root to path: a temporary file in the same directory, fsync, rename, fsync the directory. */
static int write_state(const char *path, json_t *root)
{
    char tmp[PATH_LEN], dir[PATH_LEN];
    char *slash;
    FILE *fp;
    int fd, err = 0, dfd;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= sizeof(tmp))
        return ENAMETOOLONG;
    fd = mkstemp(tmp);
    if (fd < 0)
        return errno;
    fp = fdopen(fd, "w");
    if (fp == NULL) {
        err = errno;
        close(fd);
        unlink(tmp);
        return err;
    }
    if (fchmod(fd, 0644) != 0 || json_dumpf(root, fp, JSON_INDENT(2)) != 0 || fputc('\n', fp) == EOF
        || fflush(fp) != 0 || fsync(fd) != 0)
        err = errno ? errno : EIO;
    if (fclose(fp) != 0 && err == 0)
        err = errno;
    if (err == 0 && rename(tmp, path) != 0)
        err = errno;
    if (err != 0) {
        unlink(tmp);
        return err;
    }
    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else if (slash != NULL)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

nvmlReturn_t fake_txn_commit(struct fake_profile *p, struct fake_txn *t, struct nvmlDevice_st *g)
{
    json_t *root = json_deep_copy((json_t *)t->root), *gpus = json_object_get(root, "gpus");
    struct fake_layout L;
    const char *key;
    json_t *v;
    void *tmp;
    int err;

    if (root == NULL) {
        fake_txn_abort(p, t, g);
        return NVML_ERROR_MEMORY;
    }
    /* the GPU's entry replaces any other spelling of its UUID; the other GPUs' entries stay as read */
    json_object_foreach_safe(gpus, tmp, key, v) {
        if (strcasecmp(key, g->uuid) == 0)
            json_object_del(gpus, key);
    }
    layout_of(g, &L);
    json_object_set_new(gpus, g->uuid, layout_json(&L));
    err = write_state(fake_mig_state_path(), root);
    json_decref(root);
    if (err != 0) {
        fake_txn_abort(p, t, g);   /* not written: show the file's layout again */
        return errno_code(err);
    }
    stamp_now();
    txn_end(t);
    return NVML_SUCCESS;
}
