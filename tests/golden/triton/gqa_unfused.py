# ==== node 'scores' (matmul): grid [2, 1, 1], 2 warps
@triton.jit
def yr_0_scores(p0, p1, o0):
    b0 = tl.program_id(0)
    m_0 = tl.arange(0, 16)[None, None, :] < 8
    m_1 = tl.arange(0, 16)[None, :, None] < 8
    t3 = tl.full([1, 16, 32], 0.0, tl.float32)
    a0 = p0 + (b0 * 1 + tl.arange(0, 1)[:, None, None]) * 128 + tl.arange(0, 16)[None, :, None] * 8 + tl.arange(0, 16)[None, None, :]
    k0 = m_0
    a1 = p1 + (b0 * 1 + tl.arange(0, 1)[:, None, None]) * 256 + tl.arange(0, 16)[None, :, None] * 32 + tl.arange(0, 32)[None, None, :]
    k1 = m_1
    for it in range(1):
        t0 = tl.load(a0, mask=k0, other=0.0)
        t1 = tl.load(a1, mask=k1, other=0.0)
        t2 = tl.dot(tl.where(m_0, t0, 0.0), tl.where(m_1, t1, 0.0), input_precision="ieee")
        t3 = t3 + t2
    tl.store(o0 + (b0 * 1 + tl.arange(0, 1)[:, None, None]) * 512 + tl.arange(0, 16)[None, :, None] * 32 + tl.arange(0, 32)[None, None, :], t3)
# ==== node 'exp_scores' (exp): grid [1, 1, 1], 2 warps
@triton.jit
def yr_1_exp_scores(p0, o0):
    t2 = tl.full([2, 16, 32], 0.0, tl.float32)
    a0 = p0 + tl.arange(0, 2)[:, None, None] * 512 + tl.arange(0, 16)[None, :, None] * 32 + tl.arange(0, 32)[None, None, :]
    for it in range(1):
        t0 = tl.load(a0)
        t1 = tl.exp(t0)
        t2 = t2 + t1
    tl.store(o0 + tl.arange(0, 2)[:, None, None] * 512 + tl.arange(0, 16)[None, :, None] * 32 + tl.arange(0, 32)[None, None, :], t2)
# ==== node 'row_sum' (sum): grid [2, 1, 1], 2 warps
@triton.jit
def yr_2_row_sum(p0, o0):
    b0 = tl.program_id(0)
    t2 = tl.full([1, 16, 1], 0.0, tl.float32)
    a0 = p0 + (b0 * 1 + tl.arange(0, 1)[:, None, None]) * 512 + tl.arange(0, 16)[None, :, None] * 32 + tl.arange(0, 32)[None, None, :]
    for it in range(1):
        t0 = tl.load(a0)
        t1 = tl.sum(t0, axis=2, keep_dims=True)
        t2 = t2 + t1
    tl.store(o0 + (b0 * 1 + tl.arange(0, 1)[:, None, None]) * 16 + tl.arange(0, 16)[None, :, None] + tl.arange(0, 1)[None, None, :], t2)
# ==== node 'probs' (div): grid [1, 1, 1], 2 warps
@triton.jit
def yr_3_probs(p0, p1, o0):
    t3 = tl.full([2, 16, 32], 0.0, tl.float32)
    a0 = p0 + tl.arange(0, 2)[:, None, None] * 512 + tl.arange(0, 16)[None, :, None] * 32 + tl.arange(0, 32)[None, None, :]
    a1 = p1 + tl.arange(0, 2)[:, None, None] * 16 + tl.arange(0, 16)[None, :, None] + tl.arange(0, 1)[None, None, :]
    for it in range(1):
        t0 = tl.load(a0)
        t1 = tl.load(a1)
        t2 = t0 / t1
        t3 = t3 + t2
    tl.store(o0 + tl.arange(0, 2)[:, None, None] * 512 + tl.arange(0, 16)[None, :, None] * 32 + tl.arange(0, 32)[None, None, :], t3)
# ==== node 'out' (matmul): grid [2, 1, 1], 2 warps
@triton.jit
def yr_4_out(p0, p1, o0):
    b0 = tl.program_id(0)
    m_0 = tl.arange(0, 16)[None, None, :] < 8
    t3 = tl.full([1, 16, 16], 0.0, tl.float32)
    a0 = p0 + (b0 * 1 + tl.arange(0, 1)[:, None, None]) * 512 + tl.arange(0, 16)[None, :, None] * 32 + tl.arange(0, 32)[None, None, :]
    a1 = p1 + (b0 * 1 + tl.arange(0, 1)[:, None, None]) * 256 + tl.arange(0, 32)[None, :, None] * 8 + tl.arange(0, 16)[None, None, :]
    k1 = m_0
    for it in range(1):
        t0 = tl.load(a0)
        t1 = tl.load(a1, mask=k1, other=0.0)
        t2 = tl.dot(t0, t1, input_precision="ieee")
        t3 = t3 + t2
    tl.store(o0 + (b0 * 1 + tl.arange(0, 1)[:, None, None]) * 128 + tl.arange(0, 16)[None, :, None] * 8 + tl.arange(0, 16)[None, None, :], t3, mask=m_0)
