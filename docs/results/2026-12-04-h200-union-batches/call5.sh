. ci/device_prelude.sh; device_env > /dev/null; . ci/sanitize.sh
t0=$(date +%s); GEOMS=128x4,128x2 build_plugins /tmp/b0 /tmp/build.txt; echo "build $(( $(date +%s)-t0 )) s"
python3 ci/sanitize_union_batches.py | tail -3
run_sanitizers 200 python3 ci/sanitize_union_batches.py; echo "sanitizers rc $?"
