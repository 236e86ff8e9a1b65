/*
 * moe_trace.cu - the kernel lab's timeline of the decode step's two MoE
 * launches (bench/RESULTS.md 42): where, inside the routed experts' gate/up
 * (tc_rows_kernel, MOE) and their down with the sum (tc_down_sum_kernel),
 * a block's time goes, and when each block starts.  The header is
 * included with X4_TCV_TRACE, so thread 0 of every block stamps
 * %globaltimer (and clock64) at its phases:
 *
 *   gate/up   0 entry, 1 after the dependency wait, 2 after the router's
 *             top k (the routed blocks; the shared expert's have none),
 *             3 the weights landed and the B words built (the barrier),
 *             4 the products done, 5 the output written;
 *   down      0 entry, 1 after the wait (h), 3 the barrier, 5 written.
 *
 * One MoE layer of the full model (64 experts of 1024 x 3584 IQ4_NL,
 * top 4, the shared expert), one token, the step's launches: the gate/up
 * selecting from the router's scores with the shared expert's column
 * (tcv::moe_gu with a pick and sgate: 4 x 64 + 64 = 320 blocks of 448
 * threads), then the down with the shared down and the weighted sum, under
 * programmatic dependent launch as in the step (x4p::launch).  Configs:
 *
 *   step      as the step;
 *   noshared  without the shared expert's column (256 blocks: one wave
 *             at two blocks an SM), its down without the shared down.
 *
 * For each: the pair's time and the gate/up's alone (lab_time_us, L2
 * flushed), then 9 traced runs after a flush, and the median run's (by
 * the pair's span) stamps written to DIR/moe_trace-CONFIG.tsv (DIR: the
 * environment's MOE_TRACE_DIR, else build/bench) in the trace build's
 * format, which bench/moe_step_trace.py summarises (its --column is the
 * shared expert's column of blocks, printed with the path).  A profiling
 * instrument, not a speed: the stamps cost a few instructions a block.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/moe_trace [new|all]
 *   python3 bench/moe_step_trace.py --column 64 build/bench/moe_trace-step.tsv
 */
#define X4_TCV_TRACE 1
#include "lab.h"
#include "gemv_tc.cuh"

#include <string>

