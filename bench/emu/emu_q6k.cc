/* emu_q6k.cc - runs the decode step's Q6_K product (the LM head's) on the CPU
 * with emu_rt.h's runtime: gemv_q6k_rows_kernel at 2 and 4 rows a warp
 * against gemv_kernel<Q6_K> (gemv_quant.cu's staged kernel: chunk_dot's
 * sums, which gemv_q6k_kernel's are too), the kernels' own text as prep.py
 * copies it out.  The rows form must give every row the same bits, in order
 * and under a random warp schedule with the copies landing as late as their
 * wait allows, and copy nothing from outside the rows (its weights are the
 * one buffer listed; placed 0, 4, 8 or 12 bytes past a 16-byte boundary,
 * so that a warp's span starts and ends ragged); both against a float64
 * reference from the same bytes at the kernel tests' rule.  And
 * gemv_q6k_tc_kernel (the tensor cores: the MMA emulated exactly) in its
 * three forms against the same reference and rule, with the same bits from
 * each, from one block and two, in order and late.  The sums here
 * are the GPU's: fp32 FMAs and adds rounded as on the device.  Run by
 * tests/tool_emu_q6k.sh in make test. */
#include "cuda_runtime.h" /* emu_cuda.h: before blockfmt.h, built with -D__CUDACC__ */
#include "x4_kern.h"
#include "quant_dev.cuh"
#include "mma_dev.cuh"
#include "gemv_tc.cuh"
#include "gemv_q6k_tc.cuh" /* the tensor-core form */

using namespace x4d;
#include "gemv_quant.cu.inc"

/* the rows form's dynamic shared memory: x and 8 spans of 4 rows at k 4096 */
alignas(16) uint8_t q6r_smem[q6r_x_bytes(Q6_KMAX) + GEMV_WARPS * q6r_span_bytes(4, Q6_KMAX / 256 * 210)];

/* the tensor-core form's (its kernel's namespace): q6t::NST tiles of 16 rows,
 * B and the sums at k 4096 */
namespace q6t {
alignas(16) uint8_t q6t_smem[smem_bytes(Q6_KMAX, NST)];
}

#include "emu_rt.h"

static std::mt19937_64 rng(1);
static double urand() { return (rng() >> 11) * 0x1p-53; }
static float sgn() { return rng() & 1 ? 1.f : -1.f; }

/* grid blocks of GEMV_WARPS warps; sched 0 in order with copies at issue,
 * else random from sched with late copies */
static void launch(unsigned grid, size_t smem, unsigned sched, std::function<void()> kern)
{
	emu_smem = q6r_smem;
	SMEM = smem;
	late_copies = sched != 0;
	body = kern;
	for (unsigned b = 0; b < grid; b++)
		run_block(dim3(grid), dim3(GEMV_WARPS * 32), uint3{ b, 0, 0 }, sched ? sched + 131 * b : 0);
}

/* random Q6_K blocks with an fp16 d of 2^-12..2^-10; x over 2^-6..2^1 with
 * all 24 bits of significand in use */
static void fill(uint8_t *w, size_t blocks, float *x, int k)
{
	for (size_t b = 0; b < blocks; b++) {
		uint8_t *p = w + b * 210;
		for (int i = 0; i < 210; i++)
			p[i] = (uint8_t)rng();
		const uint16_t hd = __half_as_ushort(__float2half_rn(sgn() * (float)(0.25e-3 + 0.75e-3 * urand())));
		memcpy(p + 208, &hd, 2);
	}
	for (int i = 0; i < k; i++)
		x[i] = sgn() * ldexpf((float)(1 + urand()), -6 + (int)(rng() % 8));
}

static void check(const char *name, const float *got, const std::vector<double> &ref,
		  const std::vector<double> &mag)
{
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < ref.size(); i++)
		if (!(fabs((double)got[i] - ref[i]) <= 1e-5 * mag[i]) && !bad++)
			first = i;
	if (bad)
		report(false, name, "%zu of %zu beyond 1e-5*mag, first [%zu] got %.9g want %.9g", bad, ref.size(),
		       first, got[first], ref[first]);
	else
		report(true, name, "%zu rows", ref.size());
}

