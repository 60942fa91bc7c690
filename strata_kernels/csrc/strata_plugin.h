/* strata_plugin.h - the plugin ABI of strata-kernels.
 *
 * Plain C, versioned. A plugin exports exactly one symbol, strata_plugin_entry(), which returns a table of
 * function pointers. Nothing C++ crosses this boundary: no exceptions, no STL types. Every call returns a
 * strata_status and, on anything but STRATA_OK, writes one sentence into err[0..err_n).
 *
 * The manifest (JSON) is also embedded in the plugin's bytes between STRATA_MANIFEST_BEGIN and
 * STRATA_MANIFEST_END, so a resolver can read it without loading the plugin.
 */
#ifndef STRATA_PLUGIN_H
#define STRATA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_ABI_VERSION 1u
#define STRATA_ENTRY_SYMBOL "strata_plugin_entry"

typedef enum strata_status {
    STRATA_OK = 0,
    STRATA_REFUSED = 1, /* nothing launched; the caller may fall back (e.g. shared-memory opt-in failed) */
    STRATA_ERROR = 2,   /* bad arguments, unsupported variant or a launch error; err says which */
    STRATA_UNSUPPORTED = 3 /* the variant/format/geometry/device cannot run here; err says why */
} strata_status;

/* KV formats, numbered as docs/verification.md's fmt codes. */
typedef enum strata_format {
    STRATA_FMT_FP16 = 0,
    STRATA_FMT_INT8 = 1,
    STRATA_FMT_Q4_0 = 2,
    STRATA_FMT_K8V4 = 3
} strata_format;

typedef enum strata_device_kind {
    STRATA_DEV_CPU = 0,
    STRATA_DEV_CUDA = 1,
    STRATA_DEV_HIP = 2,
    STRATA_DEV_SYCL = 3
} strata_device_kind;

typedef enum strata_op {
    STRATA_OP_PROMPT = 0,
    STRATA_OP_DECODE = 1
} strata_op;

typedef struct strata_device {
    int32_t kind;  /* strata_device_kind */
    int32_t index; /* device ordinal (0 for the CPU) */
} strata_device;

typedef struct strata_device_info {
    char name[128];
    char arch[32];          /* "sm_90", "gfx1100", "x86_64" */
    int32_t cc_major, cc_minor;
    int32_t driver_version; /* CUDA: cuDriverGetVersion; HIP: hipDriverGetVersion; else 0 */
    int32_t n_units;        /* SMs / CUs / threads */
} strata_device_info;

/* One attention call. All pointers are on `device`; all arrays C-contiguous, 16-byte aligned.
 * Layouts: docs/operation.md. The plugin never reads outside [0, n_pages) of page_table, [0, n_phys_pages)
 * of the pools or [0, cap) of an ids row, whatever the arrays hold (docs/operation.md). */
typedef struct strata_attn_args {
    uint32_t struct_size;       /* sizeof(strata_attn_args): lets a newer caller talk to an older plugin */
    strata_device device;
    int32_t format;             /* strata_format */
    int32_t head_dim;           /* HD */
    int32_t group;              /* G = n_head / n_head_kv */
    int32_t n_head_kv;
    int64_t n_q;
    int64_t cap;                /* row stride of ids */
    int64_t n_pages;            /* entries of page_table (logical pages) */
    int64_t n_phys_pages;       /* pages in the pools */
    int64_t width_stride;       /* 1: width[n_q]; 4: steps[n_q][4] with `width` pointing at column 3 */
    const float *q;             /* [n_q, n_head, HD] */
    float *out;                 /* [n_q, n_head, HD] */
    const int32_t *ids;         /* [n_q, cap] */
    const int32_t *width;
    const int32_t *page_table;  /* [n_pages] */
    const void *k;              /* fp16: uint16 [P, n_kv, 4, HD]; int8: int8 [.., HD]; q4_0: uint8 [.., HD/32*18] */
    const void *v;
    const void *k_scale;        /* uint16 (fp16 bits) [P, n_kv, 4, HD/64] for int8 / k8v4 K; else NULL */
    const void *v_scale;        /* int8 V only */
    float *scratch;             /* decode scratch (docs/operation.md) or NULL (the plugin then uses its own) */
    int64_t scratch_floats;
    int64_t *bad;               /* NULL or [2], initialised by the caller to INT64_MAX: [0] the smallest
                                   qi*cap+j whose id or page was out of range, [1] the smallest qi whose
                                   width was outside [0, cap]. Offending cells are masked either way. */
    int32_t n_threads;          /* CPU: worker threads, 0 = the plugin's default */
    int32_t reserved;
    void *stream;               /* CUDA/HIP stream, SYCL queue; NULL = default */
} strata_attn_args;

typedef struct strata_plugin_api {
    uint32_t abi_version;       /* STRATA_ABI_VERSION */
    uint32_t struct_size;       /* sizeof(strata_plugin_api) */
    const char *manifest;       /* JSON, NUL-terminated */
    int (*probe)(const strata_device *dev, strata_device_info *info, char *err, size_t err_n);
    int (*prompt_attn)(const strata_attn_args *args, const char *variant, char *err, size_t err_n);
    int (*decode_attn)(const strata_attn_args *args, const char *variant, char *err, size_t err_n);
    /* The variant `op` would run with these args (variant NULL = the switches), and why. Returns
     * STRATA_OK or STRATA_UNSUPPORTED (a forced variant that cannot run; why says so). */
    int (*which)(const strata_attn_args *args, int op, const char *variant,
                 char *name, size_t name_n, char *why, size_t why_n);

    /* Appended after the first release (struct_size tells whether a plugin has them; NULL = not provided).
     * host_words: `bytes` of host memory that kernels on `dev` can write (CUDA/HIP: mapped pinned memory), for the
     * per-device error words the caller reads without synchronising; *host is the host address, *device the
     * address to pass as args.bad. free_host_words releases it. sync_stream waits for `stream` on `dev` (the debug
     * setting that raises an out-of-range error at the offending call). */
    int (*host_words)(const strata_device *dev, size_t bytes, void **host, void **device, char *err, size_t err_n);
    int (*free_host_words)(const strata_device *dev, void *host, char *err, size_t err_n);
    int (*sync_stream)(const strata_device *dev, void *stream, char *err, size_t err_n);
} strata_plugin_api;

/* The size of the table a first-release plugin exports (everything up to and including `which`). */
#define STRATA_PLUGIN_API_V1_SIZE (offsetof(strata_plugin_api, which) + sizeof(void *))

typedef const strata_plugin_api *(*strata_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_PLUGIN_H */
