. ci/device_prelude.sh; device_env > /dev/null
t0=$(date +%s); GEOMS=256x12,128x8,128x4,128x2 build_plugins /tmp/b0 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
timeout 100 python3 -m pytest -q tests/gpu/test_grouped.py -k "one_form" > $OUT/tests.txt 2>&1; echo "tests rc $?"; tail -1 $OUT/tests.txt
b() { # name fmt variants hd g kv shapes
  t0=$(date +%s)
  timeout 100 python3 -m strata_kernels bench --op prompt --device cuda --variant $3 --format $2 \
    --head-dim $4 --group $5 --n-head-kv $6 --shapes $7 --reps 10 --methods plugin --json /tmp/j_$1.json > /tmp/$1.txt 2>&1
  echo "$1 rc $? $(( $(date +%s)-t0 )) s"
}
b i8_g12 int8 grouped,v2 256 12 2 2100x8,2100x16,2100x32,2100x64,32768x16,32768x64
b i8_g4 int8 grouped,v2 128 4 2 2100x16,2100x64,2100x128
b i8_g8 int8 grouped,v2 128 8 2 2100x16,2100x64,2100x128
b i8_g2 int8 grouped,v2 128 2 2 2100x32,2100x128
b f16_g12 fp16 grouped,v1 256 12 2 2100x16,2100x64
b f16_g4 fp16 grouped,v1 128 4 2 2100x16,2100x128
for f in /tmp/i8_*.txt /tmp/f16_*.txt; do echo "== $f"; grep -E "^[0-9]+x" $f | awk '{print $1,$4,$5,$6}'; done > $OUT/summary.txt
cat $OUT/summary.txt
python3 -c "
import json, glob, os
print(json.dumps({os.path.basename(p)[2:-5]: json.load(open(p)) for p in sorted(glob.glob('/tmp/j_*.json'))}))" > $OUT/bench_all.json
