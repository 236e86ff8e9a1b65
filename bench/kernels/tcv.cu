/*
 * tcv.cu - the kernel lab for the batch-1 IQ4_NL products on the tensor
 * cores (kernels/gemv_tc.cuh: tc16, fp16 MMAs over x split into hi + lo; tc8, int8 MMAs
 * over x as four 8-bit limbs) against the library's CUDA-core kernels, at
 * the released model's decode shapes (lab_model):
 *   moe_gu        the routed experts' gate and up with the SwiGLU product,
 *                 one token's 4 routes, 3584 -> 1024 each (16.5 MB)
 *   moe_down_sum  their downs, 1024 -> 3584, with the shared expert's down
 *                 and the weighted top-4 sum (10.3 MB)
 *   moe           both: x4k_moe_experts_sum against tcv's two launches
 *   gemv          1024 x 3584 and 9216 x 3584 (x4k_gemv)
 *   gemv_swiglu   2 x 1024 x 3584 and 2 x 9216 x 3584 (x4k_gemv_swiglu)
 * Rows: old = the library's register core (its products' switch off,
 * x4k_gemm_mma_set(0); on, the library takes tc8_k1); tc16 and tc8 = gemv_tc.cuh's two cores (cp.async
 * staging, 16 rows a block, split-K over the block's warps, 512 values of k
 * a warp), tc16_k1 and tc8_k1 the same with 256 a warp (twice the warps).  The
 * library's two MoE kernels have no entry of their own: x4k_moe_experts_sum
 * is captured into a graph once and each kernel node replayed as a graph of
 * one node; tcv's MoE kernels are timed the same way, so that both go
 * through the same launch path.  Whole calls are timed as launched.  L2
 * flushed before every repetition (lab.h).  Bytes: the weights read, x and
 * the outputs.
 *
 * Checks, on stderr before each shape's rows, for each variant and two
 * inputs (x uniform in [-1, 1]; "wide": magnitudes spread over 2^-12 ..
 * 2^4): max |new - library| / max |library|, and max |new - ref| / max
 * |ref| with ref the float64 product of the same bytes on the host
 * (x4b_decode_row), PASS within 2e-6 of max |ref| (the library's own
 * distance from ref beside it); and whether a second run and the timing
 * runs left the same bits.  moe_down_sum is checked on the library's h, so
 * that both read the same input.  Before any of it, the host emulates one
 * warp's fragments (the kernels' own lookup, word and B-build code, the
 * MMAs by the PTX ISA's fragment layouts) against float64: `emu` runs only
 * that, with no GPU.  The last line is "# tcv: N passed, N failed"; the
 * exit status is 1 on any failure.  Below sm_80 the tensor-core rows are
 * skipped, said so, and the program exits 0.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/tcv [old|new|all|emu]
 */
#include <math.h>

#include "lab.h"
#include "x4_kern.h"
#include "gemv_tc.cuh"

static int n_pass, n_fail;

static void tally(bool ok) { ok ? n_pass++ : n_fail++; }

/* ---------------- host: data and the float64 reference ---------------- */

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* x uniform in [-1, 1] (wide false) or with magnitudes 2^-12 .. 2^4 */
static std::vector<float> host_x(size_t n, uint64_t seed, bool wide)
{
	std::vector<float> v(n);
	for (size_t i = 0; i < n; i++) {
		const uint64_t z = mix64(seed * 0x100000001b3ull + i);
		const float u = (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
		v[i] = wide ? ldexpf(u, (int)((z >> 8) % 17) - 12) : u;
	}
	return v;
}

/* IQ4_NL rows on the host as lab_blocks makes them on the device */
static void host_rows(uint8_t *w, size_t n_blocks, uint64_t seed)
{
	for (size_t i = 0; i < n_blocks * 18; i++)
		w[i] = (uint8_t)mix64(seed + 0x51ed27ull * i);
	for (size_t b = 0; b < n_blocks; b++) {
		const unsigned v = w[18 * b] | w[18 * b + 1] << 8;
		const unsigned h = (v & 0x83ffu) | (((v >> 10) & 3u) + 10u) << 10;
		w[18 * b] = (uint8_t)h, w[18 * b + 1] = (uint8_t)(h >> 8);
	}
}

/* y[r] = row r (k values, IQ4_NL at w) . x, in float64 */
static void ref_dot(const uint8_t *w, int n, int k, const float *x, double *y)
{
	const size_t rb = x4_type_bytes(X4_T_IQ4_NL, (uint64_t)k);
	std::vector<float> row(k);
	for (int r = 0; r < n; r++) {
		x4b_decode_row(X4_T_IQ4_NL, w + r * rb, row.data(), (uint64_t)k);
		double a = 0;
		for (int c = 0; c < k; c++)
			a += (double)row[c] * (double)x[c];
		y[r] = a;
	}
}

static double silu64(double g) { return g / (1.0 + exp(-g)); }

/* The verdict on one output: against the library and the float64 ref. */
static void verdict(const char *shape, const char *variant, const char *input, const float *got,
		    const float *lib, const double *ref, size_t n, bool same)
{
	double mref = 0, mlib = 0, dlib = 0, dref = 0, dlr = 0;
	bool finite = true;
	for (size_t i = 0; i < n; i++) {
		finite = finite && std::isfinite(got[i]);
		mref = fmax(mref, fabs(ref[i]));
		mlib = fmax(mlib, fabs((double)lib[i]));
		dlib = fmax(dlib, fabs((double)got[i] - lib[i]));
		dref = fmax(dref, fabs((double)got[i] - ref[i]));
		dlr = fmax(dlr, fabs((double)lib[i] - ref[i]));
	}
	const double rl = mlib > 0 ? dlib / mlib : dlib, rr = mref > 0 ? dref / mref : dref;
	const bool ok = finite && same && rr <= 2e-6;
	tally(ok);
	fprintf(stderr,
		"# tcv check %-26s %-5s x %-7s: vs library %.2e, vs float64 %.2e (library vs float64 %.2e; "
		"tolerance 2e-6 of max|ref| %.4g)%s; same bits twice and after timing: %s  %s\n",
		shape, variant, input, rl, rr, mref > 0 ? dlr / mref : dlr, mref, finite ? "" : ", NOT FINITE",
		same ? "yes" : "NO", ok ? "PASS" : "FAIL");
}

static std::vector<float> d2h(const float *p, size_t n)
{
	std::vector<float> v(n);
	LAB_CK(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost));
	return v;
}

