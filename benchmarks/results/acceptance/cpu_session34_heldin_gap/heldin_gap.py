"""Chain tau on training prompts the shipped drafter was trained on (shards 0-6) vs never-regenerated ones (7-10)."""
import json, sys, time, statistics
import weaver
from weaver.train.data import read_prompts
prompts = read_prompts("/tmp/data/train_prompts.jsonl")
SH = 4096
per = int(sys.argv[1]); out = sys.argv[2]; part = sys.argv[3] if len(sys.argv) > 3 else "0/1"
pi, pn = map(int, part.split("/"))
llm = weaver.LLM("smollm2", device="cpu", dtype="fp32")
tok = llm.tokenizer
picked = []
for group, shards in (("trained", range(0, 7)), ("fresh", range(7, 11))):
    count = {}
    for k in shards:
        for i in range(k * SH + 2048, min((k + 1) * SH, len(prompts))):
            p = prompts[i]
            if len(p.messages) != 1 or p.source not in ("sharegpt", "gsm_symbolic", "codeio", "stdlib_code"):
                continue
            src = "code" if p.source in ("codeio", "stdlib_code") else p.source
            if count.get(src, 0) >= per * (k - shards.start + 1) // len(shards) + (per if k == shards[-1] else 0):
                continue
            if count.get(src, 0) >= per:
                continue
            count[src] = count.get(src, 0) + 1
            picked.append((group, src, i, p.messages[0]["content"]))
recs = []
for group, src, i, text in picked[pi::pn]:
    t = time.time()
    o = llm.generate(text, method="chain", max_new_tokens=128, temperature=0.0)
    recs.append({"group": group, "source": src, "index": i, "tau": o.stats.tau, "new": o.stats.new_tokens})
    print(group, src, i, round(o.stats.tau, 2), o.stats.new_tokens, f"{time.time()-t:.0f}s", flush=True)
    json.dump(recs, open(out, "w"), indent=1)
