# ==== node 'fused_scores' (fused): grid [2, 1, 1], 2 warps
@triton.jit
def yr_0_fused_scores(p0, p1, p2, o0):
    b0 = tl.program_id(0)
    m_0 = tl.arange(0, 16)[None, None, :] < 8
    m_1 = tl.arange(0, 16)[None, :, None] < 8
    t3 = tl.full([1, 16, 16], 0.0, tl.float32)
    t4 = tl.full([1, 16, 32], 0.0, tl.float32)
    t5 = tl.full([1, 32, 16], 0.0, tl.float32)
    a0 = p0 + (b0 * 1 + tl.arange(0, 1)[:, None, None]) * 128 + tl.arange(0, 16)[None, :, None] * 8 + tl.arange(0, 16)[None, None, :]
    k0 = m_0
    a1 = p1 + (b0 * 1 + tl.arange(0, 1)[:, None, None]) * 256 + tl.arange(0, 16)[None, :, None] * 32 + tl.arange(0, 32)[None, None, :]
    k1 = m_1
    a2 = p2 + (b0 * 1 + tl.arange(0, 1)[:, None, None]) * 256 + tl.arange(0, 32)[None, :, None] * 8 + tl.arange(0, 16)[None, None, :]
    k2 = m_0
    for it in range(1):
        t0 = tl.load(a0, mask=k0, other=0.0)
        t1 = tl.load(a1, mask=k1, other=0.0)
        t2 = tl.load(a2, mask=k2, other=0.0)
        t3 = t3 + t0
        t4 = t4 + t1
        t5 = t5 + t2
    t6 = tl.dot(tl.where(m_0, t3, 0.0), tl.where(m_1, t4, 0.0), input_precision="ieee")
    t7 = tl.max(t6, axis=2, keep_dims=True)
    t8 = t6 - t7
    t9 = tl.exp(t8)
    t10 = tl.dot(t9, t5, input_precision="ieee")
    t11 = tl.sum(t9, axis=2, keep_dims=True)
    t12 = t10 / t11
    tl.store(o0 + (b0 * 1 + tl.arange(0, 1)[:, None, None]) * 128 + tl.arange(0, 16)[None, :, None] * 8 + tl.arange(0, 16)[None, None, :], t12, mask=m_0)
