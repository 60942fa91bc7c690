// _loader: the nanobind module that dlopens plugins and calls them with any DLPack array (ARCHITECTURE §6).
// It knows nothing of torch: arrays arrive as nb::ndarray (no copies, no casts: .noconvert()), the GIL is
// released around each call, and every failure comes back as (status, sentence) for the Python layer.
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include "strata_plugin.h"

namespace nb = nanobind;
using Array = nb::ndarray<nb::c_contig>;

namespace {

struct Plugin {
    std::string path;
    void *handle = nullptr;
    const strata_plugin_api *api = nullptr;

    ~Plugin() {
        // Plugins stay loaded for the life of the process: kernels may still be queued on a stream.
    }
};

int device_kind(const Array &a) {
    switch (a.device_type()) {
        case nb::device::cpu::value:
        case nb::device::cuda_host::value:
        case nb::device::rocm_host::value: return STRATA_DEV_CPU;
        case nb::device::cuda::value: return STRATA_DEV_CUDA;
        case nb::device::rocm::value: return STRATA_DEV_HIP;
        case nb::device::oneapi::value: return STRATA_DEV_SYCL;
        default: return -1;
    }
}

Plugin *load(const std::string &path) {
    void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        throw std::runtime_error("cannot load plugin " + path + ": " + (e ? e : "dlopen failed"));
    }
    auto entry = reinterpret_cast<strata_plugin_entry_fn>(dlsym(h, STRATA_ENTRY_SYMBOL));
    if (!entry) {
        dlclose(h);
        throw std::runtime_error(path + " is not a strata-kernels plugin: it does not export " STRATA_ENTRY_SYMBOL);
    }
    const strata_plugin_api *api = entry();
    if (!api) {
        dlclose(h);
        throw std::runtime_error(path + ": " STRATA_ENTRY_SYMBOL "() returned NULL");
    }
    if (api->abi_version != STRATA_ABI_VERSION) {
        const unsigned got = api->abi_version;
        dlclose(h);
        throw std::runtime_error(path + " speaks plugin ABI " + std::to_string(got) + ", this loader speaks " +
                                 std::to_string(STRATA_ABI_VERSION) +
                                 ": rebuild the plugin with this strata-kernels version");
    }
    if (api->struct_size < STRATA_PLUGIN_API_V1_SIZE || !api->manifest || !api->probe || !api->prompt_attn ||
        !api->decode_attn || !api->which) {
        dlclose(h);
        throw std::runtime_error(path + ": incomplete plugin function table");
    }
    auto *p = new Plugin();
    p->path = path;
    p->handle = h;
    p->api = api;
    return p;
}

// An appended table entry, or NULL where the plugin predates it.
#define STRATA_API_FN(api, field) \
    ((api)->struct_size >= offsetof(strata_plugin_api, field) + sizeof(void *) ? (api)->field : nullptr)

const void *ptr_or_null(const std::optional<Array> &a) { return a ? a->data() : nullptr; }

// The sizes and the device of a call, from its arrays (shared by `call` and `which`).
strata_attn_args base_args(int fmt, const Array &q, const Array &ids, int64_t width_stride, const Array &page_table,
                           int n_head_kv, int head_dim, int group, int64_t n_phys_pages) {
    strata_attn_args a;
    std::memset(&a, 0, sizeof(a));
    a.struct_size = sizeof(a);
    a.device.kind = device_kind(q);
    a.device.index = q.device_id();
    a.format = fmt;
    a.head_dim = head_dim;
    a.group = group;
    a.n_head_kv = n_head_kv;
    a.n_q = q.ndim() ? int64_t(q.shape(0)) : 0;
    a.cap = ids.ndim() == 2 ? int64_t(ids.shape(1)) : 0;
    a.n_pages = page_table.ndim() ? int64_t(page_table.shape(0)) : 0;
    a.n_phys_pages = n_phys_pages;
    a.width_stride = width_stride;
    return a;
}

