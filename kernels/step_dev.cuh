/*
 * step_dev.cuh - the pieces of the persistent decode step (x4k_step,
 * kernels/step.cu; docs/step.md): the grid barrier, the warp's ring that
 * streams a phase's weights into shared memory ahead of their use (across
 * the phase's end and the barrier where the next phase's weights allow),
 * and a warp's products on what the ring holds: BF16 and F32 rows, and the
 * 32-value block formats IQ4_NL and Q8_0, and Q6_K.  The phases that use
 * them are step_phases.cuh's.
 *
 * Built with X4_EMU (bench/emu: the CPU emulator, every block of the grid
 * on fibers), the same code runs on the host: the few instructions it
 * cannot compile (the barrier's release and acquire, the 8-byte cp.async,
 * the clock) have an X4_EMU branch here and nowhere else.  cp.async of 16
 * bytes and the shared-memory address are mma_dev.cuh's, which the
 * emulator replaces wholesale.
 *
 * sm_80 and later (cp.async); the launcher (kernels/step.cu) checks the
 * device and the trunk runs the multi-kernel step elsewhere.
 */
#ifndef X4_STEP_DEV_CUH
#define X4_STEP_DEV_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "x4_kern.h"
#include "blockfmt.h"
#include "core_dev.cuh"
#include "mma_dev.cuh"

#ifdef X4_EMU
void emu_yield();                                  /* let the other fibers run */
void emu_cp_async_any(void *dst, const void *src, int n); /* lands at issue */
unsigned char *emu_block_smem();                   /* this fiber's block's */
void emu_arrive(unsigned *p);                      /* the barrier's add */
extern int emu_stop_phase;                         /* debugging: end every fiber there */
void emu_fiber_exit();
#endif

namespace x4s {

using x4c::bf16;
using x4c::f16;

/* ---------------- geometry ---------------- */

constexpr int SLOTB = 4096; /* bytes a ring slot: one item of a phase's weights */
constexpr int XS = 6144;    /* floats of a block's input vector (shared memory) */
constexpr int UNIT = 4;     /* columns of D a unit: a block owns every G-th unit */
constexpr int MAXK = 8;     /* experts a token at most */
constexpr int MAXE = 256;   /* routed experts at most */
constexpr int NCMAX = 24;   /* gate coefficients at most (n_hc 4) */
constexpr int AT_T = 32;    /* cache rows an attention tile */
constexpr int PH_BYTES = 256; /* a phase's descriptor in shared memory, at most */

/* ---------------- primitives ---------------- */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(X4_EMU)
#define X4S_DEVICE 1
#endif

/* n (0..16) bytes of global src into 16 bytes of shared dst, zeros after */
static __device__ __forceinline__ void cp16(void *dst, const void *src, int n)
{
#if defined(X4S_DEVICE) || defined(X4_EMU)
	x4m::cp_async16(x4m::smem_u32(dst), src, n);
#endif
}

/* 8 bytes of global src (8-aligned) into shared dst (8-aligned) */
static __device__ __forceinline__ void cp8(void *dst, const void *src)
{
#if defined(X4_EMU)
	emu_cp_async_any(dst, src, 8);
#elif defined(X4S_DEVICE)
	asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(x4m::smem_u32(dst)), "l"(src)
		     : "memory");
#endif
}

static __device__ __forceinline__ void commit()
{
#if defined(X4S_DEVICE) || defined(X4_EMU)
	x4m::cp_async_commit();
#endif
}

/* Wait until at most n (0..3) of this thread's groups are pending. */
static __device__ __forceinline__ void wait_pending(int n)
{
#if defined(X4S_DEVICE) || defined(X4_EMU)
	switch (n) {
	case 0: x4m::cp_async_wait<0>(); break;
	case 1: x4m::cp_async_wait<1>(); break;
	case 2: x4m::cp_async_wait<2>(); break;
	default: x4m::cp_async_wait<3>(); break;
	}
#endif
}

/* The barrier's counter: a release add, an acquire load (GPU scope). */
static __device__ __forceinline__ void arrive(unsigned *p)
{
#if defined(X4_EMU)
	emu_arrive(p);
#elif defined(X4S_DEVICE)
	asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(p) : "memory");
#endif
}