static bool same_bits(const std::vector<float> &a, const std::vector<float> &b)
{
	return a.size() == b.size() && !memcmp(a.data(), b.data(), a.size() * 4);
}

/* ---------------- host: one warp's fragments, emulated ----------------
 * Stage 16 rows as stage() lays them, build B with the cores' own load and
 * store (the max over the 32 lanes for warp_max), then, block by block, form
 * every lane's A and B registers with row_word, a16 / a8 and the B words,
 * assemble the MMA's operands from the 32 lanes by the PTX ISA's fragment
 * layouts (m16n8k16 f16: a_r = A[g + 8 (r & 1)][2t + 8 (r >> 1) + {0, 1}],
 * b_r = B[2t + 8r + {0, 1}][g]; m16n8k32 s8: a0..a3 = A[g][4t + i],
 * A[g + 8][4t + i], A[g][16 + 4t + i], A[g + 8][16 + 4t + i], b0, b1 =
 * B[4t + i][g], B[16 + 4t + i][g]; c_r = C[g + 8 (r >> 1)][2t + (r & 1)]),
 * multiply exactly and run the cores' epilogue (epi16, epi8, join8) in
 * fp32.  A wrong k permutation, lane map or limb gives errors of order 1. */

static double h16v(uint32_t w, int hi) { return (double)x4b_f16((uint16_t)(hi ? w >> 16 : w & 0xffffu)); }

static void emu_mma16(const uint32_t (*a)[4], const uint32_t (*b)[2], double (*c)[4])
{
	double A[16][16], B[16][8];
	for (int l = 0; l < 32; l++) {
		const int g = l >> 2, t = l & 3;
		for (int e = 0; e < 2; e++) {
			A[g][2 * t + e] = h16v(a[l][0], e), A[g + 8][2 * t + e] = h16v(a[l][1], e);
			A[g][2 * t + 8 + e] = h16v(a[l][2], e), A[g + 8][2 * t + 8 + e] = h16v(a[l][3], e);
			B[2 * t + e][g] = h16v(b[l][0], e), B[2 * t + 8 + e][g] = h16v(b[l][1], e);
		}
	}
	for (int l = 0; l < 32; l++)
		for (int r = 0; r < 4; r++) {
			const int i = (l >> 2) + 8 * (r >> 1), j = 2 * (l & 3) + (r & 1);
			double s = 0;
			for (int q = 0; q < 16; q++)
				s += A[i][q] * B[q][j];
			c[l][r] += s;
		}
}

static void emu_mma8(const uint32_t (*a)[4], const uint32_t (*b)[2], int64_t (*c)[4])
{
	int A[16][32], B[32][8];
	for (int l = 0; l < 32; l++) {
		const int g = l >> 2, t = l & 3;
		for (int i = 0; i < 4; i++) {
			A[g][4 * t + i] = (int8_t)(a[l][0] >> 8 * i), A[g + 8][4 * t + i] = (int8_t)(a[l][1] >> 8 * i);
			A[g][16 + 4 * t + i] = (int8_t)(a[l][2] >> 8 * i);
			A[g + 8][16 + 4 * t + i] = (int8_t)(a[l][3] >> 8 * i);
			B[4 * t + i][g] = (int8_t)(b[l][0] >> 8 * i), B[16 + 4 * t + i][g] = (int8_t)(b[l][1] >> 8 * i);
		}
	}
	for (int l = 0; l < 32; l++)
		for (int r = 0; r < 4; r++) {
			const int i = (l >> 2) + 8 * (r >> 1), j = 2 * (l & 3) + (r & 1);
			int64_t s = 0;
			for (int q = 0; q < 32; q++)
				s += (int64_t)A[i][q] * B[q][j];
			c[l][r] += s;
		}
}