// Fill the argument struct; the Python layer (ops.py) has already checked dtypes, shapes and devices.
strata_attn_args make_args(int fmt, const Array &q, Array &out, const Array &ids, const Array &width,
                           int64_t width_stride, const Array &page_table, const Array &k, const Array &v,
                           const std::optional<Array> &k_scale, const std::optional<Array> &v_scale,
                           int n_head_kv, int head_dim, int group, int64_t n_phys_pages,
                           const std::optional<Array> &scratch, const std::optional<Array> &bad, int n_threads,
                           uintptr_t stream) {
    strata_attn_args a = base_args(fmt, q, ids, width_stride, page_table, n_head_kv, head_dim, group, n_phys_pages);
    a.q = static_cast<const float *>(q.data());
    a.out = static_cast<float *>(out.data());
    a.ids = static_cast<const int32_t *>(ids.data());
    // steps [n_q, 4]: the width is column 3.
    a.width = static_cast<const int32_t *>(width.data()) + (width_stride == 4 ? 3 : 0);
    a.page_table = static_cast<const int32_t *>(page_table.data());
    a.k = k.data();
    a.v = v.data();
    a.k_scale = ptr_or_null(k_scale);
    a.v_scale = ptr_or_null(v_scale);
    a.scratch = scratch ? static_cast<float *>(scratch->data()) : nullptr;
    a.scratch_floats = scratch ? int64_t(scratch->size()) : 0;
    a.bad = bad ? static_cast<int64_t *>(bad->data()) : nullptr;
    a.n_threads = n_threads;
    a.stream = reinterpret_cast<void *>(stream);
    return a;
}

// A plan's fixed arguments (ARCHITECTURE §6, hot path): the KV pools, geometry, scratch and error word are bound
// once; `run` takes the per-call pointers as integers (the Python plan has checked shapes, dtypes and devices), so
// a call converts no arrays. Before launching it reads the device's error words (a plain read of host memory, no
// device sync) and launches nothing while one holds an unreported offence.
struct Bound {
    const Plugin *plugin = nullptr;
    strata_attn_args a{};
    int op = 0;
    std::string variant;
    bool has_variant = false;
    const int64_t *scan = nullptr;  // host view of the device's error words, checked before each launch
    int64_t scan_words = 0;
    bool local_flag = false;        // host plugins: a per-call flag, reported by this call (CPU calls are synchronous)
};

constexpr int64_t kNoOffence = INT64_MAX;
constexpr int kPending = 100;  // an earlier call's offence is pending: nothing launched
constexpr int kFlagged = 101;  // this call ran and flagged an offence (host plugins)
constexpr int kMisaligned = 102;  // q or out does not start on a 16-byte boundary (the ABI's): nothing launched

// Calls sharing one scratch buffer must not interleave their launches (a chunk kernel of one call between the
// chunk and merge kernels of another on the same stream): a striped lock on the scratch address.
std::mutex &scratch_lock(const void *p) {
    static std::mutex stripes[64];
    return stripes[(reinterpret_cast<uintptr_t>(p) >> 8) % 64];
}

bool pending(const Bound &b) {
    for (int64_t i = 0; i < b.scan_words; ++i)
        if (b.scan[i] != kNoOffence) return true;
    return false;
}

nb::object run_bound(Bound &b, uintptr_t q, uintptr_t out, uintptr_t ids, uintptr_t width, int64_t n_q, int64_t cap,
                     int64_t width_stride, uintptr_t stream, uintptr_t scratch, int64_t scratch_floats) {
    if (b.scan && pending(b)) return nb::make_tuple(kPending, std::string());
    // The plugin ABI's alignment of q and out (kernels move them in 16-byte vectors), checked where every plan's
    // call passes (run_arrays' addresses are read only here): the caller's checks then say which argument.
    if ((q | out) & 15u) return nb::make_tuple(kMisaligned, std::string());
    strata_attn_args a = b.a;
    if (scratch) {  // this call's own scratch (the plain calls': the framework's stream-ordered allocator)
        a.scratch = reinterpret_cast<float *>(scratch);
        a.scratch_floats = scratch_floats;
    }
    a.n_q = n_q;
    a.cap = cap;
    a.width_stride = width_stride;
    a.q = reinterpret_cast<const float *>(q);
    a.out = reinterpret_cast<float *>(out);
    a.ids = reinterpret_cast<const int32_t *>(ids);
    a.width = reinterpret_cast<const int32_t *>(width) + (width_stride == 4 ? 3 : 0);
    a.stream = reinterpret_cast<void *>(stream);
    int64_t local[2] = {kNoOffence, kNoOffence};
    if (b.local_flag) a.bad = local;
    char err[1024];
    err[0] = 0;
    const char *var = b.has_variant ? b.variant.c_str() : nullptr;
    int st;
    {
        nb::gil_scoped_release release;
        std::unique_lock<std::mutex> lk;
        if (a.scratch && !scratch) lk = std::unique_lock<std::mutex>(scratch_lock(a.scratch));
        st = b.op == STRATA_OP_PROMPT ? b.plugin->api->prompt_attn(&a, var, err, sizeof(err))
                                      : b.plugin->api->decode_attn(&a, var, err, sizeof(err));
    }
    if (st == STRATA_OK && b.local_flag && (local[0] != kNoOffence || local[1] != kNoOffence))
        return nb::make_tuple(kFlagged, std::string(), local[0], local[1]);
    if (st == STRATA_OK) return nb::int_(0);
    return nb::make_tuple(st, std::string(err));
}

}  // namespace