static __device__ __forceinline__ unsigned acquire(const unsigned *p)
{
#if defined(X4_EMU)
	emu_yield();
	return __atomic_load_n(p, __ATOMIC_SEQ_CST);
#elif defined(X4S_DEVICE)
	unsigned v;
	asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
	return v;
#else
	return *p;
#endif
}

static __device__ __forceinline__ unsigned long long clock_ns()
{
#if defined(X4S_DEVICE)
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
#else
	return 0;
#endif
}

/* An activation another block wrote in this launch: read from L2, never a
 * stale line of this SM's L1. */
static __device__ __forceinline__ float ldcg(const float *p)
{
#if defined(X4S_DEVICE)
	return __ldcg(p);
#else
	return *p;
#endif
}

static __device__ __forceinline__ float4 ldcg4(const float *p)
{
#if defined(X4S_DEVICE)
	return __ldcg(reinterpret_cast<const float4 *>(p));
#else
	return *reinterpret_cast<const float4 *>(p);
#endif
}

/* Loads from L2 come back a round trip later; a loop that uses each load
 * before the next is issued pays one a value.  These issue 8 at once. */

/* n values of global src (strided by stride) summed in index order:
 * values lane0, lane0 + step, ... (lane0 < step). */
static __device__ __forceinline__ float sum_ldcg(const float *src, size_t stride, int n, int lane0, int step)
{
	float v = 0.f;
	for (int i0 = lane0; i0 < n; i0 += 8 * step) {
		float t[8];
#pragma unroll
		for (int u = 0; u < 8; u++) {
			const int i = i0 + u * step;
			t[u] = i < n ? ldcg(src + (size_t)i * stride) : 0.f;
		}
#pragma unroll
		for (int u = 0; u < 8; u++)
			v += t[u];
	}
	return v;
}

/* dst[i] = src[i] for i < n (dst shared, src global), by nt threads. */
static __device__ __forceinline__ void copy_ldcg(float *dst, const float *src, int n, int t0, int nt)
{
	for (int i0 = t0; i0 < n; i0 += 8 * nt) {
		float t[8];
#pragma unroll
		for (int u = 0; u < 8; u++) {
			const int i = i0 + u * nt;
			t[u] = i < n ? ldcg(src + i) : 0.f;
		}
#pragma unroll
		for (int u = 0; u < 8; u++) {
			const int i = i0 + u * nt;
			if (i < n)
				dst[i] = t[u];
		}
	}
}

/* The grid barrier: every block's writes before it are visible to every
 * block after it.  One counter, cleared before the launch, that each block
 * adds 1 to at each barrier (a release: the block's writes, ordered before
 * thread 0 by the caller's __syncthreads, go with it); the n-th barrier
 * spins on acquire loads until n * G.  The lab (bench/kernels/grid_sync.cu)
 * priced it against a relaxed spin with one fence, with a back-off, and a
 * flag released by the last block: 0.95 us a barrier on the H200 against
 * 0.98, 1.08 and 1.41 (bench/RESULTS.md 32). */
static __device__ __forceinline__ void grid_sync(unsigned *bar, unsigned &target)
{
	target += gridDim.x;
	if (threadIdx.x == 0) {
		arrive(bar);
		while (acquire(bar) < target) {
		}
	}
	__syncthreads();
}

/* ---------------- the ring ----------------
 * A warp's NSLOT slots of SLOTB bytes.  An item is one task's weights for
 * one chunk (at most two segments, each copied as the 16-byte lines that
 * cover it, zeros past its end, never read past it); one commit group an
 * item.  head counts the items issued, tail those computed; item i sits in
 * slot i % NSLOT. */
struct Seg {
	const uint8_t *src;
	int bytes;
};
/* One item's bytes: a segment, or two of the same length (a gate/up pair);
 * no arrays, so that nothing of it lives in local memory. */
struct Task {
	Seg s0, s1; /* s1.src NULL: one segment */
};

static __device__ __forceinline__ Task task1(const void *src, int bytes)
{
	return { { static_cast<const uint8_t *>(src), bytes }, { nullptr, 0 } };
}

static __device__ __forceinline__ Task task2(const void *a, const void *b, int bytes)
{
	return { { static_cast<const uint8_t *>(a), bytes }, { static_cast<const uint8_t *>(b), bytes } };
}

