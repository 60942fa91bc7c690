. ci/device_prelude.sh; device_env > /dev/null
t0=$(date +%s); GEOMS=128x4,128x2,128x1 build_plugins /tmp/b0 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
for g in 4 2 1; do
  t0=$(date +%s)
  timeout 120 python3 -m strata_kernels parity --device cuda --variant grouped,flash --head-dim 128 --group $g --reps 1 \
    --json /tmp/p_$g.json > /tmp/parity_$g.txt 2>&1
  echo "parity 128x$g rc $? $(( $(date +%s)-t0 )) s: $(grep -E 'PASSED|FAIL' /tmp/parity_$g.txt | tail -1)"
done | tee $OUT/parity_summary.txt
cat /tmp/parity_*.txt > $OUT/parity.txt
timeout 90 python3 -m strata_kernels bench --op decode --device cuda --variant flash,grouped --format int8 --head-dim 128 \
  --group 1 --n-head-kv 8 --shapes 32768x8,32768x16,32768x64 --reps 10 --methods plugin --json $OUT/dec_g1.json > /tmp/dec_g1.txt 2>&1
grep -E "^[0-9]+x" /tmp/dec_g1.txt | awk '{print $1,$4,$5,$6}' | tee $OUT/dec_g1_summary.txt