/* out[16]: one warp's sums of 16 rows (rb bytes apart) over NG groups */
template <int NG, bool C16>
static void emu_warp(const uint8_t *rows, size_t rb, const float *x, float *out)
{
	using namespace tcv;
	using S = smem_words<1, NG>;
	std::vector<uint32_t> buf(S::WSL), B(S::BSL, 0u);
	for (int s = 0; s < NG; s++)
		for (int r = 0; r < tcv::ROWS; r++)
			memcpy(&buf[wrow(1, s, 0, r)], rows + r * rb + s * GROUP_BYTES, GROUP_BYTES);
	float inv;
	if (C16) {
		static b16<NG> bl[32];
		float m = 0.f;
		for (int l = 0; l < 32; l++) {
			bl[l].load(x, l);
			m = fmaxf(m, bl[l].max());
		}
		const int e = b16<NG>::scale_exp(m);
		for (int l = 0; l < 32; l++)
			bl[l].store(B.data(), l, pow2(e));
		inv = pow2(-e);
	} else {
		static b8<NG> bl[32];
		float m = 0.f;
		for (int l = 0; l < 32; l++) {
			bl[l].load(x, l);
			m = fmaxf(m, bl[l].max());
		}
		const int e = b8<NG>::scale_exp(m);
		for (int l = 0; l < 32; l++)
			bl[l].store(B.data(), l, pow2(e));
		inv = pow2(-e);
	}
	const iq4_tab k = iq4_tab_of(C16 ? 0x8080808080808080ull : 0, 0u);
	float acc[32][2] = {};
	for (int s = 0; s < NG; s++)
		for (int p = 0; p < GROUP_QB / 2; p++)
			for (int odd = 0; odd < 2; odd++) {
				const int qb = s * GROUP_QB + 2 * p + odd;
				uint32_t w[32][2], db[32][2];
				for (int l = 0; l < 32; l++)
					for (int h = 0; h < 2; h++)
						row_word(&buf[wrow(1, s, 0, (l >> 2) + 8 * h)], p, odd, l & 3, !C16, w[l][h],
							 db[l][h]);
				if (C16) {
					uint32_t a0[32][4], a1[32][4], b0[32][2] = {}, b1[32][2] = {};
					double c[32][4] = {};
					for (int l = 0; l < 32; l++) {
						a16(w[l][0], w[l][1], k, 0x64646464u, a0[l], a1[l]);
						if (l < 8) {
							const uint32_t *q = &B[qb * QB_BW + l * 4];
							b0[l][0] = q[0], b0[l][1] = q[1], b1[l][0] = q[2], b1[l][1] = q[3];
						}
					}
					emu_mma16(a0, b0, c);
					emu_mma16(a1, b1, c);
					for (int l = 0; l < 32; l++)
						for (int h = 0; h < 2; h++)
							acc[l][h] = epi16(x4b_f16((uint16_t)db[l][h]), (float)c[l][2 * h],
									  (float)c[l][2 * h + 1], acc[l][h]);
				} else {
					uint32_t a[32][4], b[32][2] = {};
					int64_t c[32][4] = {};
					for (int l = 0; l < 32; l++) {
						a8(w[l][0], w[l][1], k, a[l]);
						if (l < 16)
							b[l][0] = B[qb * QB_BW + l * 2], b[l][1] = B[qb * QB_BW + l * 2 + 1];
					}
					emu_mma8(a, b, c);
					for (int l = 0; l < 32; l++)
						for (int h = 0; h < 2; h++)
							acc[l][h] = epi8(x4b_f16((uint16_t)db[l][h]), (int)c[l][2 * h],
									 (int)c[l][2 * h + 1], acc[l][h]);
				}
			}
	for (int g = 0; g < 8; g++)
		for (int h = 0; h < 2; h++)
			out[g + 8 * h] = C16 ? acc[4 * g][h] * inv : join8(acc[4 * g][h], acc[4 * g + 1][h]) * inv;
}

