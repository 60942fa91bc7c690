# Sourced by the device scripts: run_sanitizers SECONDS COMMAND... runs COMMAND under compute-sanitizer memcheck and
# racecheck (each at most SECONDS), writes $OUT/sanitizer_<tool>.txt and a one-line summary per tool to
# $OUT/sanitizer.txt (shown on the terminal too; a failing tool's log tail as well), and returns the tools' exit
# statuses OR-ed together (0: both clean).
run_sanitizers() {
  local secs=$1 tool rc all=0
  shift
  : > "$OUT/sanitizer.txt"
  for tool in memcheck racecheck; do
    timeout "$secs" compute-sanitizer --tool $tool --error-exitcode 9 "$@" > "$OUT/sanitizer_$tool.txt" 2>&1
    rc=$?; all=$(( all | rc ))
    echo "compute-sanitizer $tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|sanitizer workload' \
      "$OUT/sanitizer_$tool.txt" | tr '\n' ' ')" | tee -a "$OUT/sanitizer.txt"
    [ $rc = 0 ] || tail -n 25 "$OUT/sanitizer_$tool.txt"
  done
  return $all
}
