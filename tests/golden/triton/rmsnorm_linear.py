# ==== node 'fused_normed' (fused): grid [2, 1, 1], 2 warps
@triton.jit
def yr_0_fused_normed(p0, p1, p2, o0):
    b0 = tl.program_id(0)
    m_0 = tl.arange(0, 32)[None, :] < 24
    t7 = tl.full([4, 1], 0.0, tl.float32)
    t8 = tl.full([4, 32], 0.0, tl.float32)
    a0 = p0 + tl.arange(0, 4)[:, None] * 64 + tl.arange(0, 32)[None, :]
    a1 = p1 + tl.arange(0, 32)
    a2 = p2 + tl.arange(0, 32)[:, None] * 48 + (b0 * 24 + tl.arange(0, 32)[None, :])
    k2 = m_0
    for it in range(2):
        t0 = tl.load(a0 + it * 32)
        t1 = tl.load(a1 + it * 32)
        t2 = tl.load(a2 + it * 1536, mask=k2, other=0.0)
        t3 = t0 * t0
        t4 = tl.sum(t3, axis=1, keep_dims=True) / 32.0
        t5 = t0 * t1
        t6 = tl.sum(tl.expand_dims(t5, 2) * tl.expand_dims(t2, 0), axis=1)
        t7 = t7 + t4
        t8 = t8 + t6
    t7 = tl.sqrt(t7 / 2.0 + 1e-06)
    t9 = t8 / t7
    tl.store(o0 + tl.arange(0, 4)[:, None] * 48 + (b0 * 24 + tl.arange(0, 32)[None, :]), t9, mask=m_0)
