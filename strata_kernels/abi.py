"""Constants of the plugin ABI shared by codegen (which writes them) and the resolver (which reads them).
They mirror csrc/strata_plugin.h."""

ABI_VERSION = 1  # STRATA_ABI_VERSION
MANIFEST_BEGIN = b"STRATA_MANIFEST_BEGIN"
MANIFEST_END = b"STRATA_MANIFEST_END"
