/*
 * gemv_q6k_tc.cuh - the decode step's Q6_K matrix-vector product (the LM
 * head's: 131,072 rows of 3,584) on the tensor cores, sm_80 and later;
 * gemv_quant.cu's x4k_gemv takes it before its CUDA-core forms.
 *
 * gemv_q6k_rows_kernel is held by its instructions, not by its bytes: the
 * 6-bit codes' decode and fp32 sums are ~157 us of the head's 161 at 512
 * tokens of context, where its 385 MB would take ~87 at the read ceiling
 * (bench/RESULTS.md 40).  Here the codes go to the tensor cores as the
 * IQ4_NL products' do (gemv_tc.cuh's tc8), with mma.sync m16n8k16: A = 16
 * rows x the 16 codes of one scale (u8, code + 32 as it is stored: low
 * nibble | high bits << 4, two LOP3s and a shift a word of four), B = x * s
 * as four signed 8-bit limbs (limb 3 - c in column c, tc8's limbs and
 * transpose), the MMA's C the group's -32 * (sum of its limbs) so that D is
 * the sum of (code - 32) * limb exactly; then acc += scale * D in int32 (|acc|
 * < 2^27 over a 256-value block), and after the block acc_f += d * acc in
 * fp32, limbs 3, 2 (lane t = 0) and 1, 0 (t = 1) of a row joined at the end
 * as tc8's are (core8::finish).  x is carried to 2^-30 of its warp slice's
 * largest |x|; every product and the block's sum are exact integers, so the
 * sums differ from the fp32 forms' bits but not in accuracy.
 *
 * Layout.  A block of k / 512 warps walks 16-row tiles t = blockIdx.x,
 * blockIdx.x + gridDim.x, ... (a grid the card holds at once), each tile's
 * 16 rows one contiguous span (16 * 210 * k / 256 bytes, a multiple of 16)
 * copied by the block with cp.async into one of NST stages, the next
 * tiles' copies in flight while one is summed; the first NST tiles' are
 * issued before the dependency wait (weights, pdl.cuh).  Warp w takes the
 * row's Q6_K blocks 2w (4-byte aligned in the span, k % 512 == 0) and 2w +
 * 1 (2 bytes past), whose words lane t reads as tc8 reads an odd IQ4_NL
 * block's: the aligned word at byte 4t - 2 of a 16-byte run, and for t = 0
 * run bytes 14, 15 with 0, 1 (q6t_word); B's values for that block take
 * the same rotation.  Each warp builds its B words and corrections once a
 * launch, a lane a scale group of 16 values (q6t_build_b), and the warps'
 * row sums are added in warp order through shared memory: the same bits
 * every run.
 *
 * sm_80 and later, under the products' switch (x4m::enabled, the trunk's
 * --gemm), where the shape allows (k % 512 == 0, at most GEMV_WARPS warps,
 * 16-byte aligned w and x): two tiles in flight a block (two blocks an SM
 * at the model's k) where the card's shared memory takes them, else one
 * (x4k_q6k_tc_set picks one for the tests).  Priced on the H200 against
 * the rows form: bench/RESULTS.md 48.
 */
#ifndef X4_GEMV_Q6K_TC_CUH
#define X4_GEMV_Q6K_TC_CUH

#include "quant_dev.cuh"
#include "mma_dev.cuh"
#include "pdl.cuh"
#include "gemv_tc.cuh"