/* n rows of k at off bytes past a 16-byte boundary */
static void q6k_case(int n, int k, int off)
{
	const int rb = (int)row_bytes(X4_T_Q6_K, k);
	std::vector<uint8_t> wv((size_t)n * rb + 32);
	uint8_t *w = (uint8_t *)(((uintptr_t)wv.data() + 15) & ~(uintptr_t)15) + off;
	alignas(16) static float x[Q6_KMAX];
	fill(w, (size_t)n * rb / 210, x, k);
	emu_global.clear();
	emu_global_add(w, (size_t)n * rb);
	std::vector<float> base(n), y(n);
	memset(base.data(), 0xff, (size_t)n * 4);
	alignas(16) static uint8_t none[1];
	emu_smem = none, SMEM = 0; /* gemv_kernel's shared memory is its own (static) */
	body = [&] { gemv_kernel<X4_T_Q6_K>(w, n, k, x, base.data()); };
	for (unsigned b = 0; b < (unsigned)(n + GEMV_WARPS - 1) / GEMV_WARPS; b++)
		run_block(dim3((n + GEMV_WARPS - 1) / GEMV_WARPS), dim3(GEMV_WARPS * 32), uint3{ b, 0, 0 }, 0);
	std::vector<double> ref(n), mag(n);
	std::vector<float> row(k);
	for (int r = 0; r < n; r++) {
		if (x4b_decode_row(X4_T_Q6_K, w + (size_t)r * rb, row.data(), (uint64_t)k))
			abort();
		for (int c = 0; c < k; c++) {
			ref[r] += (double)row[c] * x[c];
			mag[r] += fabs((double)row[c] * x[c]);
		}
	}
	char nm[160];
	snprintf(nm, sizeof nm, "gemv Q6_K staged n %d k %d offset %d", n, k, off);
	check(nm, base.data(), ref, mag);
	for (int R = 2; R <= 4; R += 2)
		for (unsigned sched = 0; sched <= 1; sched++) {
			const size_t smem = q6r_x_bytes(k) + (size_t)GEMV_WARPS * q6r_span_bytes(R, rb);
			const unsigned grid = (unsigned)((n + GEMV_WARPS * R - 1) / (GEMV_WARPS * R));
			memset(y.data(), 0xff, (size_t)n * 4);
			launch(grid, smem, sched ? 7u * n + k + off : 0u, [&] {
				if (R == 2)
					gemv_q6k_rows_kernel<2>(w, n, k, x, y.data());
				else
					gemv_q6k_rows_kernel<4>(w, n, k, x, y.data());
			});
			snprintf(nm, sizeof nm, "gemv Q6_K %d rows a warp n %d k %d offset %d%s", R, n, k, off,
				 sched ? " late copies" : "");
			check(nm, y.data(), ref, mag);
			int d = 0;
			while (d < n && !memcmp(&y[d], &base[d], 4))
				d++;
			snprintf(nm, sizeof nm, "gemv Q6_K %d rows a warp = staged%s", R, sched ? " (late copies)" : "");
			report(d == n, nm, "n %d k %d offset %d: %s row %d", n, k, off,
			       d == n ? "the same bits to the last" : "differs at", d == n ? n - 1 : d);
		}
	if (k % 512 || off)
		return; /* the tensor-core form's shapes: 16-byte aligned, k % 512 == 0 */
	/* the tensor-core form, two tiles in flight a block and one: one block
	 * walking every tile, then two (the second from tile 1), in order and
	 * late; the same bits each way */
	std::vector<float> first(n);
	for (int form = 1; form <= 2; form++)
		for (unsigned grid = 1; grid <= 2; grid++)
			for (unsigned sched = 0; sched <= 1; sched++) {
				memset(y.data(), 0xff, (size_t)n * 4);
				emu_smem = q6t::q6t_smem;
				SMEM = q6t::smem_bytes(k, form == 2 ? 1 : 2);
				late_copies = sched != 0;
				body = [&] {
					if (form == 1)
						q6t::gemv_q6k_tc_kernel<2>(w, n, k, x, y.data());
					else
						q6t::gemv_q6k_tc_kernel<1>(w, n, k, x, y.data());
				};
				for (unsigned b = 0; b < grid; b++)
					run_block(dim3(grid), dim3(k / 512 * 32), uint3{ b, 0, 0 },
						  sched ? 11u * n + k + 131 * b : 0);
				snprintf(nm, sizeof nm, "gemv Q6_K tensor cores (form %d) n %d k %d, %u block%s%s", form, n, k,
					 grid, grid > 1 ? "s" : "", sched ? " late copies" : "");
				check(nm, y.data(), ref, mag);
				if (form == 1 && grid == 1 && !sched) {
					first = y;
					continue;
				}
				int d = 0;
				while (d < n && !memcmp(&y[d], &first[d], 4))
					d++;
				snprintf(nm, sizeof nm, "gemv Q6_K tensor cores (form %d), %u block%s%s = form 1, 1 block", form,
					 grid, grid > 1 ? "s" : "", sched ? " late copies" : "");
				report(d == n, nm, "n %d k %d: %s row %d", n, k,
				       d == n ? "the same bits to the last" : "differs at", d == n ? n - 1 : d);
			}
}

int main()
{
	q6k_case(1, 512, 0);     /* fewer rows than a warp takes */
	q6k_case(3, 512, 4);
	q6k_case(37, 512, 12);   /* rows in no whole warp nor block */
	q6k_case(13, 1536, 8);
	q6k_case(70, 3584, 0);   /* the head's k: a part chunk */
	q6k_case(37, 3584, 4);
	q6k_case(21, 4096, 12);  /* the largest k */
	q6k_case(16, 512, 0);    /* the tensor-core form: one tile */
	q6k_case(50, 3584, 0);   /* the head's k, tiles a block 4 and 2, a part tile */
	q6k_case(33, 4096, 0);   /* 8 warps, a tile of 1 row */
	printf("# %d passed, %d failed (%ld warp collectives)\n", passes, fails, n_collectives);
	return fails ? 1 : 0;
}
