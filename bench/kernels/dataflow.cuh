/*
 * dataflow.cuh - the step-structure probe's device code and plan, shared by
 * the lab program (bench/kernels/dataflow.cu, which says what it measures)
 * and the CPU emulator's driver (bench/emu/emu_dataflow.cc, built with
 * X4_EMU: the same kernels' text on fibers, a block's threads and several
 * blocks at once).
 *
 * A plan is the decode step as a chain of stages, from a config's tensor
 * list (x4_layout): each stage a product of its rows with the stage
 * before's output, cut into units of at most 64 rows and one page.  Its
 * products are a probe's: plain dot products of the rows' bytes read as
 * BF16 pairs with the input, y = tanh(scale * sum), the step's first stage
 * adding the step's number.  In an iq4 plan the IQ4_NL tensors' stages read
 * each byte as two 4-bit codes through the IQ4_NL codebook (quant_dev.cuh's
 * CUDA-core decode: two values a byte, no block scales), so that their
 * units cost what decoding those bytes on the CUDA cores costs.
 */
#ifndef X4_DATAFLOW_CUH
#define X4_DATAFLOW_CUH

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <cmath>
#include <vector>

#include "x4.h"
#include "pdl.cuh"
#include "quant_dev.cuh"

namespace x4df {

constexpr int PAGE = 32768; /* a unit's bytes at most */
constexpr int NPAGE = 5;    /* the dataflow ring's pages at most */
constexpr int XMAX = 8192;  /* input values staged a unit */
constexpr int CW = 8;       /* a kernels-form block's warps; a unit's row splits (the sums' order) */
constexpr int UROWS = 64;   /* rows a unit at most */
constexpr unsigned long long SPIN_NS = 2000000000ull; /* a dependency wait that gives up */
/* how the warp form waits for other blocks' counts: polling at once,
 * polling with a pause, or (a timing-only probe whose outputs are wrong)
 * not at all */
enum { DF_POLL, DF_NAP, DF_NODEP };

struct stage {
	const uint8_t *w; /* rows x rb bytes */
	const float *x;   /* the input: the stage before's y */
	float *y;         /* [max(rows, XMAX)] */
	int rows, rb;     /* rb: a multiple of 16, at most PAGE */
	int nx;           /* input values read: a power of two, 8..XMAX */
	int upr;          /* rows a unit */
	int units;
	int dep;          /* the stage whose units it waits for */
	int late;         /* the stage its later units' weights wait for (the router), else -1 */
	int late_from;    /* the first unit that waits for it */
	int first;        /* the step's first stage: waits for the previous step's last */
	int trig_late;    /* (kernels) trigger after the wait: the next stage's weights wait
			   * for a stage before this one, which its start then implies */
	int codes;        /* the bytes are 4-bit IQ4_NL codes, two values a byte (the iq4
			   * plan's IQ4_NL stages), else BF16 pairs */
	int work_ns;      /* a unit's serial work past its product (a plan's work=NS on the
			   * step's small stages: the gates, the norms, the combine, the
			   * router's top k, the head's gate, the argmax) */
	float scale;
};

/* ---- the primitives: PTX on sm_90; with X4_EMU, the CPU emulator's
 * (bench/emu/emu_dataflow.cc: fibers, the waits yield) ---- */
#if defined(X4_EMU)
#define X4_DF 1
uint8_t *emu_df_smem();
void emu_df_mbar_init(uint64_t *b, unsigned count);
bool emu_df_mbar_try(uint64_t *b, unsigned parity);
void emu_df_mbar_arrive(uint64_t *b);
void emu_df_bulk(void *dst, const void *src, unsigned bytes, uint64_t *b);
unsigned emu_df_ld_acquire(const unsigned *p);
/* no wait gives up there: the emulator finds a deadlock itself */
inline unsigned long long gtime() { return 0; }
inline void work_for(unsigned long long, int) {} /* a cost, not a result: none here */
inline uint8_t *dyn_smem() { return emu_df_smem(); }
inline void mbar_init(uint64_t *b, unsigned count) { emu_df_mbar_init(b, count); }
inline bool mbar_try(uint64_t *b, unsigned parity) { return emu_df_mbar_try(b, parity); }
inline void mbar_arrive(uint64_t *b) { emu_df_mbar_arrive(b); }
inline void bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *b) { emu_df_bulk(dst, src, bytes, b); }
inline unsigned ld_acquire(const unsigned *p) { return emu_df_ld_acquire(p); }
inline void nap() {}
inline void fence_init() {}
template <int NW> inline void bar_compute() { emu_bar_named(1, 32 * NW); }
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define X4_DF 1
__device__ __forceinline__ unsigned long long gtime()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* spin until ns have passed since t0 (a unit's serial work) */
__device__ __forceinline__ void work_for(unsigned long long t0, int ns)
{
	while (gtime() - t0 < (unsigned long long)ns) {
	}
}

__device__ __forceinline__ uint8_t *dyn_smem()
{
	extern __shared__ __align__(128) uint8_t df_smem[];
	return df_smem;
}

__device__ __forceinline__ uint32_t sa(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(b)), "r"(count) : "memory");
}

