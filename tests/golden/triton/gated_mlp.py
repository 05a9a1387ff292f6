# ==== node 'fused_gate_proj' (fused): grid [2, 1, 1], 2 warps
@triton.jit
def yr_0_fused_gate_proj(p0, p1, p2, o0):
    b0 = tl.program_id(0)
    m_0 = tl.arange(0, 16)[:, None] < 8
    t5 = tl.full([16, 16], 0.0, tl.float32)
    t6 = tl.full([16, 16], 0.0, tl.float32)
    a0 = p0 + tl.arange(0, 16)[:, None] * 32 + tl.arange(0, 16)[None, :]
    k0 = m_0
    a1 = p1 + tl.arange(0, 16)[:, None] * 32 + (b0 * 16 + tl.arange(0, 16)[None, :])
    a2 = p2 + tl.arange(0, 16)[:, None] * 32 + (b0 * 16 + tl.arange(0, 16)[None, :])
    for it in range(2):
        t0 = tl.load(a0 + it * 16, mask=k0, other=0.0)
        t1 = tl.load(a1 + it * 512)
        t2 = tl.load(a2 + it * 512)
        t3 = tl.dot(t0, t1, input_precision="ieee")
        t4 = tl.dot(t0, t2, input_precision="ieee")
        t5 = t5 + t3
        t6 = t6 + t4
    t7 = t5 / (1.0 + tl.exp(-t5))
    t8 = t6 * t7
    tl.store(o0 + tl.arange(0, 16)[:, None] * 32 + (b0 * 16 + tl.arange(0, 16)[None, :]), t8, mask=m_0)
