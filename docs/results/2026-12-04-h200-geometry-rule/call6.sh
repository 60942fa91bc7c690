. ci/device_prelude.sh; device_env > /dev/null
t0=$(date +%s); GEOMS=256x12,128x8,128x4,128x2 build_plugins /tmp/b0 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
t0=$(date +%s)
{ timeout 100 python3 -m pytest -q tests/gpu/test_grouped.py -k "one_form or union_in_clusters or deterministic"; timeout 200 python3 -m pytest -q -x tests/gpu/test_dispatch_model_gpu.py; } > $OUT/tests.txt 2>&1
echo "tests rc $? $(( $(date +%s)-t0 )) s"; grep -E "passed|failed" $OUT/tests.txt
b() { # name op fmt hd g kv shapes
  timeout 60 python3 -m strata_kernels bench --op $2 --device cuda --format $3 \
    --head-dim $4 --group $5 --n-head-kv $6 --shapes $7 --reps 10 --methods plugin --json /tmp/j_$1.json > /tmp/$1.txt 2>&1
  echo "$1 rc $?"
}
b pro_g12 prompt int8 256 12 2 2100x8,2100x64,32768x2048
b pro_g4 prompt int8 128 4 2 2100x16,2100x256,32768x4096
b pro_g2 prompt fp16 128 2 2 2100x32,2100x256
b dec_g4 decode int8 128 4 8 32768x2128,131072x272,262144x32
for f in /tmp/pro_*.txt /tmp/dec_*.txt; do echo "== $f"; grep -E "^[0-9]+x" $f | awk '{print $1,$3,$4,$5,$6}'; done > $OUT/summary.txt
cat $OUT/summary.txt
python3 -c "
import json, glob, os
print(json.dumps({os.path.basename(p)[2:-5]: json.load(open(p)) for p in sorted(glob.glob('/tmp/j_*.json'))}))" > $OUT/bench_all.json