template <int NG>
static void emu_case(uint64_t seed, bool wide)
{
	const int k = NG * tcv::GROUP_QB * 32;
	const size_t rb = x4_type_bytes(X4_T_IQ4_NL, (uint64_t)k);
	std::vector<uint8_t> w(16 * rb);
	host_rows(w.data(), 16 * (size_t)(k / 32), seed);
	const std::vector<float> x = host_x((size_t)k, seed + 1, wide);
	double ref[16];
	ref_dot(w.data(), 16, k, x.data(), ref);
	for (int c16 = 1; c16 >= 0; c16--) {
		float out[16];
		if (c16)
			emu_warp<NG, true>(w.data(), rb, x.data(), out);
		else
			emu_warp<NG, false>(w.data(), rb, x.data(), out);
		double m = 0, dm = 0;
		for (int r = 0; r < 16; r++) {
			m = fmax(m, fabs(ref[r]));
			dm = fmax(dm, fabs(out[r] - ref[r]));
		}
		const bool ok = dm <= 2e-6 * m && std::isfinite(dm);
		tally(ok);
		fprintf(stderr, "# tcv emu   %s one warp, 16 rows x %d, x %-7s: vs float64 %.2e of max|ref| %.4g  %s\n",
			c16 ? "tc16" : "tc8 ", k, wide ? "wide" : "uniform", m > 0 ? dm / m : dm, m, ok ? "PASS" : "FAIL");
	}
}

static void emu_all(void)
{
	for (int wide = 0; wide < 2; wide++) {
		emu_case<1>(101 + wide, wide);
		emu_case<2>(201 + wide, wide);
	}
}

/* ---------------- device: timing helpers ---------------- */

/* Each kernel a call launches, as a graph of one node, in launch order:
 * the call is captured once and its kernel nodes copied out. */
template <typename F>
static std::vector<cudaGraphExec_t> kernels_of(cudaStream_t s, F &&call)
{
	cudaGraph_t g;
	LAB_CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed)); /* the launchers query the device */
	call();
	LAB_CK(cudaStreamEndCapture(s, &g));
	size_t n = 0;
	LAB_CK(cudaGraphGetNodes(g, nullptr, &n));
	std::vector<cudaGraphNode_t> nodes(n), order;
	LAB_CK(cudaGraphGetNodes(g, nodes.data(), &n));
	/* a capture on one stream is a chain: order by the number of
	 * predecessors along it */
	auto deps = [](cudaGraphNode_t node) {
		size_t c = 0;
#if CUDART_VERSION >= 13000
		LAB_CK(cudaGraphNodeGetDependencies(node, nullptr, nullptr, &c));
#else
		LAB_CK(cudaGraphNodeGetDependencies(node, nullptr, &c));
#endif
		std::vector<cudaGraphNode_t> d(c);
#if CUDART_VERSION >= 13000
		if (c)
			LAB_CK(cudaGraphNodeGetDependencies(node, d.data(), nullptr, &c));
#else
		if (c)
			LAB_CK(cudaGraphNodeGetDependencies(node, d.data(), &c));
#endif
		return d;
	};
	std::vector<int> depth(n, -1);
	for (size_t done = 0; done < n;)
		for (size_t i = 0; i < n; i++) {
			if (depth[i] >= 0)
				continue;
			int dd = 0;
			bool ready = true;
			for (cudaGraphNode_t p : deps(nodes[i])) {
				const size_t j = std::find(nodes.begin(), nodes.end(), p) - nodes.begin();
				if (depth[j] < 0)
					ready = false;
				else
					dd = std::max(dd, depth[j] + 1);
			}
			if (ready)
				depth[i] = dd, done++;
		}
	std::vector<size_t> idx(n);
	for (size_t i = 0; i < n; i++)
		idx[i] = i;
	std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return depth[a] < depth[b]; });
	std::vector<cudaGraphExec_t> out;
	for (size_t i : idx) {
		cudaGraphNodeType t;
		LAB_CK(cudaGraphNodeGetType(nodes[i], &t));
		if (t != cudaGraphNodeTypeKernel)
			continue;
		cudaKernelNodeParams p;
		LAB_CK(cudaGraphKernelNodeGetParams(nodes[i], &p));
		cudaGraph_t one;
		cudaGraphNode_t kn;
		cudaGraphExec_t x;
		LAB_CK(cudaGraphCreate(&one, 0));
		LAB_CK(cudaGraphAddKernelNode(&kn, one, nullptr, 0, &p));
		LAB_CK(cudaGraphInstantiate(&x, one, 0));
		LAB_CK(cudaGraphDestroy(one));
		out.push_back(x);
	}
	LAB_CK(cudaGraphDestroy(g));
	return out;
}

static double time_graph(lab *L, cudaGraphExec_t x)
{
	return lab_time_us(L, [&] { LAB_CK(cudaGraphLaunch(x, L->s)); });
}

static void *upload(const void *h, size_t n)
{
	void *p = lab_alloc(n);
	LAB_CK(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice));
	return p;
}

/* ---------------- the routed experts ---------------- */

