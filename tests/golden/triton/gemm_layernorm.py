# ==== node 'fused_proj' (fused): grid [2, 1, 1], 2 warps
@triton.jit
def yr_0_fused_proj(p0, p1, o0):
    b0 = tl.program_id(0)
    m_0 = tl.arange(0, 16)[:, None] < 8
    t3 = tl.full([16, 32], 0.0, tl.float32)
    a0 = p0 + (b0 * 8 + tl.arange(0, 16)[:, None]) * 32 + tl.arange(0, 16)[None, :]
    k0 = m_0
    a1 = p1 + tl.arange(0, 16)[:, None] * 32 + tl.arange(0, 32)[None, :]
    for it in range(2):
        t0 = tl.load(a0 + it * 16, mask=k0, other=0.0)
        t1 = tl.load(a1 + it * 512)
        t2 = tl.dot(t0, t1, input_precision="ieee")
        t3 = t3 + t2
    c4 = t3 - tl.sum(t3, axis=1, keep_dims=True) / 32.0
    t4 = c4 / tl.sqrt(tl.sum(c4 * c4, axis=1, keep_dims=True) / 32.0 + 1e-05)
    tl.store(o0 + (b0 * 8 + tl.arange(0, 16)[:, None]) * 32 + tl.arange(0, 32)[None, :], t4, mask=m_0)
