cd /work/main
for w in mt-bench humaneval gsm_symbolic; do
  /usr/bin/time -f "%e s wall" .venv/bin/weaver bench acceptance --eval-dir .carry/eval --workloads $w --methods weaver --budgets 64 --sampled-budget 0 --dtype fp32 --out /tmp/allp/$w > /tmp/allp/$w.log 2>&1
done
echo done > /tmp/allp/DONE
