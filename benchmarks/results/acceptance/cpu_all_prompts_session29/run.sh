cd /work/main
for w in gsm_symbolic mt-bench humaneval; do
  /usr/bin/time -f "%e s wall" nice -n 5 .venv/bin/weaver bench acceptance --eval-dir .carry/eval --workloads $w --methods chain ddtree --budgets 64 --sampled-budget 0 --dtype fp32 --out /tmp/allp2/$w > /tmp/allp2/$w.log 2>&1
done
echo done > /tmp/allp2/DONE
# (humaneval ran apart, with OMP_NUM_THREADS=1 and without nice, once mt-bench had started; see COMMAND.txt)