namespace {

constexpr int W = tcv::TRACE_WORDS; /* trace words a block */

struct trace {
	unsigned long long *d = nullptr;
	size_t blocks = 0;
	std::vector<unsigned long long> h;
};

void trace_alloc(trace &t, size_t blocks)
{
	t.blocks = blocks;
	t.d = (unsigned long long *)lab_alloc(blocks * W * 8);
	t.h.resize(blocks * W);
}

} /* namespace */

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "the timeline of the one-token MoE's two launches, block by block");
	if (!L.run_new)
		return 0;
	const x4_config m = lab_model();
	const int d = m.n_embd, f = m.n_ff_exp, E = m.n_expert, k = m.n_expert_used;
	const int type = X4_T_IQ4_NL;
	const uint8_t *gate = (const uint8_t *)lab_blocks(type, (size_t)E * f, d, 1);
	const uint8_t *up = (const uint8_t *)lab_blocks(type, (size_t)E * f, d, 2);
	const uint8_t *down = (const uint8_t *)lab_blocks(type, (size_t)E * d, f, 3);
	const uint8_t *sgate = (const uint8_t *)lab_blocks(type, (size_t)f, d, 4);
	const uint8_t *sup = (const uint8_t *)lab_blocks(type, (size_t)f, d, 5);
	const uint8_t *sdown = (const uint8_t *)lab_blocks(type, (size_t)d, f, 6);
	float *x = lab_f32((size_t)d, 7), *bias = lab_f32((size_t)E, 8);
	/* the router's sigmoids: distinct values in (0, 1), so the top k is one set */
	std::vector<float> sc((size_t)E);
	for (int i = 0; i < E; i++)
		sc[i] = 0.05f + 0.9f * (float)((i * 37) % E) / (float)E;
	std::vector<float> zb((size_t)E, 0.f);
	LAB_CK(cudaMemcpy(bias, zb.data(), (size_t)E * 4, cudaMemcpyHostToDevice));
	x4_err e = { 0 };
	const int tile = x4k_moe_tile(1, k);
	const size_t rb = x4k_moe_routes_bytes(1, k, E, tile);
	void *rws = lab_alloc(rb);
	x4k_moe_routes r;
	LAB_X4(x4k_moe_routes_init(&r, rws, rb, 1, k, E, tile, &e), e);
	LAB_CK(cudaMemcpy(r.score, sc.data(), (size_t)E * 4, cudaMemcpyHostToDevice));
	const x4k_moe_pick pick = { bias, 1.0f, true };
	float *h = (float *)lab_alloc((size_t)k * f * 4), *sh = (float *)lab_alloc((size_t)f * 4);
	float *y = (float *)lab_alloc((size_t)d * 4);
	LAB_CK(cudaMemset(sh, 0, (size_t)f * 4));
	trace gu, dn;
	trace_alloc(gu, (size_t)(r.max_tiles + 1) * (f / tcv::ROWS));
	trace_alloc(dn, (size_t)(d / tcv::ROWS));
	printf("config\tkernel\tblocks\trow\tn\tmin_us\tmedian_us\tp90_us\tmax_us\n");
	for (int cfg = 0; cfg < 2; cfg++) {
		const char *cn = cfg == 0 ? "step" : "noshared";
		const bool shared = cfg == 0;
		auto launch_gu = [&] {
			if (!tcv::moe_gu<tcv::core8, 1>(&r, &pick, x, d, f, gate, up, h, shared ? sgate : nullptr,
							 shared ? sup : nullptr, shared ? sh : nullptr, L.s)) {
				fprintf(stderr, "moe_trace: tcv::moe_gu refused\n");
				exit(1);
			}
		};
		auto launch_dn = [&] {
			if (!tcv::moe_down_sum<tcv::core8, 1>(&r, &pick, d, f, down, h, shared ? sdown : nullptr,
							      shared ? sh : nullptr, y, L.s)) {
				fprintf(stderr, "moe_trace: tcv::moe_down_sum refused\n");
				exit(1);
			}
		};
		unsigned long long *none = nullptr;
		LAB_CK(cudaMemcpyToSymbol(tcv::tcv_trace_gu, &none, sizeof none));
		LAB_CK(cudaMemcpyToSymbol(tcv::tcv_trace_dn, &none, sizeof none));
		const double tp = lab_time_us(&L, [&] { launch_gu(); launch_dn(); });
		const double tg = lab_time_us(&L, [&] { launch_gu(); });
		printf("%s\tpair\t-\ttime\t-\t-\t%.2f\t-\t-\n%s\tgate_up\t-\ttime\t-\t-\t%.2f\t-\t-\n", cn, tp, cn, tg);
		LAB_CK(cudaMemcpyToSymbol(tcv::tcv_trace_gu, &gu.d, sizeof gu.d));
		LAB_CK(cudaMemcpyToSymbol(tcv::tcv_trace_dn, &dn.d, sizeof dn.d));
		/* 9 traced runs; keep the median one by the pair's span */
		constexpr int RUNS = 9;
		std::vector<std::pair<double, int>> spans;
		std::vector<std::vector<unsigned long long>> keep_gu(RUNS), keep_dn(RUNS);
		for (int q = 0; q < RUNS; q++) {
			LAB_CK(cudaMemsetAsync(gu.d, 0, gu.blocks * W * 8, L.s));
			LAB_CK(cudaMemsetAsync(dn.d, 0, dn.blocks * W * 8, L.s));
			lab_flush(&L);
			launch_gu();
			launch_dn();
			LAB_CK(cudaStreamSynchronize(L.s));
			LAB_CK(cudaMemcpy(gu.h.data(), gu.d, gu.blocks * W * 8, cudaMemcpyDeviceToHost));
			LAB_CK(cudaMemcpy(dn.h.data(), dn.d, dn.blocks * W * 8, cudaMemcpyDeviceToHost));
			unsigned long long t0 = ~0ull, t1 = 0;
			for (size_t b = 0; b < gu.blocks; b++)
				if (gu.h[b * W])
					t0 = std::min(t0, gu.h[b * W]);
			for (size_t b = 0; b < dn.blocks; b++)
				t1 = std::max(t1, dn.h[b * W + 5]);
			spans.push_back({ 1e-3 * (double)(t1 - t0), q });
			keep_gu[q] = gu.h, keep_dn[q] = dn.h;
		}
		std::sort(spans.begin(), spans.end());
		const int med = spans[RUNS / 2].second;
		gu.h = keep_gu[med], dn.h = keep_dn[med];
		printf("%s\tpair\t-\ttraced_span\t%d\t%.2f\t%.2f\t-\t%.2f\n", cn, RUNS, spans[0].first,
		       spans[RUNS / 2].first, spans[RUNS - 1].first);
		char path[4096];
		const char *dir = getenv("MOE_TRACE_DIR");
		snprintf(path, sizeof path, "%s/moe_trace-%s.tsv", dir && *dir ? dir : "build/bench", cn);
		if (!tcv::tcv_trace_write(path, gu.h.data(), gu.blocks, dn.h.data(), dn.blocks)) {
			fprintf(stderr, "moe_trace: %s not written (%s); MOE_TRACE_DIR names a writable folder\n",
				path, strerror(errno));
			exit(1);
		}
		/* the grid's linear index is y * gx + x: y the column, the shared expert's first */
		fprintf(stderr, "moe_trace: %s: python3 bench/moe_step_trace.py%s %s\n", cn,
			shared ? (" --column " + std::to_string(f / tcv::ROWS)).c_str() : "", path);
		LAB_CK(cudaMemcpyToSymbol(tcv::tcv_trace_gu, &none, sizeof none));
		LAB_CK(cudaMemcpyToSymbol(tcv::tcv_trace_dn, &none, sizeof none));
	}
	return 0;
}