struct cores {
	const char *name;
	int (*gu)(const x4k_moe_routes *, const float *, int, int, const void *, const void *, float *,
		  cudaStream_t, x4_err *);
	int (*down)(const x4k_moe_routes *, int, int, const void *, const float *, const void *, const float *,
		    float *, cudaStream_t, x4_err *);
	int (*gemv)(const void *, int, int, const float *, float *, cudaStream_t, x4_err *);
	int (*swiglu)(const void *, const void *, int, int, const float *, float *, cudaStream_t, x4_err *);
};

/* The launchers as the lab's entries: X4_EINVAL where one refuses (the
 * device, the switch or the shape).  CM: the weights' copy for the launch
 * (x4k_tc_copy_set: 1 the block's, the library's default; 0 each warp's
 * own slice), set back after. */
struct copy_mode {
	int was;
	explicit copy_mode(int cm) : was(x4k_tc_copy_get()) { x4k_tc_copy_set(cm); }
	~copy_mode() { x4k_tc_copy_set(was); }
};
template <class C, int NG, int CM = 1>
static int lab_gu(const x4k_moe_routes *r, const float *x, int d, int f, const void *g, const void *u, float *h,
		  cudaStream_t s, x4_err *e)
{
	const copy_mode cm(CM);
	return tcv::moe_gu<C, NG>(r, nullptr, x, d, f, g, u, h, nullptr, nullptr, nullptr, s) ? x4_cuda_launched("tcv moe_gu", e)
							  : x4_err_set(e, X4_EINVAL, "tcv moe_gu: refused");
}
template <class C, int NG, int CM = 1>
static int lab_down(const x4k_moe_routes *r, int d, int f, const void *w, const float *h, const void *sw,
		    const float *sh, float *y, cudaStream_t s, x4_err *e)
{
	const copy_mode cm(CM);
	return tcv::moe_down_sum<C, NG>(r, nullptr, d, f, w, h, sw, sh, y, s) ? x4_cuda_launched("tcv moe_down_sum", e)
								     : x4_err_set(e, X4_EINVAL, "tcv moe_down_sum: refused");
}
template <class C, int NG, int CM = 1>
static int lab_gemv(const void *w, int n, int k, const float *x, float *y, cudaStream_t s, x4_err *e)
{
	const copy_mode cm(CM);
	return tcv::gemv<C, NG>(w, n, k, x, y, s) ? x4_cuda_launched("tcv gemv", e)
						  : x4_err_set(e, X4_EINVAL, "tcv gemv: refused");
}
template <class C, int NG, int CM = 1>
static int lab_swiglu(const void *wg, const void *wu, int n, int k, const float *x, float *h, cudaStream_t s,
		      x4_err *e)
{
	const copy_mode cm(CM);
	return tcv::gemv_swiglu<C, NG>(wg, wu, n, k, x, h, s) ? x4_cuda_launched("tcv gemv_swiglu", e)
							      : x4_err_set(e, X4_EINVAL, "tcv gemv_swiglu: refused");
}

/* tc16, tc8: a warp takes 2 groups (512 values) of k; _k1: 1 group, twice
 * the warps a block; _wc: each warp copying its own slice of the weights */
#define TCV_CORE(name, C, NG, CM)                                                                               \
	{ name, lab_gu<tcv::C, NG, CM>, lab_down<tcv::C, NG, CM>, lab_gemv<tcv::C, NG, CM>,                         \
	  lab_swiglu<tcv::C, NG, CM> }
static const cores CORES[] = {
	TCV_CORE("tc16", core16, 2, 1),
	TCV_CORE("tc8", core8, 2, 1),
	TCV_CORE("tc16_k1", core16, 1, 1),
	TCV_CORE("tc8_k1", core8, 1, 1),
	TCV_CORE("tc8_k1_wc", core8, 1, 0),
};

