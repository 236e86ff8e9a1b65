/*
 * step_tasks.cuh - the weight-streaming phases of the persistent decode
 * step (docs/step.md 3): each a set of tasks (rows, or groups of rows, of
 * its weights) that a warp's ring streams and the warp computes.
 *
 * A phase is a descriptor (Ph) in the block's shared memory, made by one
 * thread: its kind, how its tasks map onto the warps, its geometry.  Four
 * functions read it:
 *
 *   ph_task_of(j)   this warp's j-th task, -1 past its last;
 *   ph_nchunk(t)    the slot-sized chunks task t is streamed in;
 *   ph_task(t, c)   the bytes of chunk c (one or two segments);
 *   ph_compute(t, c, p0, p1, acc)  the products of chunk c, whose bytes
 *                   are at p0 (and p1); acc carries a lane's partial from
 *                   chunk to chunk of one task, returned.
 *
 * One ring loop serves every phase, and each kind's products are one
 * function out of line: the kernel's machine code is then small enough to
 * stay in the instruction cache from block to block (inlined per phase it
 * was ~800 KB, and a step spent most of its time fetching it).
 *
 * The weights' addresses depend on nothing computed in the step but the
 * routed experts', so every phase but the routed gate/up is issued ahead,
 * across the barrier before it.
 */
#ifndef X4_STEP_TASKS_CUH
#define X4_STEP_TASKS_CUH

#include "step_phases.cuh"

