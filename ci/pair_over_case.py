"""A sanitizer workload of ci/gpu_pair_search.sh: grouped's pair form (STRATA_GROUPED_PAIR=1) on INT8 data whose
groups' unions outgrow the search path's bounded buffers (20 queries of full-width random selections in 65536 cells:
~19,000 union entries a group of 10, against ~8,000 a buffer), so the rounds stop and the groups concatenate; with
STRATA_GROUPED_UNION_SEARCH=1 set by the caller. Prints "sanitizer workload done"."""
import torch

import strata_kernels as sk
from strata_kernels import testing

case = testing.random_rows(testing.make_case("int8", 65536, 20), 5, full_width=True)
q, kv, ids, w = testing.to_torch(case, "cuda")
sk.qsa_prompt_attn(q, kv, ids, w, variant="grouped")
torch.cuda.synchronize()
print("sanitizer workload done")