static void moe_shapes(lab *L)
{
	const x4_config c = lab_model();
	const int d = c.n_embd, f = c.n_ff_exp, E = c.n_expert, K = c.n_expert_used;
	if (K > tcv::SUM_NM - 1) {
		fprintf(stderr, "# tcv: %d routes a token; the fused down takes at most %d: moe skipped\n", K,
			tcv::SUM_NM - 1);
		return;
	}
	const size_t rbd = x4_type_bytes(X4_T_IQ4_NL, (uint64_t)d), rbf = x4_type_bytes(X4_T_IQ4_NL, (uint64_t)f);
	uint8_t *gate = (uint8_t *)lab_blocks(X4_T_IQ4_NL, (size_t)E * f, d, 41);
	uint8_t *up = (uint8_t *)lab_blocks(X4_T_IQ4_NL, (size_t)E * f, d, 42);
	uint8_t *down = (uint8_t *)lab_blocks(X4_T_IQ4_NL, (size_t)E * d, f, 43);
	uint8_t *sdown = (uint8_t *)lab_blocks(X4_T_IQ4_NL, (size_t)1 * d, f, 44);
	const int32_t sel[4] = { 5, 17, 40, 63 };
	const float wts[4] = { 0.4f, 0.3f, 0.2f, 0.1f };
	lab_routes m;
	lab_routes_make(&m, 1, K, E, x4k_moe_tile(1, K), sel, wts, L->s);
	const x4k_moe_routes *r = &m.r;
	/* the table as the kernels read it: tile i's expert and weight */
	int nt = 0;
	LAB_CK(cudaMemcpy(&nt, r->n_tiles, 4, cudaMemcpyDeviceToHost));
	std::vector<int32_t> tex(nt), tst(nt), rt((size_t)K);
	LAB_CK(cudaMemcpy(tex.data(), r->tile_expert, nt * 4, cudaMemcpyDeviceToHost));
	LAB_CK(cudaMemcpy(tst.data(), r->tile_start, nt * 4, cudaMemcpyDeviceToHost));
	LAB_CK(cudaMemcpy(rt.data(), r->route, K * 4, cudaMemcpyDeviceToHost));
	std::vector<uint8_t> hg((size_t)nt * f * rbd), hu((size_t)nt * f * rbd), hd((size_t)nt * d * rbf),
		hs((size_t)d * rbf);
	for (int i = 0; i < nt; i++) {
		LAB_CK(cudaMemcpy(&hg[(size_t)i * f * rbd], gate + (size_t)tex[i] * f * rbd, f * rbd,
				  cudaMemcpyDeviceToHost));
		LAB_CK(cudaMemcpy(&hu[(size_t)i * f * rbd], up + (size_t)tex[i] * f * rbd, f * rbd,
				  cudaMemcpyDeviceToHost));
		LAB_CK(cudaMemcpy(&hd[(size_t)i * d * rbf], down + (size_t)tex[i] * d * rbf, d * rbf,
				  cudaMemcpyDeviceToHost));
	}
	LAB_CK(cudaMemcpy(hs.data(), sdown, d * rbf, cudaMemcpyDeviceToHost));
	const size_t wsb = x4k_moe_experts_workspace_bytes(1, K, d, f);
	void *ws = lab_alloc(wsb);
	float *hlib = (float *)ws; /* x4k_moe_experts' h leads its workspace: [K][f] */
	float *ylib = (float *)lab_alloc((size_t)d * 4), *hnew = (float *)lab_alloc((size_t)K * f * 4);
	float *ynew = (float *)lab_alloc((size_t)d * 4);
	x4_err e = { 0 };
	const size_t nh = (size_t)K * f;
	for (int wide = 0; wide < 2; wide++) {
		const std::vector<float> xh = host_x((size_t)d, 61, wide), shh = host_x((size_t)f, 62, wide);
		float *x = (float *)upload(xh.data(), (size_t)d * 4), *sh = (float *)upload(shh.data(), (size_t)f * 4);
		const char *in = wide ? "wide" : "uniform";
		auto lib = [&] { /* the register core: the products' switch off */
			x4k_gemm_mma_set(0);
			LAB_X4(x4k_moe_experts_sum(r, nullptr, X4_T_IQ4_NL, x, d, f, gate, up, down, X4_T_IQ4_NL, nullptr, nullptr, sdown, sh, ws,
						   wsb, ylib, L->s, &e), e);
			x4k_gemm_mma_set(1);
		};
		lib();
		LAB_CK(cudaStreamSynchronize(L->s));
		const std::vector<float> hl = d2h(hlib, nh), yl = d2h(ylib, (size_t)d);
		/* float64: h from x; y from that h (moe) and from the library's h (moe_down_sum) */
		std::vector<double> hr(nh), yr((size_t)d, 0.0), yrl((size_t)d, 0.0), g((size_t)f), u((size_t)f),
			t((size_t)d);
		std::vector<float> hrf(nh);
		for (int i = 0; i < nt; i++) {
			ref_dot(&hg[(size_t)i * f * rbd], f, d, xh.data(), g.data());
			ref_dot(&hu[(size_t)i * f * rbd], f, d, xh.data(), u.data());
			for (int q = 0; q < f; q++)
				hr[(size_t)tst[i] * f + q] = silu64(g[q]) * u[q];
		}
		for (int i = 0; i < nt; i++) {
			const double wt = wts[rt[tst[i]] % K];
			for (int q = 0; q < f; q++)
				hrf[q] = (float)hr[(size_t)tst[i] * f + q];
			std::vector<double> t2((size_t)d);
			ref_dot(&hd[(size_t)i * d * rbf], d, f, hrf.data(), t.data()); /* h rounded to fp32 as stored */
			ref_dot(&hd[(size_t)i * d * rbf], d, f, &hl[(size_t)tst[i] * f], t2.data());
			for (int q = 0; q < d; q++)
				yr[q] += wt * t[q], yrl[q] += wt * t2[q];
		}
		ref_dot(hs.data(), d, f, shh.data(), t.data());
		for (int q = 0; q < d; q++)
			yr[q] += t[q], yrl[q] += t[q];
		char nm[3][64];
		snprintf(nm[0], 64, "moe_gu_%dx2x%dx%d", K, f, d);
		snprintf(nm[1], 64, "moe_down_sum_%dx%dx%d", K + 1, d, f);
		snprintf(nm[2], 64, "moe_1tok_top%d_%dx%d", K, d, f);
		const double bg = 2.0 * K * f * rbd + 4.0 * d + 4.0 * nh;
		const double bd = (K + 1.0) * d * rbf + 4.0 * (nh + f) + 4.0 * d;
		if (!wide && L->run_old) { /* the library's two kernels apart, then the call */
			const std::vector<cudaGraphExec_t> k = kernels_of(L->s, lib);
			if (k.size() == 2) {
				lab_row(L, "tcv", "old", nm[0], bg, time_graph(L, k[0]));
				lab_row(L, "tcv", "old", nm[1], bd, time_graph(L, k[1]));
			} else {
				fprintf(stderr, "# tcv: x4k_moe_experts_sum launched %zu kernels, not 2: its kernels "
					"not timed apart\n", k.size());
			}
			for (cudaGraphExec_t q : k)
				LAB_CK(cudaGraphExecDestroy(q));
			lab_row(L, "tcv", "old", nm[2], bg + bd, lab_time_us(L, lib));
		}
		for (const cores &cc : CORES) {
			if (!L->run_new)
				break;
			auto gu = [&] { LAB_X4(cc.gu(r, x, d, f, gate, up, hnew, L->s, &e), e); };
			auto dn = [&](const float *h) { LAB_X4(cc.down(r, d, f, down, h, sdown, sh, ynew, L->s, &e), e); };
			gu();
			const std::vector<float> h1 = d2h(hnew, nh);
			gu();
			const std::vector<float> h2 = d2h(hnew, nh);
			dn(hlib);
			const std::vector<float> d1 = d2h(ynew, (size_t)d);
			dn(hlib);
			const std::vector<float> d2 = d2h(ynew, (size_t)d);
			gu();
			dn(hnew);
			const std::vector<float> f1 = d2h(ynew, (size_t)d);
			gu();
			dn(hnew);
			const std::vector<float> f2 = d2h(ynew, (size_t)d);
			bool sg = same_bits(h1, h2), sd = same_bits(d1, d2), sf = same_bits(f1, f2);
			if (!wide) { /* the timings, then the bits they left */
				const std::vector<cudaGraphExec_t> kg = kernels_of(L->s, gu);
				const std::vector<cudaGraphExec_t> kd = kernels_of(L->s, [&] { dn(hlib); });
				lab_row(L, "tcv", cc.name, nm[0], bg, time_graph(L, kg.at(0)));
				sg = sg && same_bits(h1, d2h(hnew, nh));
				lab_row(L, "tcv", cc.name, nm[1], bd, time_graph(L, kd.at(0)));
				sd = sd && same_bits(d1, d2h(ynew, (size_t)d));
				lab_row(L, "tcv", cc.name, nm[2], bg + bd, lab_time_us(L, [&] {
						gu();
						dn(hnew);
					}));
				sf = sf && same_bits(f1, d2h(ynew, (size_t)d));
				LAB_CK(cudaGraphExecDestroy(kg[0]));
				LAB_CK(cudaGraphExecDestroy(kd[0]));
			}
			verdict("moe_gu (h)", cc.name, in, h1.data(), hl.data(), hr.data(), nh, sg);
			verdict("moe_down_sum (library h)", cc.name, in, d1.data(), yl.data(), yrl.data(), (size_t)d, sd);
			verdict("moe (y)", cc.name, in, f1.data(), yl.data(), yr.data(), (size_t)d, sf);
		}
		LAB_CK(cudaFree(x));
		LAB_CK(cudaFree(sh));
	}
	LAB_CK(cudaFree(gate));
	LAB_CK(cudaFree(up));
	LAB_CK(cudaFree(down));
	LAB_CK(cudaFree(sdown));
	LAB_CK(cudaFree(ws));
	LAB_CK(cudaFree(ylib));
	LAB_CK(cudaFree(hnew));
	LAB_CK(cudaFree(ynew));
	LAB_CK(cudaFree(m.rws));
}

