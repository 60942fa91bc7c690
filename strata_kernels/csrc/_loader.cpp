// _loader: the nanobind module that dlopens plugins and calls them with any DLPack array (ARCHITECTURE §6).
// It knows nothing of torch: arrays arrive as nb::ndarray (no copies, no casts: .noconvert()), the GIL is
// released around each call, and every failure comes back as (status, sentence) for the Python layer.
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
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
    if (api->struct_size < sizeof(strata_plugin_api) || !api->manifest || !api->probe || !api->prompt_attn ||
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

    m.def("load", &load, nb::arg("path"), nb::rv_policy::take_ownership,
          "dlopen a plugin and check its ABI version; raises RuntimeError with the reason on failure.");
}