NB_MODULE(_loader, m) {
    m.doc() = "dlopen + call strata-kernels plugins (C ABI " + std::to_string(STRATA_ABI_VERSION) + ")";
    m.attr("ABI_VERSION") = STRATA_ABI_VERSION;
    // Loaded plugins live as long as the process (kernels may still be queued), so their handles are still
    // referenced at interpreter exit by design: not a leak worth a warning.
    nb::set_leak_warnings(false);
    m.attr("OK") = int(STRATA_OK);
    m.attr("REFUSED") = int(STRATA_REFUSED);
    m.attr("ERROR") = int(STRATA_ERROR);
    m.attr("UNSUPPORTED") = int(STRATA_UNSUPPORTED);

    nb::class_<Plugin>(m, "Plugin")
        .def_prop_ro("path", [](const Plugin &p) { return p.path; })
        .def_prop_ro("abi_version", [](const Plugin &p) { return p.api->abi_version; })
        .def_prop_ro("manifest", [](const Plugin &p) { return std::string(p.api->manifest); })
        .def(
            "probe",
            [](const Plugin &p, int kind, int index) {
                strata_device dev{kind, index};
                strata_device_info info;
                std::memset(&info, 0, sizeof(info));
                char err[512] = {0};
                int st;
                {
                    nb::gil_scoped_release release;
                    st = p.api->probe(&dev, &info, err, sizeof(err));
                }
                nb::dict d;
                d["status"] = st;
                d["error"] = std::string(err);
                d["name"] = std::string(info.name);
                d["arch"] = std::string(info.arch);
                d["cc"] = nb::make_tuple(info.cc_major, info.cc_minor);
                d["driver_version"] = info.driver_version;
                d["n_units"] = info.n_units;
                return d;
            },
            nb::arg("kind"), nb::arg("index") = 0)
        .def(
            "call",
            [](const Plugin &p, int op, std::optional<std::string> variant, int fmt, Array q, Array out, Array ids,
               Array width, int64_t width_stride, Array page_table, Array k, Array v,
               std::optional<Array> k_scale, std::optional<Array> v_scale, int n_head_kv, int head_dim, int group,
               int64_t n_phys_pages, std::optional<Array> scratch, std::optional<Array> bad, int n_threads,
               uintptr_t stream) {
                if (device_kind(q) < 0) return std::make_tuple(int(STRATA_ERROR), std::string("q: unsupported device"));
                strata_attn_args a = make_args(fmt, q, out, ids, width, width_stride, page_table, k, v, k_scale,
                                               v_scale, n_head_kv, head_dim, group, n_phys_pages, scratch, bad,
                                               n_threads, stream);
                char err[1024] = {0};
                const char *var = variant ? variant->c_str() : nullptr;
                int st;
                {
                    nb::gil_scoped_release release;
                    st = op == STRATA_OP_PROMPT ? p.api->prompt_attn(&a, var, err, sizeof(err))
                                                : p.api->decode_attn(&a, var, err, sizeof(err));
                }
                return std::make_tuple(st, std::string(err));
            },
            nb::arg("op"), nb::arg("variant").none(), nb::arg("fmt"), nb::arg("q").noconvert(),
            nb::arg("out").noconvert(), nb::arg("ids").noconvert(), nb::arg("width").noconvert(),
            nb::arg("width_stride"), nb::arg("page_table").noconvert(), nb::arg("k").noconvert(),
            nb::arg("v").noconvert(), nb::arg("k_scale").noconvert().none(), nb::arg("v_scale").noconvert().none(),
            nb::arg("n_head_kv"), nb::arg("head_dim"), nb::arg("group"), nb::arg("n_phys_pages"),
            nb::arg("scratch").noconvert().none(), nb::arg("bad").noconvert().none(), nb::arg("n_threads") = 0,
            nb::arg("stream") = 0)
        .def(
            "bind",
            [](const Plugin &p, int op, std::optional<std::string> variant, int fmt, uintptr_t page_table,
               int64_t n_pages, uintptr_t k, uintptr_t v, uintptr_t k_scale, uintptr_t v_scale, int n_head_kv,
               int head_dim, int group, int64_t n_phys_pages, int kind, int index) {
                // Addresses, not arrays: binding converts nothing (no DLPack export, so it is safe during capture).
                auto *b = new Bound();
                b->plugin = &p;
                b->op = op;
                b->has_variant = bool(variant);
                if (variant) b->variant = *variant;
                strata_attn_args &a = b->a;
                std::memset(&a, 0, sizeof(a));
                a.struct_size = sizeof(a);
                a.device.kind = kind;
                a.device.index = index;
                a.format = fmt;
                a.head_dim = head_dim;
                a.group = group;
                a.n_head_kv = n_head_kv;
                a.n_pages = n_pages;
                a.n_phys_pages = n_phys_pages;
                a.width_stride = 1;
                a.page_table = reinterpret_cast<const int32_t *>(page_table);
                a.k = reinterpret_cast<const void *>(k);
                a.v = reinterpret_cast<const void *>(v);
                a.k_scale = reinterpret_cast<const void *>(k_scale);
                a.v_scale = reinterpret_cast<const void *>(v_scale);
                return b;
            },
            nb::arg("op"), nb::arg("variant").none(), nb::arg("fmt"), nb::arg("page_table"), nb::arg("n_pages"),
            nb::arg("k"), nb::arg("v"), nb::arg("k_scale"), nb::arg("v_scale"), nb::arg("n_head_kv"),
            nb::arg("head_dim"), nb::arg("group"), nb::arg("n_phys_pages"), nb::arg("kind"), nb::arg("index"),
            nb::rv_policy::take_ownership, nb::keep_alive<0, 1>(),
            "A plan's fixed arguments (the caller keeps the arrays alive): a Bound to run().")
        .def_prop_ro("has_host_words",
                     [](const Plugin &p) { return STRATA_API_FN(p.api, host_words) != nullptr &&
                                                  STRATA_API_FN(p.api, sync_stream) != nullptr; })
        .def(
            "host_words",
            [](const Plugin &p, int kind, int index, size_t bytes) {
                auto fn = STRATA_API_FN(p.api, host_words);
                if (!fn) throw std::runtime_error(p.path + " predates host_words (rebuild it)");
                strata_device dev{kind, index};
                void *host = nullptr, *device = nullptr;
                char err[512] = {0};
                if (fn(&dev, bytes, &host, &device, err, sizeof(err)) != STRATA_OK) throw std::runtime_error(err);
                return std::make_tuple(reinterpret_cast<uintptr_t>(host), reinterpret_cast<uintptr_t>(device));
            },
            nb::arg("kind"), nb::arg("index"), nb::arg("bytes"),
            "Host memory the device's kernels can write (mapped pinned on a GPU): (host address, device address).")
        .def(
            "sync_stream",
            [](const Plugin &p, int kind, int index, uintptr_t stream) {
                auto fn = STRATA_API_FN(p.api, sync_stream);
                if (!fn) throw std::runtime_error(p.path + " predates sync_stream (rebuild it)");
                strata_device dev{kind, index};
                char err[512] = {0};
                int st;
                {
                    nb::gil_scoped_release release;
                    st = fn(&dev, reinterpret_cast<void *>(stream), err, sizeof(err));
                }
                if (st != STRATA_OK) throw std::runtime_error(err);
            },
            nb::arg("kind"), nb::arg("index"), nb::arg("stream"))
        .def(
            "which",
            [](const Plugin &p, int op, std::optional<std::string> variant, int fmt, Array q, Array ids,
               Array /* width: only its shape matters, already checked */, int64_t width_stride, Array page_table, int n_head_kv, int head_dim, int group,
               int64_t n_phys_pages) {
                const strata_attn_args a =
                    base_args(fmt, q, ids, width_stride, page_table, n_head_kv, head_dim, group, n_phys_pages);
                char name[64] = {0}, why[1024] = {0};
                const int st = p.api->which(&a, op, variant ? variant->c_str() : nullptr, name, sizeof(name), why,
                                            sizeof(why));
                return std::make_tuple(st, std::string(name), std::string(why));
            },
            nb::arg("op"), nb::arg("variant").none(), nb::arg("fmt"), nb::arg("q").noconvert(),
            nb::arg("ids").noconvert(), nb::arg("width").noconvert(), nb::arg("width_stride"),
            nb::arg("page_table").noconvert(), nb::arg("n_head_kv"), nb::arg("head_dim"), nb::arg("group"),
            nb::arg("n_phys_pages"));

    m.attr("PENDING") = kPending;
    m.attr("FLAGGED") = kFlagged;
    m.attr("MISALIGNED") = kMisaligned;

    nb::class_<Bound>(m, "Bound")
        .def("run", &run_bound, nb::arg("q"), nb::arg("out"), nb::arg("ids"), nb::arg("width"), nb::arg("n_q"),
             nb::arg("cap"), nb::arg("width_stride"), nb::arg("stream"), nb::arg("scratch") = 0,
             nb::arg("scratch_floats") = 0,
             "Launch with raw pointers (already checked); 0, or (status, sentence[, bad0, bad1]).")
        .def(
            "run_arrays",
            [](Bound &b, Array q, Array out, Array ids, Array width, int64_t width_stride, uintptr_t stream) {
                return run_bound(b, reinterpret_cast<uintptr_t>(q.data()), reinterpret_cast<uintptr_t>(out.data()),
                                 reinterpret_cast<uintptr_t>(ids.data()), reinterpret_cast<uintptr_t>(width.data()),
                                 q.ndim() ? int64_t(q.shape(0)) : 0, ids.ndim() == 2 ? int64_t(ids.shape(1)) : 0,
                                 width_stride, stream, 0, 0);
            },
            nb::arg("q").noconvert(), nb::arg("out").noconvert(), nb::arg("ids").noconvert(),
            nb::arg("width").noconvert(), nb::arg("width_stride"), nb::arg("stream"),
            "run() with host arrays (numpy: faster than reading their addresses in Python).")
        .def("set_scratch", [](Bound &b, uintptr_t ptr, int64_t floats) {
            b.a.scratch = reinterpret_cast<float *>(ptr);
            b.a.scratch_floats = ptr ? floats : 0;
        })
        .def("set_errors", [](Bound &b, uintptr_t bad, uintptr_t scan, int64_t scan_words, bool local) {
            b.a.bad = reinterpret_cast<int64_t *>(bad);
            b.scan = reinterpret_cast<const int64_t *>(scan);
            b.scan_words = scan ? scan_words : 0;
            b.local_flag = local;
        })
        .def("which", [](const Bound &b, int64_t n_q, int64_t cap, int64_t width_stride) {
            strata_attn_args a = b.a;
            a.n_q = n_q;
            a.cap = cap;
            a.width_stride = width_stride;
            char name[64] = {0}, why[1024] = {0};
            const int st = b.plugin->api->which(&a, b.op, b.has_variant ? b.variant.c_str() : nullptr, name,
                                                sizeof(name), why, sizeof(why));
            return std::make_tuple(st, std::string(name), std::string(why));
        });

    m.def("load", &load, nb::arg("path"), nb::rv_policy::take_ownership,
          "dlopen a plugin and check its ABI version; raises RuntimeError with the reason on failure.");
}