/* ---------------- the dense shapes ---------------- */

static void dense_shape(lab *L, int n, int k, bool swiglu)
{
	const size_t rb = x4_type_bytes(X4_T_IQ4_NL, (uint64_t)k);
	const int nm = swiglu ? 2 : 1;
	std::vector<uint8_t> hw((size_t)nm * n * rb);
	uint8_t *w[2] = { nullptr, nullptr };
	for (int i = 0; i < nm; i++) {
		w[i] = (uint8_t *)lab_blocks(X4_T_IQ4_NL, (size_t)1 * n, k, 71 + i);
		LAB_CK(cudaMemcpy(&hw[(size_t)i * n * rb], w[i], n * rb, cudaMemcpyDeviceToHost));
	}
	float *yl = (float *)lab_alloc((size_t)n * 4), *yn = (float *)lab_alloc((size_t)n * 4);
	float *gs = (float *)lab_alloc((size_t)n * 4), *us = (float *)lab_alloc((size_t)n * 4);
	char shape[64];
	snprintf(shape, sizeof shape, swiglu ? "gemv_swiglu_2x%dx%d" : "gemv_%dx%d", n, k);
	const double bytes = (double)nm * n * rb + 4.0 * k + 4.0 * n;
	x4_err e = { 0 };
	for (int wide = 0; wide < 2; wide++) {
		const std::vector<float> xh = host_x((size_t)k, 81 + n, wide);
		float *x = (float *)upload(xh.data(), (size_t)k * 4);
		auto lib = [&] { /* the register core: the products' switch off */
			x4k_gemm_mma_set(0);
			if (swiglu)
				LAB_X4(x4k_gemv_swiglu(X4_T_IQ4_NL, w[0], w[1], n, k, x, gs, us, yl, L->s, &e), e);
			else
				LAB_X4(x4k_gemv(X4_T_IQ4_NL, w[0], n, k, x, yl, L->s, &e), e);
			x4k_gemm_mma_set(1);
		};
		lib();
		LAB_CK(cudaStreamSynchronize(L->s));
		const std::vector<float> ylh = d2h(yl, (size_t)n);
		std::vector<double> ref((size_t)n), u((size_t)n);
		ref_dot(hw.data(), n, k, xh.data(), ref.data());
		if (swiglu) {
			ref_dot(&hw[(size_t)n * rb], n, k, xh.data(), u.data());
			for (int i = 0; i < n; i++)
				ref[i] = silu64(ref[i]) * u[i];
		}
		if (!wide && L->run_old)
			lab_row(L, "tcv", "old", shape, bytes, lab_time_us(L, lib));
		for (const cores &cc : CORES) {
			if (!L->run_new)
				break;
			auto run = [&] {
				if (swiglu)
					LAB_X4(cc.swiglu(w[0], w[1], n, k, x, yn, L->s, &e), e);
				else
					LAB_X4(cc.gemv(w[0], n, k, x, yn, L->s, &e), e);
			};
			run();
			const std::vector<float> a = d2h(yn, (size_t)n);
			run();
			bool same = same_bits(a, d2h(yn, (size_t)n));
			if (!wide) {
				lab_row(L, "tcv", cc.name, shape, bytes, lab_time_us(L, run));
				same = same && same_bits(a, d2h(yn, (size_t)n));
			}
			verdict(shape, cc.name, wide ? "wide" : "uniform", a.data(), ylh.data(), ref.data(), (size_t)n,
				same);
		}
		LAB_CK(cudaFree(x));
	}
	for (int i = 0; i < nm; i++)
		LAB_CK(cudaFree(w[i]));
	LAB_CK(cudaFree(yl));
	LAB_CK(cudaFree(yn));
	LAB_CK(cudaFree(gs));
	LAB_CK(cudaFree(us));
}

