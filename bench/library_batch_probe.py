#!/usr/bin/env python3
"""Probe, on the GPU with torch: do two skinny products that share A cost less as one batched
library call than as two calls? Each form is captured into a CUDA graph of one call and
replayed 200 times, median of 9, three times over (µs a call). Also rmsnorm_linear bs8's product
alone and with its norm. Results: bench/results/grouped_products_h200.txt.

    python3 bench/library_batch_probe.py
"""
import statistics, torch, torch.nn.functional as F
dev = "cuda"
def rnd(*s, scale=1.0): return (torch.rand(*s, device=dev) * 2 - 1).mul_(scale).half()
def graphed(fn):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): fn()
    return g.replay
def t(fn, iters=200, reps=9):
    fn = graphed(fn)
    for _ in range(20): fn()
    torch.cuda.synchronize(); m = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters): fn()
        b.record(); torch.cuda.synchronize(); m.append(a.elapsed_time(b) / iters * 1000)
    return statistics.median(m)
H = 4096
for rows in (64, 16):
    X = rnd(rows, H); W1 = rnd(H, H, scale=1/64); W2 = rnd(H, H, scale=1/64)
    W12 = torch.stack([W1, W2]); Wcat = torch.cat([W1, W2], 1).contiguous()
    C1 = torch.empty(rows, H, device=dev, dtype=torch.half); C2 = torch.empty_like(C1)
    C12 = torch.empty(2, rows, H, device=dev, dtype=torch.half)
    Xb = X.expand(2, rows, H)
    r = {}
    for name, fn in [
        ("one mm", lambda: torch.mm(X, W1, out=C1)),
        ("two mm", lambda: (torch.mm(X, W1, out=C1), torch.mm(X, W2, out=C2))),
        ("bmm batch 2", lambda: torch.bmm(Xb, W12, out=C12)),
        ("mm on [W1 W2]", lambda: torch.mm(X, Wcat)),
        ("two mm + silu*mul", lambda: F.silu(torch.mm(X, W1)) * torch.mm(X, W2)),
        ("bmm + silu*mul", lambda: (lambda c: F.silu(c[0]) * c[1])(torch.bmm(Xb, W12))),
        ("empty", lambda: None),
    ]:
        for rep in range(3):
            r.setdefault(name, []).append(t(fn))
    for k, v in r.items(): print(f"rows {rows:3d}  {k:20s} " + " ".join(f"{x:7.2f}" for x in v))
X = rnd(16, H); G = rnd(H); W = rnd(H, 6144, scale=1/64)
for name, fn in [("rmsnorm_linear bs8 mm", lambda: X @ W),
                 ("rmsnorm_linear bs8 norm+mm", lambda: F.rms_norm(X, (H,), G, 1e-6) @ W),
                 ("rmsnorm_linear bs8 norm", lambda: F.rms_norm(X, (H,), G, 1e-6))]:
    print(f"{name:30s} " + " ".join(f"{t(fn):7.2f}" for _ in range(3)))