namespace q6t {

constexpr int NST = 2; /* tiles in flight a block (the default form) */

/* Dynamic shared memory at k with nst tile stages: the stages, then a
 * warp's B words [32 groups][16 lanes], its corrections [32 groups][4
 * columns] (int), and the warps' row sums [16]. */
__host__ __device__ constexpr size_t smem_bytes(int k, int nst)
{
	return (size_t)nst * 16 * 210 * (k / 256) + (size_t)(k / 512) * (32 * 16 * 4 + 32 * 4 * 4 + 16 * 4);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* Lane t's word of the 16-byte run at byte `run` of a Q6_K block at p:
 * bytes 4t.. of an even block (4-byte aligned); of an odd one (2 bytes
 * past), run bytes 4t - 2 .. 4t + 1, and for t = 0 bytes 14, 15, 0, 1
 * (sel 0xffff, else 0). */
template <int ODD>
__device__ __forceinline__ uint32_t word(const uint8_t *p, int run, int t, uint32_t sel)
{
	if (!ODD)
		return *reinterpret_cast<const uint32_t *>(p + run + 4 * t);
	const uint32_t e = *reinterpret_cast<const uint32_t *>(p + run + 4 * t - 2);
	const uint32_t f = *reinterpret_cast<const uint32_t *>(p + run + 14);
	return (f & sel) | (e & ~sel);
}

/* The four codes (code + 32, u8) of quarter q of a half's l range from its
 * ql words a (l) and b (l + 32) and qh word h: q 0 a's low nibbles and h's
 * bits 0-1, q 1 b's low and bits 2-3, q 2 a's high and bits 4-5, q 3 b's
 * high and bits 6-7. */
__device__ __forceinline__ uint32_t codes(int q, uint32_t a, uint32_t b, uint32_t h)
{
	const uint32_t ql = q & 1 ? b : a, hs = q == 0 ? h << 4 : q == 1 ? h << 2 : q == 2 ? h : h >> 2;
	return ((q & 2 ? ql >> 4 : ql) & 0x0f0f0f0fu) | (hs & 0x30303030u);
}

/* Scale j (0..15) of a block whose scale bytes start `o` bytes into the
 * words w (o 0 or 2), sign-extended. */
__device__ __forceinline__ int scale(const uint32_t (&w)[5], int o, int j)
{
	return (int)(int8_t)(w[(o + j) >> 2] >> (8 * ((o + j) & 3)));
}

/* The warp's B words and corrections (its slice x, 512 values) into Bw (the
 * warp's 32 x 16 words) and Cw (32 x 4): lane l takes group (l >> 4, l &
 * 15) of the warp's two blocks, its 16 values rotated by 2 in the odd block
 * (word's order).  Returns 1/s. */
__device__ __forceinline__ float build_b(const float *__restrict__ xs, uint32_t *Bw, int *Cw, int lane)
{
	const int ob = lane >> 4;
	const float *xg = xs + 16 * lane;
	float v[16];
#pragma unroll
	for (int j = 0; j < 8; j++) {
		const float2 p = *reinterpret_cast<const float2 *>(xg + ((2 * j - 2 * ob) & 15));
		v[2 * j] = p.x, v[2 * j + 1] = p.y;
	}
	float m = 0.f;
#pragma unroll
	for (int i = 0; i < 16; i++)
		m = fmaxf(m, fabsf(v[i]));
	const int e = tcv::b8<1>::scale_exp(x4c::warp_max(m));
	const float s = x4m::pow2f(e);
	uint32_t *bw = Bw + lane * 16;
	int sum[4] = { 0, 0, 0, 0 };
#pragma unroll
	for (int t = 0; t < 4; t++) {
		uint32_t l[4];
		tcv::transpose4(tcv::limbs(tcv::rint_i(v[4 * t] * s)), tcv::limbs(tcv::rint_i(v[4 * t + 1] * s)),
				tcv::limbs(tcv::rint_i(v[4 * t + 2] * s)), tcv::limbs(tcv::rint_i(v[4 * t + 3] * s)), l);
#pragma unroll
		for (int c = 0; c < 4; c++) {
			bw[4 * c + t] = l[3 - c];
			sum[c] = __dp4a((int)l[3 - c], 0x01010101, sum[c]);
		}
	}
	*reinterpret_cast<int4 *>(Cw + lane * 4) = make_int4(-32 * sum[0], -32 * sum[1], -32 * sum[2], -32 * sum[3]);
	__syncwarp();
	return x4m::pow2f(-e);
}

/* One Q6_K block (ob: the warp's even 0 or odd 1) of rows g (at pg) and g
 * + 8 (ph) into acc (rows g, g + 8: columns 2t, 2t + 1).  Lanes 16-31 (B's
 * columns 4-7) and t = 2, 3 (D's) repeat columns 0-3: their sums are never
 * read (core8::finish takes t = 1's into t = 0's). */
template <int OB>
__device__ __forceinline__ void block(const uint8_t *pg, const uint8_t *ph, int t, uint32_t sel,
				      const uint32_t *bwr, const int *cwr, float (&acc)[4])
{
	/* the scales (and, odd, d) from the aligned words at byte 192 - 2 OB */
	uint32_t swg[5], swh[5];
#pragma unroll
	for (int j = 0; j < 4 + OB; j++) {
		swg[j] = *reinterpret_cast<const uint32_t *>(pg + 192 - 2 * OB + 4 * j);
		swh[j] = *reinterpret_cast<const uint32_t *>(ph + 192 - 2 * OB + 4 * j);
	}
	const uint32_t dwg = OB ? swg[4] >> 16 : *reinterpret_cast<const uint32_t *>(pg + 208) & 0xffffu;
	const uint32_t dwh = OB ? swh[4] >> 16 : *reinterpret_cast<const uint32_t *>(ph + 208) & 0xffffu;
	int ig[2] = { 0, 0 }, ih[2] = { 0, 0 };
#pragma unroll
	for (int hh = 0; hh < 2; hh++)
#pragma unroll
		for (int sub = 0; sub < 2; sub++) {
			const int ra = 64 * hh + 16 * sub, rq = 128 + 32 * hh + 16 * sub;
			const uint32_t ag = word<OB>(pg, ra, t, sel), bg = word<OB>(pg, ra + 32, t, sel);
			const uint32_t hg = word<OB>(pg, rq, t, sel), ah = word<OB>(ph, ra, t, sel);
			const uint32_t bh = word<OB>(ph, ra + 32, t, sel), hq = word<OB>(ph, rq, t, sel);
#pragma unroll
			for (int q = 0; q < 4; q++) {
				const int G = 8 * hh + 2 * q + sub, gi = 16 * OB + G;
				const int2 c2 = *reinterpret_cast<const int2 *>(cwr + 4 * gi);
				const int c[4] = { c2.x, c2.y, c2.x, c2.y };
				int d[4];
				x4m::mma16816_u8s8(d, codes(q, ag, bg, hg), codes(q, ah, bh, hq), bwr[16 * gi], c);
				const int sg = scale(swg, 2 * OB, G), sh = scale(swh, 2 * OB, G);
				ig[0] += sg * d[0], ig[1] += sg * d[1];
				ih[0] += sh * d[2], ih[1] += sh * d[3];
			}
		}
	const float dg = __half2float(__ushort_as_half((unsigned short)dwg));
	const float dh = __half2float(__ushort_as_half((unsigned short)dwh));
	acc[0] = fmaf(dg, (float)ig[0], acc[0]), acc[1] = fmaf(dg, (float)ig[1], acc[1]);
	acc[2] = fmaf(dh, (float)ih[0], acc[2]), acc[3] = fmaf(dh, (float)ih[1], acc[3]);
}
#endif /* __CUDA_ARCH__ >= 800 */

template <int NS>
__global__ void __launch_bounds__(x4d::GEMV_WARPS * 32, NS == 1 ? 3 : 2)
gemv_q6k_tc_kernel(const uint8_t *__restrict__ w, int n, int k, const float *__restrict__ x,
		   float *__restrict__ y)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	extern __shared__ __align__(16) uint8_t q6t_smem[];
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
	const int rb = 210 * (k >> 8), tb = 16 * rb, ntile = (n + 15) >> 4;
	uint32_t *const Bs = reinterpret_cast<uint32_t *>(q6t_smem + (size_t)NS * tb);
	int *const cs = reinterpret_cast<int *>(Bs + nw * 32 * 16);
	float *const red = reinterpret_cast<float *>(cs + nw * 32 * 4);

	/* tile i of this block into stage i % NS, then a commit (an empty
	 * group past the last tile: the waits count NS - 1 behind) */
	auto issue = [&](int i) {
		const int tile = blockIdx.x + i * gridDim.x;
		if (tile < ntile) {
			const int bytes = min(16, n - 16 * tile) * rb;
			const uint8_t *src = w + (size_t)tile * tb;
			const uint32_t dst = x4m::smem_u32(q6t_smem + (size_t)(i % NS) * tb);
			for (int c = 16 * tid; c < bytes; c += 16 * blockDim.x)
				x4m::cp_async16(dst + c, src + c, min(16, bytes - c));
		}
		x4m::cp_async_commit();
	};
#pragma unroll
	for (int i = 0; i < NS; i++)
		issue(i);
	x4p::trigger();
	x4p::wait();
	const float sinv = build_b(x + 512 * warp, Bs + warp * 32 * 16, cs + warp * 32 * 4, lane);

	const int g = lane >> 2, t = lane & 3;
	const uint32_t sel = t ? 0u : 0xffffu;
	const uint32_t *bwr = Bs + warp * 32 * 16 + (lane & 15);
	const int *cwr = cs + warp * 32 * 4 + 2 * (t & 1);
	for (int i = 0;; i++) {
		const int tile = blockIdx.x + i * gridDim.x;
		if (tile >= ntile)
			break;
		x4m::cp_async_wait<NS - 1>();
		__syncthreads(); /* tile i landed, every thread's copies */
		const uint8_t *pg = q6t_smem + (size_t)(i % NS) * tb + g * rb + 2 * warp * 210;
		float acc[4] = { 0.f, 0.f, 0.f, 0.f };
		block<0>(pg, pg + 8 * rb, t, sel, bwr, cwr, acc);
		block<1>(pg + 210, pg + 8 * rb + 210, t, sel, bwr, cwr, acc);
		const float rg = tcv::core8::finish(fmaf(256.f, acc[0], acc[1]), sinv);
		const float rh = tcv::core8::finish(fmaf(256.f, acc[2], acc[3]), sinv);
		if (t == 0)
			red[warp * 16 + g] = rg, red[warp * 16 + g + 8] = rh;
		__syncthreads(); /* the stage is free, the warps' sums are in */
		if (tid < 16 && 16 * tile + tid < n) {
			float sum = red[tid];
			for (int q = 1; q < nw; q++)
				sum += red[q * 16 + tid];
			y[16 * tile + tid] = sum;
		}
		issue(i + NS);
	}
	x4m::cp_async_wait<0>();
#endif
}

/* gemv_q6k_tc_kernel<NS> for a shape it takes on a card that takes it
 * (a grid of as many blocks as the card holds at once, at most a tile
 * each); false sends the caller to the other forms.  The grid's bound is
 * read from the runtime once a device and k (held: the card's SMs times
 * the blocks an SM takes of the kernel at k / 512 warps). */
template <int NS>
static bool gemv(const uint8_t *w, int n, int k, const float *x, float *y, cudaStream_t s)
{
	static std::atomic<size_t> set[64];
	static std::atomic<int> held[64][x4d::GEMV_WARPS + 1]; /* 0: not read yet */
	const size_t smem = smem_bytes(k, NS);
	if (k % 512 || k / 512 > x4d::GEMV_WARPS || ((uintptr_t)w & 15) || ((uintptr_t)x & 15) ||
	    !tcv::smem_ready(gemv_q6k_tc_kernel<NS>, smem, set))
		return false;
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
		(void)cudaGetLastError();
		return false;
	}
	int most = held[dev][k / 512].load();
	if (!most) {
		int sms = 0, bps = 0;
		if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
		    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, gemv_q6k_tc_kernel<NS>, k / 512 * 32,
								  smem) != cudaSuccess ||
		    bps < 1) {
			(void)cudaGetLastError();
			return false;
		}
		most = bps * sms;
		held[dev][k / 512].store(most);
	}
	const int tiles = (n + 15) / 16;
	const unsigned blocks = (unsigned)min(tiles, most);
	x4p::launch(gemv_q6k_tc_kernel<NS>, dim3(blocks), dim3(k / 512 * 32), smem, s, w, n, k, x, y);
	return true;
}

} /* namespace q6t */

#endif
