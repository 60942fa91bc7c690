"""Parity of the grouped kernel at sizes with more work items than multiprocessors (a persistent loop, pieces, holes,
width 0): the parity test's own checks (QSA_SPEC §6.5; `strata_kernels.parity.run_cases`) at four INT8 shapes.
On a CUDA device with torch; used by ci/gpu_try_variants.sh. Exit status: the parity test's (0 pass, 1 failure)."""
import sys

from strata_kernels import parity

# (ctx, queries, holes, width 0): 820 units at 32768 x 2048, 562 at 4096 x 1403 (132 multiprocessors on the H200)
SHAPES = ((32768, 2048, False, False), (4096, 1403, False, False), (1500, 1500, True, False),
          (2100, 700, False, True))
cases = [parity.CaseSpec(0, "int8", ctx, n_q, "grouped items", holes=holes, width0=width0)
         for ctx, n_q, holes, width0 in SHAPES]
results = parity.run_cases(cases, device=("cuda", 0), variants=["grouped"])
print(parity.summary_line(results), flush=True)
sys.exit(parity.exit_code(results))