/* Bytes a segment takes in a slot: its covering lines. */
static __device__ __forceinline__ int seg_room(const Seg &g)
{
	return (int)((((uintptr_t)g.src & 15) + (uintptr_t)g.bytes + 15) & ~(uintptr_t)15);
}

/* One segment's covering lines into the slot at off. */
static __device__ __forceinline__ void seg_copy(uint8_t *slot, const Seg &g, int lane)
{
	const int mis = (int)((uintptr_t)g.src & 15), n = mis + g.bytes;
	const uint8_t *a = g.src - mis;
	for (int o = 16 * lane; o < n; o += 512) {
		/* the first line may start before src: bytes of the row or tensor
		 * before it, inside the weights' allocation (256-aligned tensors) */
		cp16(slot + o, a + o, n - o < 16 ? n - o : 16);
	}
}

static __device__ __forceinline__ void task_copy(uint8_t *slot, const Task &t, int lane)
{
	seg_copy(slot, t.s0, lane);
	if (t.s1.src)
		seg_copy(slot + seg_room(t.s0), t.s1, lane);
}

/* Where each segment's first byte sits in the slot. */
static __device__ __forceinline__ void task_ptrs(const uint8_t *slot, const Task &t, const uint8_t *(&p)[2])
{
	p[0] = slot + ((uintptr_t)t.s0.src & 15);
	p[1] = slot + seg_room(t.s0) + ((uintptr_t)t.s1.src & 15);
}

/* ---------------- products on a slot ----------------
 * Each returns this lane's partial sum; the caller adds the lanes of a row
 * (warp_sum, or seg_sum over groups of lanes).  Sums run in a fixed order. */

/* Sum over the lanes of each aligned group of g lanes (g a power of two),
 * every lane of the group getting it. */