/* the barriers' initialisation made visible to the bulk copies */
__device__ __forceinline__ void fence_init()
{
	asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* has the phase of b with this parity completed? */
__device__ __forceinline__ bool mbar_try(uint64_t *b, unsigned parity)
{
	uint32_t ok;
	asm volatile("{\n\t.reg .pred p;\n\t"
		     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
		     "selp.u32 %0, 1, 0, p;\n\t}"
		     : "=r"(ok)
		     : "r"(sa(b)), "r"(parity)
		     : "memory");
	return ok != 0;
}

__device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sa(b)) : "memory");
}

/* bytes from global src to shared dst, completing on b's transaction count
 * (b's one arrival with them) */
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *b)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(b)), "r"(bytes)
		     : "memory");
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
			     sa(dst)),
		     "l"(src), "r"(bytes), "r"(sa(b))
		     : "memory");
}

/* a pause between a spin's polls */
__device__ __forceinline__ void nap() { __nanosleep(64); }

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
	unsigned v;
	asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

/* the NW compute warps' barrier (the dataflow block's loader warp is not in it) */
template <int NW> __device__ __forceinline__ void bar_compute()
{
	asm volatile("bar.sync 1, %0;" ::"n"(32 * NW) : "memory");
}
#endif

#ifdef X4_DF
/* wait for the phase of b with this parity to complete; past SPIN_NS (or
 * once another wait has given up) set *err and go on, so that a wrong plan
 * ends in a message instead of a hang */
__device__ void mbar_wait(uint64_t *b, unsigned parity, int *err)
{
	unsigned long long t0 = 0;
	for (unsigned i = 0; !mbar_try(b, parity); i++) {
		if (i == 0)
			t0 = gtime();
		else if ((i & 63) == 0 && (*(volatile int *)err || gtime() - t0 > SPIN_NS)) {
			atomicExch(err, 1);
			return;
		}
	}
}

/* wait until *p >= target, with the same way out; nap: a pause between polls */
__device__ void spin_ge(const unsigned *p, unsigned target, int *err, bool pause = false)
{
	const unsigned long long t0 = gtime();
	for (unsigned i = 0; ld_acquire(p) < target; i++) {
		if (pause)
			nap();
		if ((i & 255) == 255) {
			if (*(volatile int *)err)
				return;
			if (gtime() - t0 > SPIN_NS) {
				atomicExch(err, 1);
				return;
			}
		}
	}
}