namespace x4s {

enum PhKind {
	PH_NONE = 0,   /* no tasks */
	PH_QA,         /* A1: q_a, then kv_a rows (BF16, chunks of a row) */
	PH_QB,         /* A2: q_b rows, several a task */
	PH_ABSORB,     /* A3: W_kb rows, a head's a task */
	PH_EXPAND,     /* A5: W_vb rows, a head's a task, contiguous runs a block */
	PH_OUT,        /* A6: W_o rows of the block's columns (chunks of a row) */
	PH_ROUTER,     /* F1: router rows (F32, chunks), then shared gate/up pairs */
	PH_ROUTED,     /* F2: the chosen experts' gate/up pairs */
	PH_DOWN,       /* F3: the downs at the block's columns, UNIT rows a task */
	PH_DENSE_UP,   /* D1: the dense FFN's gate/up pairs */
	PH_DENSE_DOWN, /* D3: the dense FFN's down rows of the block's columns */
	PH_HEAD,       /* the head's Q6_K rows */
};

/* A phase as the ring sees it; block-uniform, in shared memory. */
struct Ph {
	int kind;
	int range;      /* 0: tasks [0, n) interleaved over the grid's warps w0..;
			 * 1: tasks [lo, hi) over this block's warps w0.. */
	int n, w0, lo, hi;
	const x4k_step_layer *L;
	const uint16_t *fn;     /* the next gate's projection, copied with warp 0's first item */
	const uint8_t *w, *w2;  /* the weights (and a pair's second tensor) */
	int R, k, nch, rb, fmt; /* rows a task, values a row, chunks, bytes a row, format */
	int E, nm, ns, nb, bpc, hlo, N;
};

static_assert(sizeof(Ph) <= PH_BYTES, "a phase's descriptor in its shared memory");

/* ---------------- the maps ---------------- */

template <int NW> __device__ __forceinline__ int ph_task_of(const Blk &B, const Ph &ph, int j)
{
	const int w = warp_();
	if (ph.kind == PH_NONE || w < ph.w0)
		return -1;
	if (ph.range) {
		const int t = ph.lo + (w - ph.w0) + (NW - ph.w0) * j;
		return t < ph.hi ? t : -1;
	}
	const long long t = (long long)B.b + (long long)B.G * (w - ph.w0) + (long long)B.G * (NW - ph.w0) * j;
	return t < ph.n ? (int)t : -1;
}

/* A phase's position: the warp's j-th task t, chunk c of its nc. */
struct Cur {
	int j, t, c, nc;
};

static __device__ __noinline__ int ph_nchunk(const Blk &B, const Ph &ph, int t);

template <int NW> __device__ __forceinline__ Cur cur_start(const Blk &B, const Ph &ph)
{
	Cur u;
	u.j = 0;
	u.t = ph_task_of<NW>(B, ph, 0);
	u.c = 0;
	u.nc = u.t >= 0 ? ph_nchunk(B, ph, u.t) : 0;
	return u;
}

template <int NW> __device__ __forceinline__ void cur_next(const Blk &B, const Ph &ph, Cur &u)
{
	if (++u.c < u.nc)
		return;
	u.j++;
	u.t = ph_task_of<NW>(B, ph, u.j);
	u.c = 0;
	u.nc = u.t >= 0 ? ph_nchunk(B, ph, u.t) : 0;
}

/* ---------------- geometry shared by the phases ---------------- */

constexpr int KCH_BF16 = SLOTB / 2; /* values of a BF16 row a chunk */
constexpr int KCH_F32 = SLOTB / 4;

/* Rows a task of a BF16 matrix with rows of k values takes (rows
 * shorter than a slot: several at once, lanes in groups of g a row, the
 * count a multiple of 32 / g that divides `whole` (rows of one head) when
 * whole > 0); 1 when a row takes more than half a slot. */
static __host__ __device__ inline int bf16_rows_a_task(int k, int whole)
{
	if (2 * k > SLOTB / 2)
		return 1;
	const int g = pow2_div(k / 8), rp = 32 / g;
	int r = rp;
	while (2 * r * 2 * k <= SLOTB && (whole <= 0 || whole % (2 * r) == 0))
		r *= 2;
	return r;
}

/* A5's tasks: contiguous runs of them a block, so that its rows span few
 * heads (each needs its head's attention output, combined in xs). */
static __host__ __device__ inline void run_of(int T, int b, int G, int &lo, int &hi)
{
	lo = (int)((long long)T * b / G);
	hi = (int)((long long)T * (b + 1) / G);
}

/* Bytes of a row of k values of a block format. */
static __device__ __forceinline__ int fmt_row_bytes(int fmt, int k) { return k / 32 * (fmt == X4_T_Q8_0 ? 34 : 18); }

/* Chunks of a gate/up pair of rows of rb bytes: one when both fit a slot. */
static __device__ __forceinline__ int pair_chunks(const void *a, const void *b, int rb)
{
	const Seg sa = { static_cast<const uint8_t *>(a), rb }, sb = { static_cast<const uint8_t *>(b), rb };
	return seg_room(sa) + seg_room(sb) <= SLOTB ? 1 : 2;
}

static __device__ __forceinline__ Task pair_task(const uint8_t *a, const uint8_t *b, int rb, int c, int nch)
{
	if (nch == 1)
		return task2(a, b, rb);
	return task1(c == 0 ? a : b, rb);
}

/* ---------------- the descriptors, by one thread ---------------- */

static __device__ __forceinline__ void ph_clear(Ph &ph, int kind, const x4k_step_layer *L)
{
	memset(&ph, 0, sizeof ph);
	ph.kind = kind;
	ph.L = L;
}

static __device__ __forceinline__ void ph_grid(Ph &ph, int n, int w0)
{
	ph.range = 0;
	ph.n = n;
	ph.w0 = w0;
}

static __device__ __forceinline__ void ph_range(Ph &ph, int lo, int hi)
{
	ph.range = 1;
	ph.lo = lo;
	ph.hi = hi;
	ph.w0 = 0;
}

/* A BF16 matrix of N rows of k values, R rows a task. */
static __device__ __forceinline__ void ph_rows(Ph &ph, const uint16_t *w, int N, int k, int whole)
{
	ph.w = reinterpret_cast<const uint8_t *>(w);
	ph.N = N;
	ph.k = k;
	ph.R = bf16_rows_a_task(k, whole);
}

static __device__ __noinline__ void ph_none(Ph &ph) { ph_clear(ph, PH_NONE, nullptr); }

static __device__ __noinline__ void ph_qa(const Blk &B, Ph &ph, const x4k_step_layer *L)
{
	const x4k_step_params &p = *B.p;
	ph_clear(ph, PH_QA, L);
	ph_grid(ph, p.q_lora + p.kv_lora + p.d_rope, 1);
	ph.nch = (p.D + KCH_BF16 - 1) / KCH_BF16;
}

static __device__ __noinline__ void ph_qb(const Blk &B, Ph &ph, const x4k_step_layer *L)
{
	const x4k_step_params &p = *B.p;
	ph_clear(ph, PH_QB, L);
	ph_rows(ph, L->q_b, p.n_head * (p.d_nope + p.d_rope), p.q_lora, 0);
	ph_grid(ph, (ph.N + ph.R - 1) / ph.R, 0);
}

static __device__ __noinline__ void ph_absorb(const Blk &B, Ph &ph, const x4k_step_layer *L)
{
	const x4k_step_params &p = *B.p;
	ph_clear(ph, PH_ABSORB, L);
	ph_rows(ph, L->k_b, p.n_head * p.kv_lora, p.d_nope, p.kv_lora);
	ph_grid(ph, (ph.N + ph.R - 1) / ph.R, 0);
}

static __device__ __noinline__ void ph_expand(const Blk &B, Ph &ph, const x4k_step_layer *L)
{
	const x4k_step_params &p = *B.p;
	ph_clear(ph, PH_EXPAND, L);
	ph_rows(ph, L->v_b, p.n_head * p.d_v, p.kv_lora, p.d_v);
	int lo, hi;
	run_of((ph.N + ph.R - 1) / ph.R, B.b, B.G, lo, hi);
	ph_range(ph, lo, hi);
	ph.hlo = lo * ph.R / p.d_v;
}

static __device__ __noinline__ void ph_out(const Blk &B, Ph &ph, const x4k_step_layer *L)
{
	const x4k_step_params &p = *B.p;
	ph_clear(ph, PH_OUT, L);
	ph_range(ph, 0, B.ncol);
	ph.w = reinterpret_cast<const uint8_t *>(L->o);
	ph.k = p.n_head * p.d_v;
	ph.nch = (ph.k + KCH_BF16 - 1) / KCH_BF16;
	ph.fn = L->hc_fn[1];
}

static __device__ __noinline__ void ph_router(const Blk &B, Ph &ph, const x4k_step_layer *L)
{
	const x4k_step_params &p = *B.p;
	ph_clear(ph, PH_ROUTER, L);
	ph.E = p.n_expert;
	ph_grid(ph, p.n_expert + (L->gate_sh ? p.F_sh : 0), 1);
	ph.rb = fmt_row_bytes(X4_T_IQ4_NL, p.D);
	ph.nch = (p.D + KCH_F32 - 1) / KCH_F32;
	ph.w = static_cast<const uint8_t *>(L->gate_sh);
	ph.w2 = static_cast<const uint8_t *>(L->up_sh);
}

/* after the top k (B.ssel, B.snsel) */
static __device__ __noinline__ void ph_routed(const Blk &B, Ph &ph, const x4k_step_layer *L)
{
	const x4k_step_params &p = *B.p;
	ph_clear(ph, PH_ROUTED, L);
	ph_grid(ph, B.snsel[0] * p.F_e, 0);
	ph.fmt = p.exp_type;
	ph.rb = fmt_row_bytes(p.exp_type, p.D);
	ph.w = static_cast<const uint8_t *>(L->gate_exps);
	ph.w2 = static_cast<const uint8_t *>(L->up_exps);
}

/* after the top k; fn: the next block's attention gate (NULL before the head) */
static __device__ __noinline__ void ph_down(const Blk &B, Ph &ph, const x4k_step_layer *L, const uint16_t *fn)
{
	ph_clear(ph, PH_DOWN, L);
	ph.ns = B.snsel[0];
	ph.nm = ph.ns + (L->down_sh ? 1 : 0);
	ph_range(ph, 0, B.ncol / UNIT * ph.nm);
	ph.fn = fn;
}

static __device__ __noinline__ void ph_dense_up(const Blk &B, Ph &ph, const x4k_step_layer *L)
{
	const x4k_step_params &p = *B.p;
	ph_clear(ph, PH_DENSE_UP, L);
	ph_grid(ph, p.F_d, 1);
	ph.rb = fmt_row_bytes(X4_T_IQ4_NL, p.D);
	ph.w = static_cast<const uint8_t *>(L->gate);
	ph.w2 = static_cast<const uint8_t *>(L->up);
}

static __device__ __noinline__ void ph_dense_down(const Blk &B, Ph &ph, const x4k_step_layer *L, const uint16_t *fn)
{
	const x4k_step_params &p = *B.p;
	ph_clear(ph, PH_DENSE_DOWN, L);
	ph_range(ph, 0, B.ncol);
	ph.nb = p.F_d / 32;
	ph.bpc = (SLOTB - 16) / 18 / 32 * 32;
	ph.nch = (ph.nb + ph.bpc - 1) / ph.bpc;
	ph.rb = fmt_row_bytes(X4_T_IQ4_NL, p.F_d);
	ph.w = static_cast<const uint8_t *>(L->down);
	ph.fn = fn;
}

static __device__ __noinline__ void ph_head(const Blk &B, Ph &ph)
{
	const x4k_step_params &p = *B.p;
	ph_clear(ph, PH_HEAD, nullptr);
	ph_grid(ph, p.n_vocab, 0);
	ph.rb = p.D / 256 * 210;
	ph.w = static_cast<const uint8_t *>(p.output);
}

/* ---------------- chunks and bytes ---------------- */

/* The down matrix m of a PH_DOWN task: format, values a row, bytes a row,
 * rows a chunk. */
static __device__ __forceinline__ void down_geom(const Blk &B, const Ph &ph, int m, int &fmt, int &kf, int &rb, int &rpc)
{
	const x4k_step_params &p = *B.p;
	fmt = m < ph.ns ? p.exp_type : X4_T_IQ4_NL;
	kf = m < ph.ns ? p.F_e : p.F_sh;
	rb = fmt_row_bytes(fmt, kf);
	rpc = max(1, min(UNIT, (SLOTB - 16) / rb));
}

static __device__ __forceinline__ const uint8_t *down_rows(const Blk &B, const Ph &ph, int t, int rb)
{
	const int u = t / ph.nm, m = t % ph.nm;
	const size_t c0 = (size_t)UNIT * (B.b + B.G * u);
	if (m < ph.ns)
		return static_cast<const uint8_t *>(ph.L->down_exps) + ((size_t)B.ssel[m] * B.p->D + c0) * rb;
	return static_cast<const uint8_t *>(ph.L->down_sh) + c0 * rb;
}

static __device__ __forceinline__ size_t routed_off(const Blk &B, const Ph &ph, int t)
{
	const int F = B.p->F_e;
	return ((size_t)B.ssel[t / F] * F + t % F) * ph.rb;
}

static __device__ __noinline__ int ph_nchunk(const Blk &B, const Ph &ph, int t)
{
	switch (ph.kind) {
	case PH_QA:
	case PH_OUT:
	case PH_DENSE_DOWN:
		return ph.nch;
	case PH_ROUTER:
		if (t < ph.E)
			return ph.nch;
		return pair_chunks(ph.w + (size_t)(t - ph.E) * ph.rb, ph.w2 + (size_t)(t - ph.E) * ph.rb, ph.rb);
	case PH_ROUTED:
		return pair_chunks(ph.w + routed_off(B, ph, t), ph.w2 + routed_off(B, ph, t), ph.rb);
	case PH_DENSE_UP:
		return pair_chunks(ph.w + (size_t)t * ph.rb, ph.w2 + (size_t)t * ph.rb, ph.rb);
	case PH_DOWN: {
		int fmt, kf, rb, rpc;
		down_geom(B, ph, t % ph.nm, fmt, kf, rb, rpc);
		return (UNIT + rpc - 1) / rpc;
	}
	default:
		return 1;
	}
}

static __device__ __noinline__ Task ph_task(const Blk &B, const Ph &ph, int t, int c)
{
	const x4k_step_params &p = *B.p;
	switch (ph.kind) {
	case PH_QA: {
		const int D = p.D, ql = p.q_lora, k0 = c * KCH_BF16;
		const uint16_t *w = t < ql ? ph.L->q_a + (size_t)t * D : ph.L->kv_a + (size_t)(t - ql) * D;
		return task1(w + k0, 2 * min(KCH_BF16, D - k0));
	}
	case PH_QB:
	case PH_ABSORB:
	case PH_EXPAND:
		return task1(ph.w + (size_t)t * ph.R * ph.k * 2, 2 * ph.k * min(ph.R, ph.N - t * ph.R));
	case PH_OUT: {
		const int k0 = c * KCH_BF16;
		return task1(ph.w + ((size_t)B.col(t) * ph.k + k0) * 2, 2 * min(KCH_BF16, ph.k - k0));
	}
	case PH_ROUTER:
		if (t < ph.E) {
			const int k0 = c * KCH_F32;
			return task1(ph.L->router + (size_t)t * p.D + k0, 4 * min(KCH_F32, p.D - k0));
		}
		return pair_task(ph.w + (size_t)(t - ph.E) * ph.rb, ph.w2 + (size_t)(t - ph.E) * ph.rb, ph.rb, c,
				 ph_nchunk(B, ph, t));
	case PH_ROUTED:
		return pair_task(ph.w + routed_off(B, ph, t), ph.w2 + routed_off(B, ph, t), ph.rb, c,
				 ph_nchunk(B, ph, t));
	case PH_DENSE_UP:
		return pair_task(ph.w + (size_t)t * ph.rb, ph.w2 + (size_t)t * ph.rb, ph.rb, c, ph_nchunk(B, ph, t));
	case PH_DOWN: {
		int fmt, kf, rb, rpc;
		down_geom(B, ph, t % ph.nm, fmt, kf, rb, rpc);
		return task1(down_rows(B, ph, t, rb) + (size_t)c * rpc * rb, min(rpc, UNIT - c * rpc) * rb);
	}
	case PH_DENSE_DOWN:
		return task1(ph.w + (size_t)B.col(t) * ph.rb + (size_t)c * ph.bpc * 18,
			     min(ph.bpc, ph.nb - c * ph.bpc) * 18);
	case PH_HEAD:
		return task1(ph.w + (size_t)t * ph.rb, ph.rb);
	default:
		return task1(nullptr, 0);
	}
}

/* ---------------- the products, a kind a function ---------------- */

/* A chunk of one long BF16 row (values [k0, k0 + kc)) into acc; at the last
 * chunk the row's sum, on lane 0, to *out. */
static __device__ __noinline__ float rows_chunk_bf16(const uint8_t *w, int kc, const float *x, int c, int nch, float acc,
					      float *out)
{
	if (c == 0)
		acc = 0.f;
	acc += dot_bf16<false>(w, x, kc / 8, lane_(), 32);
	if (c + 1 == nch) {
		const float v = x4c::warp_sum(acc);
		if (lane_() == 0)
			*out = v;
	}
	return acc;
}

/* Rows [0, nr) of a BF16 matrix of k values a row at w (one segment), each
 * . x, into out[r * ostride]: lanes in groups of g = pow2_div(k / 8), a
 * pass a row a group. */
static __device__ __noinline__ void rows_bf16(const uint8_t *w, int nr, int k, const float *x, float *out)
{
	const int n8 = k / 8, g = pow2_div(n8), rp = 32 / g, lane = lane_();
	for (int r0 = 0; r0 < nr; r0 += rp) {
		const int r = r0 + lane / g;
		float a = r < nr ? dot_bf16<false>(w + (size_t)r * 2 * k, x, n8, lane % g, g) : 0.f;
		a = seg_sum(a, g);
		if (lane % g == 0 && r < nr)
			out[r] = a;
	}
}

/* A gate/up pair of a block format (rows of k values at p0, p1 in one
 * chunk, or one a chunk when two do not fit a slot): silu(g) * u, on lane
 * 0, to *out at the last chunk. */
static __device__ __noinline__ float pair_rows(int fmt, const uint8_t *p0, const uint8_t *p1, int k, const float *x,
					int c, int nch, float acc, float *out)
{
	const int nb = k / 32, lane = lane_();
	if (nch == 1) {
		const float4 a = dot_blocks<1, false>(fmt, p0, p1 - p0, 2, nb, x, lane, 16);
		const float s = seg_sum(a.x, 16);
		const float g = __shfl_sync(0xffffffffu, s, 0), u = __shfl_sync(0xffffffffu, s, 16);
		if (lane == 0)
			*out = x4d::silu(g) * u;
		return acc;
	}
	const float4 a = dot_blocks<1, false>(fmt, p0, 0, 1, nb, x, lane, 32);
	const float s = x4c::warp_sum(a.x);
	if (c == 0)
		return s; /* the gate's sum, on every lane */
	if (lane == 0)
		*out = x4d::silu(acc) * s;
	return acc;
}

static __device__ __noinline__ float comp_router(const Blk &B, const Ph &ph, int t, int c, const uint8_t *p0,
					  const uint8_t *p1, float acc)
{
	const int D = B.p->D;
	if (t >= ph.E)
		return pair_rows(X4_T_IQ4_NL, p0, p1, D, B.xs, c, ph_nchunk(B, ph, t), acc, B.p->h + (t - ph.E));
	const int k0 = c * KCH_F32;
	if (c == 0)
		acc = 0.f;
	acc += dot_f32(p0, B.xs + k0, min(KCH_F32, D - k0) / 4, lane_(), 32);
	if (c + 1 == ph.nch) {
		const float v = x4c::warp_sum(acc);
		if (lane_() == 0)
			B.lg[t] = v;
	}
	return acc;
}

static __device__ __noinline__ void comp_down(const Blk &B, const Ph &ph, int t, int c, const uint8_t *p0)
{
	int fmt, kf, rb, rpc;
	const int u = t / ph.nm, m = t % ph.nm;
	down_geom(B, ph, m, fmt, kf, rb, rpc);
	const int nr = min(rpc, UNIT - c * rpc);
	const float *x = B.xs + (size_t)(m < ph.ns ? m : ph.ns) * B.p->F_e;
	const float4 a = dot_blocks<UNIT, false>(fmt, p0, rb, nr, kf / 32, x, lane_(), 32);
	float *res = B.res + (size_t)m * B.colmax + UNIT * u + c * rpc;
	const float v0 = x4c::warp_sum(a.x), v1 = x4c::warp_sum(a.y), v2 = x4c::warp_sum(a.z),
		    v3 = x4c::warp_sum(a.w);
	if (lane_() == 0) {
		res[0] = v0;
		if (nr > 1)
			res[1] = v1;
		if (nr > 2)
			res[2] = v2;
		if (nr > 3)
			res[3] = v3;
	}
}

static __device__ __noinline__ float comp_dense_down(const Blk &B, const Ph &ph, int t, int c, const uint8_t *p0,
					      float acc)
{
	if (c == 0)
		acc = 0.f;
	const float4 a = dot_blocks<1, true>(X4_T_IQ4_NL, p0, 0, 1, min(ph.bpc, ph.nb - c * ph.bpc),
					     B.p->h + (size_t)32 * c * ph.bpc, lane_(), 32);
	acc += a.x;
	if (c + 1 == ph.nch) {
		const float v = x4c::warp_sum(acc);
		if (lane_() == 0)
			B.ys[t] = v;
	}
	return acc;
}

static __device__ __noinline__ void comp_head(const Blk &B, int t, const uint8_t *p0)
{
	const float v = x4c::warp_sum(dot_q6k(p0, B.p->D / 256, B.xs, lane_()));
	if (lane_() == 0)
		B.p->logits[t] = v;
}

static __device__ __forceinline__ float ph_compute(const Blk &B, const Ph &ph, int t, int c, const uint8_t *p0,
					    const uint8_t *p1, float acc)
{
	const x4k_step_params &p = *B.p;
	switch (ph.kind) {
	case PH_QA: {
		const int ql = p.q_lora, k0 = c * KCH_BF16;
		return rows_chunk_bf16(p0, min(KCH_BF16, p.D - k0), B.xs + k0, c, ph.nch, acc,
				       t < ql ? p.cq + t : p.kva + (t - ql));
	}
	case PH_QB:
		rows_bf16(p0, min(ph.R, ph.N - t * ph.R), ph.k, B.xs, p.q + (size_t)t * ph.R);
		return acc;
	case PH_ABSORB: {
		const int r0 = t * ph.R, h = r0 / p.kv_lora;
		rows_bf16(p0, min(ph.R, ph.N - r0), ph.k, B.xs + (size_t)h * (p.d_nope + p.d_rope),
			  p.qt + (size_t)h * (p.kv_lora + p.d_rope) + r0 % p.kv_lora);
		return acc;
	}
	case PH_EXPAND: {
		const int r0 = t * ph.R, h = r0 / p.d_v;
		rows_bf16(p0, min(ph.R, ph.N - r0), ph.k, B.xs + (size_t)(h - ph.hlo) * p.kv_lora, p.o + r0);
		return acc;
	}
	case PH_OUT: {
		const int k0 = c * KCH_BF16;
		return rows_chunk_bf16(p0, min(KCH_BF16, ph.k - k0), B.xs + k0, c, ph.nch, acc, B.ys + t);
	}
	case PH_ROUTER:
		return comp_router(B, ph, t, c, p0, p1, acc);
	case PH_ROUTED:
		return pair_rows(ph.fmt, p0, p1, p.D, B.xs, c, ph_nchunk(B, ph, t), acc, B.hx + t);
	case PH_DENSE_UP:
		return pair_rows(X4_T_IQ4_NL, p0, p1, p.D, B.xs, c, ph_nchunk(B, ph, t), acc, p.h + t);
	case PH_DOWN:
		comp_down(B, ph, t, c, p0);
		return acc;
	case PH_DENSE_DOWN:
		return comp_dense_down(B, ph, t, c, p0, acc);
	case PH_HEAD:
		comp_head(B, t, p0);
		return acc;
	default:
		return acc;
	}
}

/* ---------------- the ring ----------------
 * A warp's NSLOT slots of SLOTB bytes.  An item is one task's bytes for
 * one chunk; one commit group an item.  head counts the items issued,
 * tail those computed; item i sits in slot i % NSLOT.  The ring's state
 * travels by value (RingPos), so that nothing of it lives in local memory
 * across the calls, which are out of line: one copy of the loop for every
 * phase. */
struct RingPos {
	Cur ic, nic;    /* the issue positions of the phase and of the next */
	int head, tail;
};

template <int NSLOT> __device__ __forceinline__ uint8_t *ring_slot(const Blk &B, int i)
{
	return B.ring + ((size_t)warp_() * NSLOT + (size_t)(i % NSLOT)) * SLOTB;
}

/* Issue items of ph (from r.ic), then of nx (r.nic) once ph has none
 * left, until NSLOT are in flight or both have none; the next gate's
 * projection (Ph.fn) rides in the group of warp 0's first item of its
 * phase. */
template <int NW, int NSLOT>
static __device__ __noinline__ RingPos ring_fill_(const Blk &B, const Ph &ph, const Ph &nx, RingPos r)
{
	while (r.head - r.tail < NSLOT) {
		const Ph *q;
		Cur *u;
		if (r.ic.t >= 0) {
			q = &ph;
			u = &r.ic;
		} else if (r.nic.t >= 0) {
			q = &nx;
			u = &r.nic;
		} else {
			return r;
		}
		if (u->j == 0 && u->c == 0 && q->fn)
			fn_slice_copy(B, q->fn);
		task_copy(ring_slot<NSLOT>(B, r.head), ph_task(B, *q, u->t, u->c), lane_());
		cur_next<NW>(B, *q, *u);
		commit();
		r.head++;
	}
	return r;
}

template <int NW, int NSLOT>
static __device__ __forceinline__ RingPos ring_fill(const Blk &B, const Ph &ph, const Ph &nx, RingPos r)
{
	return ring_fill_<NW, NSLOT>(B, ph, nx, r);
}

/* Compute every item of ph in order (r.ic: ph's issue position, possibly
 * advanced already by the phase before it), keeping NSLOT items in
 * flight, nx's after ph's last; the result's nic is nx's position. */
template <int NW, int NSLOT>
static __device__ __noinline__ RingPos ring_run(const Blk &B, const Ph &ph, const Ph &nx, RingPos r)
{
	Cur cc = cur_start<NW>(B, ph);
	float acc = 0.f;
	while (cc.t >= 0) {
		r = ring_fill_<NW, NSLOT>(B, ph, nx, r);
		wait_pending(r.head - r.tail - 1);
		__syncwarp();
		const uint8_t *p[2];
		task_ptrs(ring_slot<NSLOT>(B, r.tail), ph_task(B, ph, cc.t, cc.c), p);
		acc = ph_compute(B, ph, cc.t, cc.c, p[0], p[1], acc);
		__syncwarp(); /* every lane is done with the slot before it is refilled */
		r.tail++;
		cur_next<NW>(B, ph, cc);
	}
	return ring_fill_<NW, NSLOT>(B, ph, nx, r); /* the next phase's first items, across the barrier */
}

} /* namespace x4s */

#endif