static __device__ __forceinline__ float seg_sum(float v, int g)
{
#pragma unroll
	for (int o = 16; o; o >>= 1)
		if (o < g)
			v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* The largest power of two (at most 32) that divides n (n >= 1). */
static __host__ __device__ inline int pow2_div(int n)
{
	int g = 1;
	while (g < 32 && n % (2 * g) == 0)
		g *= 2;
	return g;
}

template <bool XG> __device__ __forceinline__ float4 xload4(const float *x)
{
	return XG ? ldcg4(x) : *reinterpret_cast<const float4 *>(x);
}

/* BF16 values [0, 8 n8) of w (16-aligned) . x, this lane's share: 8-value
 * lines lane0, lane0 + step, ...  XG: x is in global memory (else shared). */
template <bool XG>
static __device__ __noinline__ float dot_bf16(const uint8_t *w, const float *x, int n8, int lane0, int step)
{
	float a = 0.f;
	for (int i = lane0; i < n8; i += step) {
		const uint4 v = *reinterpret_cast<const uint4 *>(w + 16 * i);
		const float4 x0 = xload4<XG>(x + 8 * i), x1 = xload4<XG>(x + 8 * i + 4);
		float2 f = x4c::bf16x2(v.x);
		a = fmaf(f.x, x0.x, a);
		a = fmaf(f.y, x0.y, a);
		f = x4c::bf16x2(v.y);
		a = fmaf(f.x, x0.z, a);
		a = fmaf(f.y, x0.w, a);
		f = x4c::bf16x2(v.z);
		a = fmaf(f.x, x1.x, a);
		a = fmaf(f.y, x1.y, a);
		f = x4c::bf16x2(v.w);
		a = fmaf(f.x, x1.z, a);
		a = fmaf(f.y, x1.w, a);
	}
	return a;
}

/* F32 values [0, 4 n4) of w . x, 4-value lines lane0, lane0 + step, ... */
static __device__ __noinline__ float dot_f32(const uint8_t *w, const float *x, int n4, int lane0, int step)
{
	float a = 0.f;
	for (int i = lane0; i < n4; i += step) {
		const float4 v = *reinterpret_cast<const float4 *>(w + 16 * i);
		const float4 xv = *reinterpret_cast<const float4 *>(x + 4 * i);
		a = fmaf(v.x, xv.x, a);
		a = fmaf(v.y, xv.y, a);
		a = fmaf(v.z, xv.z, a);
		a = fmaf(v.w, xv.w, a);
	}
	return a;
}

/* A 2-aligned 32-bit word of shared memory. */
static __device__ __forceinline__ uint32_t ld32_2(const uint8_t *p)
{
	const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
	return (uint32_t)h[0] | (uint32_t)h[1] << 16;
}

/* Byte j of w less off, as a float, exactly: the byte under the exponent
 * of 2^23, less 2^23 + off (no quarter-rate I2F). */
static __device__ __forceinline__ float byte_less(uint32_t w, int j, int off)
{
	return __fadd_rn(__uint_as_float(__byte_perm(w, 0x4b000000u, 0x7540u | (unsigned)j)),
			 -(8388608.0f + (float)off));
}

/* Byte j of w, a code + 128, as the code's value. */
static __device__ __forceinline__ float biased(uint32_t w, int j) { return byte_less(w, j, 128); }

/* The IQ4_NL codebook + 128 as bytes (codes 0..3, 4..7, 8..11, 12..15). */
struct IQ4Tab {
	uint32_t t0, t1, t2, t3;
};
static __device__ __forceinline__ IQ4Tab iq4_tab()
{
	constexpr uint64_t B = 0x8080808080808080ull;
	return { (uint32_t)(X4B_IQ4NL_LO ^ B), (uint32_t)((X4B_IQ4NL_LO ^ B) >> 32),
		 (uint32_t)(X4B_IQ4NL_HI ^ B), (uint32_t)((X4B_IQ4NL_HI ^ B) >> 32) };
}

/* The 8 codes of word w (bytes j0..j0+3 of a block's nibbles: byte j's low
 * nibble is value j, its high nibble value j + 16) as codes + 128: lo holds
 * values j0, j0+16, j0+1, j0+17 (bytes 0..3), hi values j0+2, j0+18, j0+3,
 * j0+19.  Two permutes pick from the lower and upper 8 entries by a code's
 * low 3 bits, a third between them by its bit 3. */
static __device__ __forceinline__ void iq4_codes8(uint32_t w, const IQ4Tab &k, uint32_t &lo, uint32_t &hi)
{
	const uint32_t m = w & 0x77777777u;
	const uint32_t s = ((w >> 1) & 0x44444444u) | 0x32103210u;
	lo = __byte_perm(__byte_perm(k.t0, k.t1, m), __byte_perm(k.t2, k.t3, m), s);
	hi = __byte_perm(__byte_perm(k.t0, k.t1, m >> 16), __byte_perm(k.t2, k.t3, m >> 16), s >> 16);
}

/* One IQ4_NL block (b: its 18 bytes, 2-aligned; x: its 32 values,
 * 16-aligned) into acc: the codes' sum against x in fp32, then
 * acc = fma(d, sum, acc), the register core's order (docs/numerics.md 1.9). */
template <bool XG>
static __device__ __forceinline__ float blk_iq4(const uint8_t *b, const float *x, const IQ4Tab &k, float acc)
{
	float s = 0.f;
#pragma unroll 1 /* the step's code is kept small: docs/step.md 3 */
	for (int i = 0; i < 4; i++) {
		uint32_t lo, hi;
		iq4_codes8(ld32_2(b + 2 + 4 * i), k, lo, hi);
		const float4 xa = xload4<XG>(x + 4 * i), xb = xload4<XG>(x + 16 + 4 * i);
		s = fmaf(biased(lo, 0), xa.x, s);
		s = fmaf(biased(lo, 2), xa.y, s);
		s = fmaf(biased(hi, 0), xa.z, s);
		s = fmaf(biased(hi, 2), xa.w, s);
		s = fmaf(biased(lo, 1), xb.x, s);
		s = fmaf(biased(lo, 3), xb.y, s);
		s = fmaf(biased(hi, 1), xb.z, s);
		s = fmaf(biased(hi, 3), xb.w, s);
	}
	return fmaf(f16(*reinterpret_cast<const uint16_t *>(b)), s, acc);
}

/* One Q8_0 block (34 bytes: fp16 d, 32 int8), as blk_iq4. */
template <bool XG>
static __device__ __forceinline__ float blk_q8(const uint8_t *b, const float *x, float acc)
{
	float s = 0.f;
#pragma unroll 1
	for (int i = 0; i < 8; i++) {
		const uint32_t w = ld32_2(b + 2 + 4 * i) ^ 0x80808080u; /* code + 128 */
		const float4 xv = xload4<XG>(x + 4 * i);
		s = fmaf(biased(w, 0), xv.x, s);
		s = fmaf(biased(w, 1), xv.y, s);
		s = fmaf(biased(w, 2), xv.z, s);
		s = fmaf(biased(w, 3), xv.w, s);
	}
	return fmaf(f16(*reinterpret_cast<const uint16_t *>(b)), s, acc);
}

/* Rows of 32-value blocks in a slot, nr rows (row r at base + r * stride:
 * one segment's rows, or a pair's two segments with stride their
 * distance), each nb blocks of type fmt: lanes in groups of g (a power of
 * two), group q taking rows q, q + 32/g, ...; a lane the blocks lane%g,
 * lane%g + g, ...  Component i of the result is this lane's partial of
 * its i-th row (i < R).  x: the values of the rows' first block on.  Out
 * of line, one copy for every phase that calls it (docs/step.md 3). */
template <int R, bool XG>
static __device__ __noinline__ float4 dot_blocks(int fmt, const uint8_t *base, ptrdiff_t stride, int nr, int nb,
					  const float *x, int lane, int g)
{
	static_assert(R >= 1 && R <= 4, "a float4 of rows");
	const int bb = fmt == X4_T_Q8_0 ? 34 : 18, ng = 32 / g, q = lane / g;
	const IQ4Tab k = iq4_tab();
	float acc[4] = { 0.f, 0.f, 0.f, 0.f };
	for (int j = lane % g; j < nb; j += g) {
#pragma unroll
		for (int i = 0; i < R; i++) {
			const int r = q + ng * i;
			if (r < nr) {
				const uint8_t *b = base + r * stride + (ptrdiff_t)j * bb;
				acc[i] = fmt == X4_T_Q8_0 ? blk_q8<XG>(b, x + 32 * j, acc[i])
							  : blk_iq4<XG>(b, x + 32 * j, k, acc[i]);
			}
		}
	}
	return make_float4(acc[0], acc[1], acc[2], acc[3]);
}

/* One Q6_K row (nsb superblocks of 210 bytes at w, 2-aligned) . x, this
 * lane's share: units (superblock, half, four of its 32 positions), 16
 * values a unit, units lane, lane + 32, ...  A unit's four scale groups
 * are summed on the codes - 32 in fp32 and scaled once by d * scale. */
static __device__ __noinline__ float dot_q6k(const uint8_t *w, int nsb, const float *x, int lane)
{
	float a = 0.f;
	for (int u = lane; u < nsb * 16; u += 32) {
		const int sb = u >> 4, h = (u >> 3) & 1, l4 = 4 * (u & 7);
		const uint8_t *b = w + (size_t)sb * 210;
		const uint32_t ql0 = ld32_2(b + 64 * h + l4), ql1 = ld32_2(b + 64 * h + 32 + l4);
		const uint32_t qh = ld32_2(b + 128 + 32 * h + l4);
		const int8_t *sc = reinterpret_cast<const int8_t *>(b + 192 + 8 * h + (l4 >> 4));
		const float d = f16(*reinterpret_cast<const uint16_t *>(b + 208));
		const float *xb = x + 256 * sb + 128 * h + l4;
#pragma unroll 1
		for (int g = 0; g < 4; g++) { /* values l4 + 32 g .. +3: q1..q4 of the format */
			const uint32_t lo4 = (g & 1 ? ql1 : ql0) >> (g & 2 ? 4 : 0) & 0x0f0f0f0fu;
			const uint32_t hi2 = (qh >> (2 * g)) & 0x03030303u;
			const uint32_t q = lo4 | hi2 << 4; /* 0..63 a byte: code + 32 */
			const float4 xv = *reinterpret_cast<const float4 *>(xb + 32 * g);
			float s = 0.f;
			s = fmaf(byte_less(q, 0, 32), xv.x, s);
			s = fmaf(byte_less(q, 1, 32), xv.y, s);
			s = fmaf(byte_less(q, 2, 32), xv.z, s);
			s = fmaf(byte_less(q, 3, 32), xv.w, s);
			a = fmaf(d * (float)sc[2 * g], s, a);
		}
	}
	return a;
}

} /* namespace x4s */

#endif
