"""Seconds per PPO iteration on Hopper-v5's preset by optimizer, compile off and auto, one thread."""
import json, sys, time
import torch
from syncfree.tasks import preset
from syncfree.config import with_values
from syncfree.train.runner import Runner

torch.set_num_threads(1)
out = {}
for compile_mode in ("off", "auto"):
    for opt in ("adam", "muon", "schedule_free_adamw"):
        cfg = with_values(preset("gym:Hopper-v5"), {"ppo.optimizer": opt, "perf.compile": compile_mode})
        cfg.iterations, cfg.log.progress, cfg.seed = 1000, False, 0
        runner = Runner(cfg)
        runner.learn(until=2)  # warm-up
        times = []
        for it in range(3, 9):
            start = time.perf_counter()
            record = runner.learn(until=it)
            times.append(time.perf_counter() - start)
        phases = {k: round(v, 3) for k, v in record.items() if k.startswith("time_") or k.endswith("_seconds")}
        out[f"{opt} compile={compile_mode}"] = {"median_s": sorted(times)[len(times) // 2], "all": [round(t, 3) for t in times], "record_times": phases}
        print(opt, compile_mode, [round(t, 3) for t in times], phases, flush=True)
        runner.close()
json.dump(out, open(sys.argv[1], "w"), indent=1)
