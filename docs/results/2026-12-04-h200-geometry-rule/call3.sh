. ci/device_prelude.sh; device_env > /dev/null
t0=$(date +%s); GEOMS=256x12,128x8,128x4 build_plugins /tmp/b0 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
t0=$(date +%s)
timeout 200 python3 -m pytest -q -x tests/gpu/test_dispatch_model_gpu.py tests/gpu/test_grouped.py -k "model or one_form" > $OUT/tests.txt 2>&1
echo "tests rc $? $(( $(date +%s)-t0 )) s"; tail -2 $OUT/tests.txt
b() { # name fmt hd g kv shapes
  t0=$(date +%s)
  timeout 100 python3 -m strata_kernels bench --op decode --device cuda --variant flash,grouped --format $2 \
    --head-dim $3 --group $4 --n-head-kv $5 --shapes $6 --reps 10 --methods plugin --json /tmp/j_$1.json > /tmp/$1.txt 2>&1
  echo "$1 rc $? $(( $(date +%s)-t0 )) s"
  timeout 60 python3 -m strata_kernels bench --op decode --device cuda --format $2 \
    --head-dim $3 --group $4 --n-head-kv $5 --shapes $6 --reps 10 --methods plugin > /tmp/$1_auto.txt 2>&1
}
b i8_g8kv2 int8 128 8 2 32768x32,32768x36,32768x40,32768x48,32768x56,32768x64
b i8_g4 int8 128 4 8 32768x8,32768x9,32768x12
b i8_g4kv2_g8kv1 int8 128 4 2 32768x36,32768x48
b q4_g8kv2 q4_0 128 8 2 32768x64,32768x76,32768x96,32768x120,32768x128
b mix_g8kv2 k8v4 128 8 2 32768x32,32768x36,32768x48
b fp16_g4 fp16 128 4 8 32768x8,32768x9,32768x16,32768x32
for f in /tmp/*_g*.txt; do echo "== $f"; grep -E "^[0-9]+x" $f | awk '{print $1,$4,$5,$6}'; done > $OUT/summary.txt
cat $OUT/summary.txt
python3 -c "
import json, glob, os
print(json.dumps({os.path.basename(p)[2:-5]: json.load(open(p)) for p in sorted(glob.glob('/tmp/j_*.json'))}))" > $OUT/bench_all.json