int main(int argc, char **argv)
{
	const bool emu_only = argc > 1 && !strcmp(argv[1], "emu");
	emu_all();
	if (emu_only) {
		fprintf(stderr, "# tcv: %d passed, %d failed\n", n_pass, n_fail);
		return n_fail ? 1 : 0;
	}
	lab L;
	lab_init(&L, argc, argv, "times the batch-1 IQ4_NL products on the tensor cores against the library's; "
		 "`emu` checks the fragments on the host alone");
	int dev = 0, major = 0, minor = 0;
	LAB_CK(cudaGetDevice(&dev));
	LAB_CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
	LAB_CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
	if (major < 8) {
		fprintf(stderr, "# tcv: SKIP: cuda:%d is sm_%d%d; the tensor-core products need sm_80 or newer\n", dev,
			major, minor);
		fprintf(stderr, "# tcv: %d passed, %d failed\n", n_pass, n_fail);
		return n_fail ? 1 : 0;
	}
	moe_shapes(&L);
	dense_shape(&L, 1024, 3584, false);
	dense_shape(&L, 9216, 3584, false);
	dense_shape(&L, 1024, 3584, true);
	dense_shape(&L, 9216, 3584, true);
	fprintf(stderr, "# tcv: %d passed, %d failed\n", n_pass, n_fail);
	return n_fail ? 1 : 0;
}
