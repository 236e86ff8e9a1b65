/*
 * step_tasks.cuh - the weight-streaming phases of the persistent decode
 * step (docs/step.md 3): each a set of tasks (rows, or groups of rows, of
 * its weights) that the ring (step_dev.cuh) streams and a warp computes.
 * A phase is a struct with
 *
 *   task_of(j)   this warp's j-th task, -1 past its last;
 *   nchunk(t)    the slot-sized chunks task t is streamed in;
 *   task(t, c)   the bytes of chunk c (one or two segments);
 *   first()      called as the warp issues its first item (the column
 *                phases' next-gate projection rides with it);
 *   compute(t, c, p, acc)  the products of chunk c, whose bytes are at
 *                p[0] (and p[1]); acc carries a lane's partial from chunk
 *                to chunk of one task.
 *
 * The weights' addresses depend on nothing computed in the step but the
 * routed experts', so every phase but the routed gate/up (PhRouted) is
 * issued ahead, across the barrier before it.
 */
#ifndef X4_STEP_TASKS_CUH
#define X4_STEP_TASKS_CUH

#include "step_phases.cuh"

namespace x4s {

/* A1: the rows of q_a, then of kv_a (docs/forward.md 6.1), against x-hat;
 * warps 1.. (warp 0 runs the gate's Sinkhorn). */
template <int NW> struct PhQA {
	const Blk<NW> *B;
	const x4k_step_layer *L;
	MapGrid<NW> map;
	int nch;
	__device__ PhQA(const Blk<NW> &b, const x4k_step_layer *l)
		: B(&b), L(l), map(b, b.p->q_lora + b.p->kv_lora + b.p->d_rope, 1),
		  nch((b.p->D + KCH_BF16 - 1) / KCH_BF16)
	{
	}
	__device__ int task_of(int j) const { return map(j); }
	__device__ int nchunk(int) const { return nch; }
	__device__ void first() const {}
	__device__ Task task(int t, int c) const
	{
		const int D = B->p->D, ql = B->p->q_lora, k0 = c * KCH_BF16;
		const uint16_t *w = t < ql ? L->q_a + (size_t)t * D : L->kv_a + (size_t)(t - ql) * D;
		return task1(w + k0, 2 * min(KCH_BF16, D - k0));
	}
	__device__ void compute(int t, int c, const uint8_t *const (&p)[2], float &acc) const
	{
		const int D = B->p->D, ql = B->p->q_lora, k0 = c * KCH_BF16;
		float v;
		if (bf16_chunk(p[0], min(KCH_BF16, D - k0), B->xs + k0, lane_(), c, nch, acc, v) && lane_() == 0)
			*(t < ql ? B->p->cq + t : B->p->kva + (t - ql)) = v;
	}
};

/* Rows of a BF16 matrix several a task (A2's q_b, A3's absorb, A5's value
 * expansion): R rows of k values a task, rows of one head in a task where
 * `whole` (a head's rows) is given; out(row, value). */
template <int NW> struct RowsBF16 {
	const uint16_t *w;
	int N, k, R;
	__device__ void init(const uint16_t *w_, int N_, int k_, int whole)
	{
		w = w_;
		N = N_;
		k = k_;
		R = bf16_rows_a_task(k, whole);
	}
	__device__ int ntask() const { return (N + R - 1) / R; }
	__device__ int rows(int t) const { return min(R, N - t * R); }
	__device__ Task task(int t) const { return task1(w + (size_t)t * R * k, 2 * k * rows(t)); }
};

/* A2: q = W_qb c_q (docs/forward.md 6.1), against the normed c_q in xs. */
template <int NW> struct PhQB {
	const Blk<NW> *B;
	RowsBF16<NW> m;
	MapGrid<NW> map;
	__device__ PhQB(const Blk<NW> &b, const x4k_step_layer *l) : B(&b), map(b, 0, 0)
	{
		m.init(l->q_b, b.p->n_head * (b.p->d_nope + b.p->d_rope), b.p->q_lora, 0);
		map = MapGrid<NW>(b, m.ntask(), 0);
	}
	__device__ int task_of(int j) const { return map(j); }
	__device__ int nchunk(int) const { return 1; }
	__device__ void first() const {}
	__device__ Task task(int t, int) const { return m.task(t); }
	__device__ void compute(int t, int, const uint8_t *const (&p)[2], float &) const
	{
		float *q = B->p->q + (size_t)t * m.R;
		bf16_rows(p[0], m.rows(t), m.k, B->xs, lane_(), [&](int r, float v) { q[r] = v; });
	}
};

/* A3: q-tilde[h][c] = W_kb[h][c] . q_n[h] (docs/forward.md 6.4, absorbed),
 * q (all heads) in xs. */
template <int NW> struct PhAbsorb {
	const Blk<NW> *B;
	RowsBF16<NW> m;
	MapGrid<NW> map;
	__device__ PhAbsorb(const Blk<NW> &b, const x4k_step_layer *l) : B(&b), map(b, 0, 0)
	{
		m.init(l->k_b, b.p->n_head * b.p->kv_lora, b.p->d_nope, b.p->kv_lora);
		map = MapGrid<NW>(b, m.ntask(), 0);
	}
	__device__ int task_of(int j) const { return map(j); }
	__device__ int nchunk(int) const { return 1; }
	__device__ void first() const {}
	__device__ Task task(int t, int) const { return m.task(t); }
	__device__ void compute(int t, int, const uint8_t *const (&p)[2], float &) const
	{
		const x4k_step_params &P = *B->p;
		const int r0 = t * m.R, h = r0 / P.kv_lora, c0 = r0 % P.kv_lora, cw = P.kv_lora + P.d_rope;
		float *qt = P.qt + (size_t)h * cw + c0;
		bf16_rows(p[0], m.rows(t), m.k, B->xs + (size_t)h * (P.d_nope + P.d_rope), lane_(),
			  [&](int r, float v) { qt[r] = v; });
	}
};

/* A5's tasks: contiguous runs of them a block, so that its rows span few
 * heads (each needs its head's attention output, combined in xs). */
__host__ __device__ inline void run_of(int T, int b, int G, int &lo, int &hi)
{
	lo = (int)((long long)T * b / G);
	hi = (int)((long long)T * (b + 1) / G);
}

/* A5: o[h] = W_vb[h] . o-bar[h] (docs/forward.md 6.4), o-bar of heads
 * hlo.. in xs (kv_lora a head). */
template <int NW> struct PhExpand {
	const Blk<NW> *B;
	RowsBF16<NW> m;
	MapRange map;
	int hlo;
	__device__ PhExpand(const Blk<NW> &b, const x4k_step_layer *l) : B(&b), map(0, 0, 0, 1)
	{
		m.init(l->v_b, b.p->n_head * b.p->d_v, b.p->kv_lora, b.p->d_v);
		int lo, hi;
		run_of(m.ntask(), b.b, b.G, lo, hi);
		map = MapRange(lo, hi, warp_(), NW);
		hlo = lo * m.R / b.p->d_v;
	}
	__device__ int task_of(int j) const { return map(j); }
	__device__ int nchunk(int) const { return 1; }
	__device__ void first() const {}
	__device__ Task task(int t, int) const { return m.task(t); }
	__device__ void compute(int t, int, const uint8_t *const (&p)[2], float &) const
	{
		const x4k_step_params &P = *B->p;
		const int r0 = t * m.R, h = r0 / P.d_v;
		float *o = P.o + r0;
		bf16_rows(p[0], m.rows(t), m.k, B->xs + (size_t)(h - hlo) * P.kv_lora, lane_(),
			  [&](int r, float v) { o[r] = v; });
	}
};

/* A6: y = W_o o at this block's columns (its own rows of W_o), into ys;
 * the FFN gate's projection at those columns rides with warp 0's first. */
template <int NW> struct PhOut {
	const Blk<NW> *B;
	const x4k_step_layer *L;
	MapRange map;
	int k, nch;
	__device__ PhOut(const Blk<NW> &b, const x4k_step_layer *l)
		: B(&b), L(l), map(0, b.ncol, warp_(), NW), k(b.p->n_head * b.p->d_v),
		  nch((b.p->n_head * b.p->d_v + KCH_BF16 - 1) / KCH_BF16)
	{
	}
	__device__ int task_of(int j) const { return map(j); }
	__device__ int nchunk(int) const { return nch; }
	__device__ void first() const { fn_slice_copy(*B, L->hc_fn[1]); }
	__device__ Task task(int li, int c) const
	{
		const int k0 = c * KCH_BF16;
		return task1(L->o + (size_t)B->col(li) * k + k0, 2 * min(KCH_BF16, k - k0));
	}
	__device__ void compute(int li, int c, const uint8_t *const (&p)[2], float &acc) const
	{
		const int k0 = c * KCH_BF16;
		float v;
		if (bf16_chunk(p[0], min(KCH_BF16, k - k0), B->xs + k0, lane_(), c, nch, acc, v) && lane_() == 0)
			B->ys[li] = v;
	}
};

/* F1 of an MoE block: the router's logits (F32 rows, docs/forward.md 7.2)
 * and the shared expert's gate/up pairs with their SwiGLU product, against
 * x-hat; warps 1.. */
template <int NW> struct PhRouter {
	const Blk<NW> *B;
	const x4k_step_layer *L;
	MapGrid<NW> map;
	int E, rb, nch_r;
	__device__ PhRouter(const Blk<NW> &b, const x4k_step_layer *l)
		: B(&b), L(l), map(b, b.p->n_expert + (l->gate_sh ? b.p->F_sh : 0), 1), E(b.p->n_expert),
		  rb(fmt_row_bytes(X4_T_IQ4_NL, b.p->D)), nch_r((b.p->D + KCH_F32 - 1) / KCH_F32)
	{
	}
	__device__ int task_of(int j) const { return map(j); }
	__device__ int nchunk(int t) const
	{
		if (t < E)
			return nch_r;
		const size_t o = (size_t)(t - E) * rb;
		return pair_chunks(static_cast<const uint8_t *>(L->gate_sh) + o,
				   static_cast<const uint8_t *>(L->up_sh) + o, rb);
	}
	__device__ void first() const {}
	__device__ Task task(int t, int c) const
	{
		const int D = B->p->D;
		if (t < E) {
			const int k0 = c * KCH_F32;
			return task1(L->router + (size_t)t * D + k0, 4 * min(KCH_F32, D - k0));
		}
		const size_t o = (size_t)(t - E) * rb;
		return pair_task(static_cast<const uint8_t *>(L->gate_sh) + o,
				 static_cast<const uint8_t *>(L->up_sh) + o, rb, c, nchunk(t));
	}
	__device__ void compute(int t, int c, const uint8_t *const (&p)[2], float &acc) const
	{
		const int D = B->p->D;
		if (t < E) {
			const int k0 = c * KCH_F32;
			if (c == 0)
				acc = 0.f;
			acc += dot_f32(p[0], B->xs + k0, min(KCH_F32, D - k0) / 4, lane_(), 32);
			if (c + 1 == nch_r) {
				const float v = x4c::warp_sum(acc);
				if (lane_() == 0)
					B->lg[t] = v;
			}
			return;
		}
		float h;
		if (pair_rows(X4_T_IQ4_NL, p, D, B->xs, lane_(), c, nchunk(t), acc, h) && lane_() == 0)
			B->p->h[t - E] = h;
	}
};

/* F2: the routed experts' gate/up pairs (docs/forward.md 7.3) for the
 * chosen experts in ascending id (ssel), into hx[slot][row]. */
template <int NW> struct PhRouted {
	const Blk<NW> *B;
	const x4k_step_layer *L;
	MapGrid<NW> map;
	int F, rb, fmt;
	__device__ PhRouted(const Blk<NW> &b, const x4k_step_layer *l)
		: B(&b), L(l), map(b, b.snsel[0] * b.p->F_e, 0), F(b.p->F_e),
		  rb(fmt_row_bytes(b.p->exp_type, b.p->D)), fmt(b.p->exp_type)
	{
	}
	__device__ size_t off(int t) const { return ((size_t)B->ssel[t / F] * F + t % F) * rb; }
	__device__ int task_of(int j) const { return map(j); }
	__device__ int nchunk(int t) const
	{
		return pair_chunks(static_cast<const uint8_t *>(L->gate_exps) + off(t),
				   static_cast<const uint8_t *>(L->up_exps) + off(t), rb);
	}
	__device__ void first() const {}
	__device__ Task task(int t, int c) const
	{
		return pair_task(static_cast<const uint8_t *>(L->gate_exps) + off(t),
				 static_cast<const uint8_t *>(L->up_exps) + off(t), rb, c, nchunk(t));
	}
	__device__ void compute(int t, int c, const uint8_t *const (&p)[2], float &acc) const
	{
		float h;
		if (pair_rows(fmt, p, B->p->D, B->xs, lane_(), c, nchunk(t), acc, h) && lane_() == 0)
			B->hx[t] = h;
	}
};

/* F3: at this block's columns, each chosen expert's down (in ascending id)
 * and the shared expert's, UNIT rows a unit, into res[matrix][column]:
 * x is [hx | the shared product] in xs.  The next gate's projection rides
 * with warp 0's first item (fn: the next block's attention gate; NULL
 * before the head). */
template <int NW> struct PhDown {
	const Blk<NW> *B;
	const x4k_step_layer *L;
	const uint16_t *fn;
	MapRange map;
	int nm, ns;
	__device__ PhDown(const Blk<NW> &b, const x4k_step_layer *l, const uint16_t *fn_)
		: B(&b), L(l), fn(fn_), map(0, 0, 0, 1), nm(b.snsel[0] + (l->down_sh ? 1 : 0)), ns(b.snsel[0])
	{
		map = MapRange(0, b.ncol / UNIT * nm, warp_(), NW);
	}
	__device__ int fmt(int m) const { return m < ns ? B->p->exp_type : X4_T_IQ4_NL; }
	__device__ int kf(int m) const { return m < ns ? B->p->F_e : B->p->F_sh; }
	__device__ int rpc(int m) const { return max(1, min(UNIT, (SLOTB - 16) / fmt_row_bytes(fmt(m), kf(m)))); }
	__device__ const uint8_t *rows(int t) const
	{
		const int u = t / nm, m = t % nm, rb = fmt_row_bytes(fmt(m), kf(m));
		const size_t c0 = (size_t)UNIT * (B->b + B->G * u);
		if (m < ns)
			return static_cast<const uint8_t *>(L->down_exps) + ((size_t)B->ssel[m] * B->p->D + c0) * rb;
		return static_cast<const uint8_t *>(L->down_sh) + c0 * rb;
	}
	__device__ int task_of(int j) const { return map(j); }
	__device__ int nchunk(int t) const { const int r = rpc(t % nm); return (UNIT + r - 1) / r; }
	__device__ void first() const { fn_slice_copy(*B, fn); }
	__device__ Task task(int t, int c) const
	{
		const int m = t % nm, r = rpc(m), rb = fmt_row_bytes(fmt(m), kf(m));
		return task1(rows(t) + (size_t)c * r * rb, min(r, UNIT - c * r) * rb);
	}
	__device__ void compute(int t, int c, const uint8_t *const (&p)[2], float &) const
	{
		const int u = t / nm, m = t % nm, r = rpc(m), rb = fmt_row_bytes(fmt(m), kf(m));
		const int nr = min(r, UNIT - c * r);
		float a[UNIT];
		const float *x = B->xs + (size_t)(m < ns ? m : ns) * B->p->F_e;
		dot_blocks<UNIT, false>(fmt(m), p[0], rb, nr, kf(m) / 32, x, lane_(), 32, a);
#pragma unroll
		for (int i = 0; i < UNIT; i++) {
			const float v = x4c::warp_sum(a[i]);
			if (lane_() == 0 && i < nr)
				B->res[(size_t)m * B->colmax + UNIT * u + c * r + i] = v;
		}
	}
};

/* D1: the dense FFN's gate/up pairs and their product into h; warps 1.. */
template <int NW> struct PhDenseUp {
	const Blk<NW> *B;
	const x4k_step_layer *L;
	MapGrid<NW> map;
	int rb;
	__device__ PhDenseUp(const Blk<NW> &b, const x4k_step_layer *l)
		: B(&b), L(l), map(b, b.p->F_d, 1), rb(fmt_row_bytes(X4_T_IQ4_NL, b.p->D))
	{
	}
	__device__ int task_of(int j) const { return map(j); }
	__device__ int nchunk(int t) const
	{
		return pair_chunks(static_cast<const uint8_t *>(L->gate) + (size_t)t * rb,
				   static_cast<const uint8_t *>(L->up) + (size_t)t * rb, rb);
	}
	__device__ void first() const {}
	__device__ Task task(int t, int c) const
	{
		return pair_task(static_cast<const uint8_t *>(L->gate) + (size_t)t * rb,
				 static_cast<const uint8_t *>(L->up) + (size_t)t * rb, rb, c, nchunk(t));
	}
	__device__ void compute(int t, int c, const uint8_t *const (&p)[2], float &acc) const
	{
		float h;
		if (pair_rows(X4_T_IQ4_NL, p, B->p->D, B->xs, lane_(), c, nchunk(t), acc, h) && lane_() == 0)
			B->p->h[t] = h;
	}
};

/* D3: the dense FFN's down at this block's columns, into ys (h read from
 * L2: F_d may exceed xs), in chunks of whole 32-block runs. */
template <int NW> struct PhDenseDown {
	const Blk<NW> *B;
	const x4k_step_layer *L;
	const uint16_t *fn;
	MapRange map;
	int nb, bpc, nch, rb;
	__device__ PhDenseDown(const Blk<NW> &b, const x4k_step_layer *l, const uint16_t *fn_)
		: B(&b), L(l), fn(fn_), map(0, b.ncol, warp_(), NW), nb(b.p->F_d / 32),
		  bpc((SLOTB - 16) / 18 / 32 * 32), nch((b.p->F_d / 32 + bpc - 1) / bpc),
		  rb(fmt_row_bytes(X4_T_IQ4_NL, b.p->F_d))
	{
	}
	__device__ int task_of(int j) const { return map(j); }
	__device__ int nchunk(int) const { return nch; }
	__device__ void first() const { fn_slice_copy(*B, fn); }
	__device__ Task task(int li, int c) const
	{
		const uint8_t *w = static_cast<const uint8_t *>(L->down) + (size_t)B->col(li) * rb;
		return task1(w + (size_t)c * bpc * 18, min(bpc, nb - c * bpc) * 18);
	}
	__device__ void compute(int li, int c, const uint8_t *const (&p)[2], float &acc) const
	{
		if (c == 0)
			acc = 0.f;
		float a[1];
		dot_blocks<1, true>(X4_T_IQ4_NL, p[0], 0, 1, min(bpc, nb - c * bpc), B->p->h + (size_t)32 * c * bpc,
				    lane_(), 32, a);
		acc += a[0];
		if (c + 1 == nch) {
			const float v = x4c::warp_sum(acc);
			if (lane_() == 0)
				B->ys[li] = v;
		}
	}
};

/* The head: logits = W_out . h-hat (Q6_K rows, docs/forward.md 8), h-hat in xs. */
template <int NW> struct PhHead {
	const Blk<NW> *B;
	MapGrid<NW> map;
	int rb;
	__device__ PhHead(const Blk<NW> &b) : B(&b), map(b, b.p->n_vocab, 0), rb(b.p->D / 256 * 210) {}
	__device__ int task_of(int j) const { return map(j); }
	__device__ int nchunk(int) const { return 1; }
	__device__ void first() const {}
	__device__ Task task(int t, int) const
	{
		return task1(static_cast<const uint8_t *>(B->p->output) + (size_t)t * rb, rb);
	}
	__device__ void compute(int t, int, const uint8_t *const (&p)[2], float &) const
	{
		const float v = x4c::warp_sum(dot_q6k(p[0], B->p->D / 256, B->xs, lane_()));
		if (lane_() == 0)
			B->p->logits[t] = v;
	}
};

} /* namespace x4s */

#endif