__device__ __forceinline__ float warp_sum(float s)
{
#pragma unroll
	for (int o = 16; o; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	return s;
}

/* a lane's sum over the 16-byte chunks c0, c0 + 32, ... below c1 of a row:
 * CODES, byte b holds the codes of values 2b (low nibble) and 2b + 1; else
 * word i holds values 2i and 2i + 1 (BF16, low half first) */
template <bool CODES>
__device__ __forceinline__ float chunks_dot(const uint4 *row, int c0, int c1, const float *xs, unsigned m)
{
	float s = 0.f;
	[[maybe_unused]] const x4d::iq4_consts kc = x4d::iq4_consts_of(0u);
	for (int c = c0; c < c1; c += 32) {
		const uint4 v = row[c];
		const float *x = xs + ((unsigned)c * (CODES ? 32u : 8u) & m);
		const uint32_t q[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
		for (int i = 0; i < 4; i++) {
			if constexpr (CODES) {
				const uint32_t lo = x4d::iq4_lookup4_biased(x4d::nibbles4(q[i], 0), kc);
				const uint32_t hi = x4d::iq4_lookup4_biased(x4d::nibbles4(q[i], 1), kc);
#pragma unroll
				for (int b = 0; b < 4; b++) {
					s = fmaf(x4d::biased_val(lo, kc.e, b), x[8 * i + 2 * b], s);
					s = fmaf(x4d::biased_val(hi, kc.e, b), x[8 * i + 2 * b + 1], s);
				}
			} else {
				s = fmaf(__uint_as_float(q[i] << 16), x[2 * i], s);
				s = fmaf(__uint_as_float(q[i] & 0xffff0000u), x[2 * i + 1], s);
			}
		}
	}
	return s;
}

/* a unit's parts: a row's chunks in CW / rows parts where the unit has
 * fewer than CW rows (the sums' order, whichever warps take them) */
__device__ __forceinline__ int unit_parts(int nr) { return nr >= CW ? 1 : CW / nr; }

/* a row's output from the sum of its parts' warp sums, taken in order */
__device__ __forceinline__ float unit_out(const stage &S, float s, int step)
{
	float v = tanhf(s * S.scale);
	if (S.first)
		v += 1e-3f * (float)step;
	return v;
}

/* part p of a row's parts (its cpr chunks cut in `parts`), summed by one
 * warp: the lanes' sums in lane order */
__device__ __forceinline__ float part_sum(const stage &S, const uint8_t *row_p, int cpr, int parts, int p,
					  const float *xs, int lane)
{
	const unsigned m = (unsigned)S.nx - 1;
	const uint4 *row = reinterpret_cast<const uint4 *>(row_p);
	const int c0 = p * cpr / parts + lane, c1 = (p + 1) * cpr / parts;
	return warp_sum(S.codes ? chunks_dot<true>(row, c0, c1, xs, m) : chunks_dot<false>(row, c0, c1, xs, m));
}

/* a row's sum by one warp: its parts' sums added in order, the bits of
 * unit()'s red[] sum */
__device__ __forceinline__ float row_sum(const stage &S, const uint8_t *row_p, int cpr, int parts, const float *xs,
					 int lane)
{
	float s = 0.f;
	for (int p = 0; p < parts; p++)
		s += part_sum(S, row_p, cpr, parts, p, xs, lane);
	return s;
}

/* unit u of stage S from its rows in page and its input in xs, by the 32 *
 * NW compute threads (t): its tasks are its rows, or each row's chunks in
 * CW / rows parts where it has fewer than CW rows, a warp a task in turn;
 * a task's sum in lane order and the parts' in order, so that the bits do
 * not depend on NW */
template <int NW>
__device__ void unit(const stage &S, int u, const uint8_t *page, const float *xs, float *red, int step,
		     int t)
{
	const int r0 = u * S.upr, nr = min(S.upr, S.rows - r0);
	const int cpr = S.rb >> 4;
	const int parts = unit_parts(nr);
	const int w = t >> 5, lane = t & 31;
	const unsigned long long t0 = S.work_ns && t == 0 ? gtime() : 0;
	for (int k = w; k < nr * parts; k += NW) {
		const int r = k / parts, p = k % parts;
		const float s = part_sum(S, page + (size_t)r * S.rb, cpr, parts, p, xs, lane);
		if (lane == 0)
			red[k] = s;
	}
	bar_compute<NW>();
	if (t < nr) {
		float s = 0.f;
		for (int p = 0; p < parts; p++)
			s += red[t * parts + p];
		S.y[r0 + t] = unit_out(S, s, step);
	}
	if (S.work_ns && t == 0)
		work_for(t0, S.work_ns);
}

template <int NW> __device__ __forceinline__ void stage_x(const stage &S, float *xs, int t)
{
	for (int i = t; i < S.nx; i += 32 * NW)
		xs[i] = __ldcg(S.x + i);
}

/* the same values, each thread's 16-byte loads all issued before the first
 * store: one L2 round trip instead of one an iteration (nx >= 8 is a
 * multiple of 4; XMAX / 4 of them at most) */
template <int NW> __device__ __forceinline__ void stage_xv(const stage &S, float *xs, int t)
{
	constexpr int N = (XMAX / 4 + 32 * NW - 1) / (32 * NW);
	const float4 *src = reinterpret_cast<const float4 *>(S.x);
	float4 *dst = reinterpret_cast<float4 *>(xs);
	const int n4 = S.nx >> 2;
	float4 v[N];
#pragma unroll
	for (int i = 0; i < N; i++)
		if (t + i * 32 * NW < n4)
			v[i] = __ldcg(src + t + i * 32 * NW);
#pragma unroll
	for (int i = 0; i < N; i++)
		if (t + i * 32 * NW < n4)
			dst[t + i * 32 * NW] = v[i];
}
#endif

/* a traced run's stamps of one stage at one step (%globaltimer, ns): the
 * first block's entry, the first and last block's release from the wait,
 * the last block's input staged, weights landed and end */
enum { TR_ENTRY, TR_WAIT0, TR_WAIT1, TR_X, TR_W, TR_END, TR_N };

#if defined(X4_DF) && !defined(X4_EMU)
__device__ __forceinline__ void stamp(unsigned long long *tr, int k, bool first)
{
	const unsigned long long now = gtime();
	if (first)
		atomicMin(tr + k, now);
	else
		atomicMax(tr + k, now);
}
#else
inline void stamp(unsigned long long *, int, bool) {}
#endif

/* The kernels forms: stage *sp at step `step` on gridDim.x blocks, block b
 * taking units b, b + gridDim.x, ... through a ring of NPG pages: the first
 * NPG units' weights copied before griddepcontrol.wait (those that wait for
 * the stage before, the routed experts', after it), each next one as soon
 * as its page is free.  kernels (NPG 1, a block a unit) and kernelsv (the
 * same, the input by stage_xv) launch a block a unit; kernelsp (NPG 2, VX)
 * as many blocks as the card holds, the input staged once a block instead
 * of once a unit.  tr (a traced run, else null): this stage's and step's
 * TR_N stamps, thread 0 of each block adding its own. */
template <int NPG, bool VX>
__global__ void __launch_bounds__(32 * CW) stage_kernel(const stage *sp, int step, int *err, unsigned long long *tr)
{
#ifdef X4_DF
	uint8_t *sm = dyn_smem();
	float *xs = reinterpret_cast<float *>(sm + NPG * PAGE), *red = xs + XMAX;
	uint64_t *full = reinterpret_cast<uint64_t *>(red + UROWS);
	const int G = gridDim.x, t = threadIdx.x;
	const bool st0 = tr && t == 0;
	if (st0)
		stamp(tr, TR_ENTRY, true);
	const stage S = *sp; /* the plan: not an activation */
	if (t == 0) {
		for (int i = 0; i < NPG; i++)
			mbar_init(full + i, 1);
		fence_init();
	}
	__syncthreads();
	if (!S.trig_late)
		x4p::trigger();
	/* weights that wait for the stage before wait for the dependency; those
	 * that wait for an earlier one are known once this grid starts (the
	 * stage before triggers after its own wait), as x4's MoE down does */
	const bool late = S.late >= 0 && S.late == S.dep;
	auto after = [&](int k) { return late && (int)blockIdx.x + k * G >= S.late_from; };
	auto copy = [&](int k) { /* the block's k-th unit into page k % NPG */
		const int u = blockIdx.x + k * G;
		const int nr = min(S.upr, S.rows - u * S.upr);
		bulk_copy(sm + (size_t)(k % NPG) * PAGE, S.w + (size_t)u * S.upr * S.rb, (unsigned)(nr * S.rb),
			  full + k % NPG);
	};
	const int nk = (S.units - (int)blockIdx.x + G - 1) / G; /* the block's units */
	if (t == 0) /* weights: before the wait */
		for (int k = 0; k < NPG && k < nk; k++)
			if (!after(k))
				copy(k);
	x4p::wait();
	if (st0) {
		stamp(tr, TR_WAIT0, true);
		stamp(tr, TR_WAIT1, false);
	}
	if (S.trig_late)
		x4p::trigger();
	if (t == 0) /* the routed experts': which ones is the router's */
		for (int k = 0; k < NPG && k < nk; k++)
			if (after(k))
				copy(k);
	if (VX)
		stage_xv<CW>(S, xs, t);
	else
		stage_x<CW>(S, xs, t);
	__syncthreads();
	if (st0)
		stamp(tr, TR_X, false);
	for (int k = 0; k < nk; k++) {
		mbar_wait(full + k % NPG, (unsigned)(k / NPG) & 1u, err);
		if (st0 && k == 0)
			stamp(tr, TR_W, false);
		unit<CW>(S, (int)blockIdx.x + k * G, sm + (size_t)(k % NPG) * PAGE, xs, red, step, t);
		if (tr || k + 1 < nk)
			__syncthreads(); /* the page read and the sums taken before they are reused */
		if (t == 0 && k + NPG < nk)
			copy(k + NPG);
	}
	if (st0)
		stamp(tr, TR_END, false);
#endif
}

/* a kernels form's shared memory */
constexpr size_t stage_smem(int npg)
{
	return (size_t)npg * PAGE + (XMAX + UROWS) * 4 + (size_t)npg * 8;
}

/* the dataflow forms' loader (one thread): each unit of the block's list
 * list[b0 .. b1), for each step, copied into the next page of the ring as
 * soon as the page's last use has emptied it, the routed experts' once the
 * router's units are all counted */
__device__ void df_loader(const stage *st, const int2 *list, int b0, int b1, const unsigned *done, int steps,
			  int npage, uint8_t *sm, uint64_t *full, uint64_t *empty, int *err, int mode = DF_POLL)
{
#ifdef X4_DF
	unsigned n = 0;
	for (int step = 0; step < steps; step++)
		for (int i = b0; i < b1; i++, n++) {
			const int2 e = list[i];
			const stage &S = st[e.x];
			const unsigned slot = n % npage, use = n / npage;
			if (use)
				mbar_wait(empty + slot, (use - 1) & 1, err);
			if (S.late >= 0 && e.y >= S.late_from && mode != DF_NODEP)
				spin_ge(done + S.late, (unsigned)(step + 1) * st[S.late].units, err, mode == DF_NAP);
			const int nr = min(S.upr, S.rows - e.y * S.upr);
			bulk_copy(sm + (size_t)slot * PAGE, S.w + (size_t)e.y * S.upr * S.rb, (unsigned)(nr * S.rb),
				  full + slot);
		}
#endif
}

/* the dataflow form: block b runs its units list[off[b] .. off[b + 1]) (a
 * stage and a unit each, in the step's order) for each step; done[s] counts
 * stage s's units over all steps */
template <int NW>
__global__ void __launch_bounds__(32 * (NW + 1), 1)
dataflow_kernel(const stage *st, const int2 *list, const int *off, unsigned *done, int steps, int npage,
		int *err)
{
#ifdef X4_DF
	uint8_t *sm = dyn_smem();
	float *xs = reinterpret_cast<float *>(sm + (size_t)npage * PAGE), *red = xs + XMAX;
	uint64_t *full = reinterpret_cast<uint64_t *>(red + UROWS), *empty = full + NPAGE;
	const int t = threadIdx.x, b0 = off[blockIdx.x], b1 = off[blockIdx.x + 1];
	if (t == 0) {
		for (int i = 0; i < npage; i++) {
			mbar_init(full + i, 1);
			mbar_init(empty + i, 1);
		}
		fence_init();
	}
	__syncthreads();
	if (t >= 32 * NW) { /* the loader warp */
		if (t == 32 * NW)
			df_loader(st, list, b0, b1, done, steps, npage, sm, full, empty, err);
		return;
	}
	/* a block's units of a stage are consecutive in its list: it counts them
	 * into done[] once, after the last (one fence a stage, not a unit) */
	unsigned n = 0, run = 0;
	int xkey = -1, run_stage = 0;
	for (int step = 0; step < steps; step++)
		for (int i = b0; i < b1; i++, n++) {
			const int2 e = list[i];
			const stage &S = st[e.x];
			const unsigned slot = n % npage, use = n / npage;
			const int key = step * 65536 + e.x;
			if (key != xkey) { /* this block's first unit of the stage this step */
				if (t == 0) {
					if (run) { /* every thread's y of the last run: behind the barrier */
						__threadfence();
						atomicAdd(done + run_stage, run);
					}
					spin_ge(done + S.dep, (unsigned)(S.first ? step : step + 1) * st[S.dep].units,
						err);
				}
				run = 0;
				bar_compute<NW>();
				stage_x<NW>(S, xs, t);
				bar_compute<NW>();
				xkey = key;
			}
			mbar_wait(full + slot, use & 1, err);
			unit<NW>(S, e.y, sm + (size_t)slot * PAGE, xs, red, step, t);
			bar_compute<NW>(); /* the y written, the page and red read */
			if (t == 0)
				mbar_arrive(empty + slot);
			run_stage = e.x, run++;
		}
	if (t == 0 && run) {
		__threadfence();
		atomicAdd(done + run_stage, run);
	}
#endif
}

/* the warp form of the dataflow kernel (dataflowv): the same lists, loader
 * and counters, but no block barrier a unit.  A run (the block's
 * consecutive units of one stage in a step) starts with the one wait for
 * the stage before's count and its input staged by stage_xv between two
 * barriers; then its units' rows are dealt to the NW compute warps in turn
 * (row k of the run to warp k % NW), each warp summing a row's parts itself
 * in order (row_sum: unit()'s bits) and writing its output, and arriving on
 * each page's empty barrier (NW arrivals) once past its rows there, having
 * waited for the page (so that no arrival runs ahead of the page's use).
 * The last warp of a run to finish (a shared count) adds the run's units to
 * the stage's counter.  mode: how the counts are awaited (DF_POLL, DF_NAP,
 * or DF_NODEP: not at all, the structure's cost without its waits on other
 * blocks; its outputs are wrong). */
template <int NW>
__global__ void __launch_bounds__(32 * (NW + 1), 1)
dataflow_warp_kernel(const stage *st, const int2 *list, const int *off, unsigned *done, int steps, int npage,
		     int *err, int mode)
{
#ifdef X4_DF
	uint8_t *sm = dyn_smem();
	float *xs = reinterpret_cast<float *>(sm + (size_t)npage * PAGE);
	uint64_t *full = reinterpret_cast<uint64_t *>(xs + XMAX + UROWS), *empty = full + NPAGE;
	unsigned *fin = reinterpret_cast<unsigned *>(empty + NPAGE); /* warps past their run's rows */
	const int t = threadIdx.x, b0 = off[blockIdx.x], b1 = off[blockIdx.x + 1];
	if (t == 0) {
		for (int i = 0; i < npage; i++) {
			mbar_init(full + i, 1);
			mbar_init(empty + i, NW);
		}
		*fin = 0;
		fence_init();
	}
	__syncthreads();
	if (t >= 32 * NW) { /* the loader warp */
		if (t == 32 * NW)
			df_loader(st, list, b0, b1, done, steps, npage, sm, full, empty, err, mode);
		return;
	}
	const int w = t >> 5, lane = t & 31;
	unsigned n = 0; /* the unit's place in the block's whole list: its page */
	for (int step = 0; step < steps; step++)
		for (int i = b0; i < b1;) {
			const int sx = list[i].x;
			const stage &S = st[sx];
			int i1 = i + 1;
			while (i1 < b1 && list[i1].x == sx)
				i1++;
			if (t == 0 && mode != DF_NODEP)
				spin_ge(done + S.dep, (unsigned)(S.first ? step : step + 1) * st[S.dep].units, err,
					mode == DF_NAP);
			bar_compute<NW>(); /* the count there, and the last run's input read */
			stage_xv<NW>(S, xs, t);
			bar_compute<NW>();
			const int cpr = S.rb >> 4;
			int k0 = 0; /* the run's rows before this unit */
			for (int j = i; j < i1; j++, n++) {
				const int u = list[j].y, r0 = u * S.upr, nr = min(S.upr, S.rows - r0);
				const unsigned slot = n % npage, use = n / npage;
				const uint8_t *page = sm + (size_t)slot * PAGE;
				mbar_wait(full + slot, use & 1, err);
				const int parts = unit_parts(nr);
				for (int r = ((w - k0) % NW + NW) % NW; r < nr; r += NW) {
					const unsigned long long t0 = S.work_ns && r == 0 ? gtime() : 0;
					const float s = row_sum(S, page + (size_t)r * S.rb, cpr, parts, xs, lane);
					if (lane == 0)
						S.y[r0 + r] = unit_out(S, s, step);
					if (S.work_ns && r == 0 && lane == 0)
						work_for(t0, S.work_ns);
				}
				__syncwarp();
				if (lane == 0)
					mbar_arrive(empty + slot);
				k0 += nr;
			}
			if (lane == 0) {
				__threadfence(); /* this warp's outputs, before the count */
				if (atomicAdd(fin, 1u) % NW == NW - 1) {
					__threadfence();
					atomicAdd(done + sx, (unsigned)(i1 - i));
				}
			}
			i = i1;
		}
#endif
}

/* the dataflow forms' shared memory: the ring, the input, the barriers and the count */
constexpr size_t dataflow_smem(int npage)
{
	return (size_t)npage * PAGE + (XMAX + UROWS) * 4 + 2 * NPAGE * 8 + 8;
}

struct plan {
	std::vector<stage> st;
	std::vector<const char *> kind; /* each stage's name in the block (a trace's rows) */
	double bytes = 0;
	size_t wbytes = 0;
};

/* a plan's variants: none (the step as x4 builds it); fold: the step's
 * one-unit stages (the norms and cache row, the combine, the head's gate,
 * the argmax) left out, their consumers reading the stage before them, as
 * if each were done again by every block of its consumer at no cost (the
 * most that folding them can give); uniform: the same bytes as K stages of
 * equal rows (the ceilings' synthetic step, on this probe's kernels) */
struct variant {
	bool fold = false;
	int uniform = 0;
};

int pow2_floor(int v)
{
	int p = 8;
	while (p * 2 <= v && p * 2 <= XMAX)
		p *= 2;
	return p;
}

/* a stage of rows x rb bytes (rb rounded up to 16) reading nx of the stage
 * before's values; its weights' offset into one allocation in .w for now */
void add(plan *P, const char *kind, int rows, size_t rb, int nx_real, bool codes = false, int work_ns = 0)
{
	stage s = {};
	s.rows = rows;
	s.rb = (int)((rb + 15) / 16 * 16);
	if (s.rb > PAGE) {
		fprintf(stderr, "dataflow: a row of %zu bytes is more than a page\n", rb);
		exit(1);
	}
	s.nx = pow2_floor(nx_real);
	if (codes && s.nx < 32) {
		fprintf(stderr, "dataflow: a stage of codes reads fewer than 32 inputs\n");
		exit(1);
	}
	s.upr = std::max(1, std::min(UROWS, PAGE / s.rb));
	s.units = (rows + s.upr - 1) / s.upr;
	s.dep = (int)P->st.size() - 1;
	s.late = -1;
	s.codes = codes;
	s.work_ns = work_ns;
	/* y's argument about 1 (the weights' BF16 values under 2^-4, the codes' under 127) */
	s.scale = codes ? 1.0f / (40.0f * sqrtf((float)(2 * s.rb))) : 1.0f / (0.05f * sqrtf((float)(s.rb / 2)));
	s.w = reinterpret_cast<const uint8_t *>(P->wbytes);
	P->wbytes += (size_t)rows * s.rb;
	P->bytes += (double)rows * s.rb;
	P->st.push_back(s);
	P->kind.push_back(kind);
}

/* the step of the released model at `ctx` positions of cache, from its
 * tensor list */
plan make_plan(const x4_config &c, int ctx, bool iq4 = false, int work_ns = 0, variant v = variant())
{
	x4_tensor_spec *ts;
	int nt;
	x4_err e = { 0 };
	if (x4_layout(&c, &ts, &nt, &e)) {
		fprintf(stderr, "dataflow: %s\n", e.msg);
		exit(1);
	}
	auto find = [&](int b, const char *name) -> const x4_tensor_spec & {
		char full[64];
		if (b >= 0)
			snprintf(full, sizeof full, "blk.%d.%s", b, name);
		else
			snprintf(full, sizeof full, "%s", name);
		for (int i = 0; i < nt; i++)
			if (!strcmp(ts[i].name, full))
				return ts[i];
		fprintf(stderr, "dataflow: no tensor %s in the layout\n", full);
		exit(1);
	};
	/* bytes of one row (ne[0] values) and the rows (the other dims) */
	auto rb = [](const x4_tensor_spec &t) {
		return (size_t)t.ne[0] / x4_type_block_elems(t.type) * x4_type_block_bytes(t.type);
	};
	auto rows = [](const x4_tensor_spec &t) { return (int)(t.ne[1] * t.ne[2]); };
	auto codes = [iq4](const x4_tensor_spec &t) { return iq4 && t.type == X4_T_IQ4_NL; };
	const int D = c.n_embd, W = work_ns;
	plan P;
	const x4_tensor_spec &emb = find(-1, "token_embd.weight");
	add(&P, "embed", 64, rb(emb) / 64, XMAX); /* the embedding's row, read as 64 rows */
	for (int b = 0; b < c.n_block; b++) {
		const x4_tensor_spec &ha = find(b, "hc_attn_fn.weight"), &qa = find(b, "attn_q_a.weight");
		const x4_tensor_spec &kva = find(b, "attn_kv_a_mqa.weight"), &qb = find(b, "attn_q_b.weight");
		const x4_tensor_spec &kb = find(b, "attn_k_b.weight"), &vb = find(b, "attn_v_b.weight");
		const x4_tensor_spec &o = find(b, "attn_output.weight"), &hf = find(b, "hc_ffn_fn.weight");
		add(&P, "attn_gate", rows(ha), rb(ha), c.n_hc * D, false, W); /* the attention's gate */
		add(&P, "q_a_kv_a", rows(qa) + rows(kva), rb(qa), D);         /* q_a and kv_a */
		if (!v.fold)
			add(&P, "norms", 64, 16, c.q_lora, false, W);            /* the norms, the cache row */
		add(&P, "q_b", rows(qb), rb(qb), c.q_lora);              /* q_b */
		add(&P, "q_latent", rows(kb), rb(kb), c.n_head * c.d_nope);   /* q into the latent */
		add(&P, "attention", ctx, (size_t)2 * (c.kv_lora + c.d_rope), /* the attention over the cache */
		    c.n_head * (c.kv_lora + c.d_rope));
		if (!v.fold)
			add(&P, "combine", 64, 16, XMAX, false, W); /* the splits' combine */
		add(&P, "v_latent", rows(vb), rb(vb), c.n_head * c.kv_lora);  /* the values out of the latent */
		add(&P, "attn_out", rows(o), rb(o), c.n_head * c.d_v);        /* the output projection */
		add(&P, "ffn_gate", rows(hf), rb(hf), c.n_hc * D, false, W); /* the FFN's gate */
		if (b < c.n_dense) {
			const x4_tensor_spec &g = find(b, "ffn_gate.weight"), &dn = find(b, "ffn_down.weight");
			add(&P, "dense_gate_up", 2 * rows(g), rb(g), D, codes(g));
			add(&P, "dense_down", rows(dn), rb(dn), c.n_ff, codes(dn));
			continue;
		}
		const x4_tensor_spec &r = find(b, "ffn_gate_inp.weight");
		const x4_tensor_spec &ge = find(b, "ffn_gate_exps.weight"), &de = find(b, "ffn_down_exps.weight");
		const int used = c.n_expert_used, sh = c.n_expert_shared;
		add(&P, "router", rows(r), rb(r), D, false, W); /* the router and its top k */
		const int router = (int)P.st.size() - 1;
		/* the shared expert's gate and up rows, then the routed experts' */
		add(&P, "moe_gate_up", 2 * c.n_ff_exp * (sh + used), rb(ge), D, codes(ge));
		stage &gu = P.st.back();
		gu.late = router;
		gu.late_from = 2 * c.n_ff_exp * sh / gu.upr;
		/* the down: each output row sums the chosen experts' and the shared's */
		add(&P, "moe_down", (int)de.ne[1], rb(de) * (size_t)(used + sh), c.n_ff_exp * (used + sh), codes(de));
		P.st.back().late = router;
		P.st[P.st.size() - 2].trig_late = 1;
	}
	if (!v.fold)
		add(&P, "head_gate", 64, 16, XMAX, false, W); /* the head's gate and norm */
	const x4_tensor_spec &out = find(-1, "output.weight");
	add(&P, "head", rows(out), rb(out), D);
	if (!v.fold)
		add(&P, "argmax", 64, 16, XMAX, false, W); /* the argmax */
	if (v.uniform > 0) { /* rows of 16 KB, two a unit */
		plan U;
		const double per = P.bytes / v.uniform;
		for (int k = 0; k < v.uniform; k++)
			add(&U, "uniform", std::max(1, (int)llround(per / 16384)), 16384, 4096);
		P = U;
	}
	P.st[0].first = 1;
	P.st[0].dep = (int)P.st.size() - 1;
	free(ts);
	return P;
}

/* each stage's outputs' offset in one buffer of max(rows, XMAX) values a
 * stage (the last entry: the buffer's length) */
std::vector<size_t> out_offsets(const plan &P)
{
	std::vector<size_t> off(1, 0);
	for (const stage &s : P.st)
		off.push_back(off.back() + (size_t)std::max(s.rows, XMAX));
	return off;
}

/* a form's stages: outputs at y + off[i], each input its dep's outputs */
void wire(std::vector<stage> &st, float *y, const std::vector<size_t> &off)
{
	for (size_t i = 0; i < st.size(); i++)
		st[i].y = y + off[i];
	for (stage &s : st)
		s.x = st[s.dep].y;
}

/* the dataflow kernel's lists in one array: block b's units are
 * flat[off[b] .. off[b + 1]) */
struct dealt {
	std::vector<int2> flat;
	std::vector<int> off;
};
dealt flatten(const std::vector<std::vector<int2>> &lists)
{
	dealt d;
	d.off.push_back(0);
	for (const auto &l : lists) {
		d.flat.insert(d.flat.end(), l.begin(), l.end());
		d.off.push_back((int)d.flat.size());
	}
	return d;
}

/* the dataflow form's lists: the step's units in order, dealt to G blocks in turn */
std::vector<std::vector<int2>> deal(const plan &P, int G)
{
	std::vector<std::vector<int2>> lists(G);
	size_t cursor = 0;
	for (int s = 0; s < (int)P.st.size(); s++)
		for (int u = 0; u < P.st[s].units; u++)
			lists[cursor++ % G].push_back(make_int2(s, u));
	return lists;
}

/* On the host, without a device: the plan's stages, and the dataflow lists
 * run for `steps` steps by a model of the kernel's waits (each block takes
 * its next unit once the counts it waits for are there, its loader's late
 * wait included), which must finish: returns 1 if the blocks would all
 * wait. */
int show_plan(const plan &P, int G, int steps, int ctx)
{
	printf("stage\trows\trow_bytes\tunits\trows_a_unit\tinputs\tdep\tlate\tlate_from\tcodes\twork_ns\tbytes\n");
	for (size_t i = 0; i < P.st.size(); i++) {
		const stage &s = P.st[i];
		printf("%zu\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%zu\n", i, s.rows, s.rb, s.units, s.upr, s.nx,
		       s.dep, s.late, s.late_from, s.codes, s.work_ns, (size_t)s.rows * s.rb);
	}
	const std::vector<std::vector<int2>> lists = deal(P, G);
	std::vector<unsigned> done(P.st.size(), 0);
	std::vector<size_t> at(G, 0);
	const size_t per = lists[0].size();
	size_t left = 0;
	for (auto &l : lists)
		left += l.size() * steps;
	for (bool moved = true; moved && left;) {
		moved = false;
		for (int b = 0; b < G; b++)
			while (at[b] < lists[b].size() * steps) {
				const int step = (int)(at[b] / lists[b].size());
				const int2 e = lists[b][at[b] % lists[b].size()];
				const stage &S = P.st[e.x];
				const unsigned need = (unsigned)(S.first ? step : step + 1) * P.st[S.dep].units;
				if (done[S.dep] < need)
					break;
				if (S.late >= 0 && e.y >= S.late_from &&
				    done[S.late] < (unsigned)(step + 1) * P.st[S.late].units)
					break;
				done[e.x]++, at[b]++, left--, moved = true;
			}
	}
	fprintf(stderr, "# plan: %zu stages, %.6f GB a step at context %d; %d blocks, %zu units on block 0; "
			"%d steps of the dataflow lists: %s\n",
		P.st.size(), P.bytes * 1e-9, ctx, G, per, steps, left ? "the blocks all wait (a deadlock)" : "finish");
	return left ? 1 : 0;
}

} /* namespace x4df */

#endif
