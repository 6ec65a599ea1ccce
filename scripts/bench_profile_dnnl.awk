# bench_profile_dnnl.awk - sums DNNL_VERBOSE=1 execution lines per primitive
# kind and propagation: time in ms per run, calls, and share of the total.
# Usage: DNNL_VERBOSE=1 dlua scripts/bench_profile.lua --mode train | awk -f scripts/bench_profile_dnnl.awk
/^(dnnl|onednn)_verbose,exec,/ {
  n = split($0, f, ",")
  key = f[4] " " f[6]
  if (f[4] == "convolution" || f[4] == "reorder") key = key " " f[5]
  t[key] += f[n]; c[key]++; total += f[n]
  next
}
{ print }
END {
  for (k in t) printf "  %-52s %9.1f ms %6d calls %5.1f%%\n", k, t[k], c[k], 100 * t[k] / total | "sort -k3 -nr -t'|'"
  close("sort -k3 -nr -t'|'")
  printf "  oneDNN total %.1f ms\n", total
}
