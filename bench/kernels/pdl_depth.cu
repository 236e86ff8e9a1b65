/*
 * pdl_depth.cu - the kernel lab's probe of how far ahead programmatic
 * dependent launch lets a chain of kernels start.  RESULTS 44 left the
 * gate's cost to be hidden by the next kernels' weights in flight, "for more
 * than one kernel ahead"; that needs kernel N + 2 to start (and issue its
 * weight loads) while kernel N still runs, which the attribute allows only
 * if kernel N + 1 triggers before its own wait.  One block of a head kernel
 * spins SPIN_US, then chain kernels 2..6 (one block each, x4p::launch) stamp
 * %globaltimer at entry and after griddepcontrol.wait; early: each triggers
 * at entry (as x4's kernels do), exit: none triggers (the grid's exit does).
 * On a stream and as one captured graph.  Each row's time_us is a chain
 * kernel's entry less the head's end (negative: it started while the head
 * ran); bytes 0.  A probe, not a speed.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/pdl_depth [new]
 */
#include "lab.h"
#include "pdl.cuh"

namespace {

constexpr int NCH = 5;             /* chain kernels after the head */
constexpr unsigned SPIN_NS = 20000; /* the head's time */

__device__ __forceinline__ unsigned long long gtime()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* stamps: [0] head entry, [1] head end, then 2 + 2j entry and 3 + 2j after the wait of chain j */
__global__ void head_kernel(unsigned long long *st)
{
	x4p::trigger();
	x4p::wait();
	if (threadIdx.x == 0) {
		const unsigned long long t0 = gtime();
		st[0] = t0;
		while (gtime() - t0 < SPIN_NS) {
		}
		st[1] = gtime();
	}
}

__global__ void chain_kernel(unsigned long long *st, int j, int early)
{
	const unsigned long long t = gtime();
	if (early)
		x4p::trigger();
	x4p::wait();
	if (threadIdx.x == 0)
		st[2 + 2 * j] = t, st[3 + 2 * j] = gtime();
}

} /* namespace */

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "how far ahead programmatic dependent launch starts a chain");
	if (!L.run_new)
		return 0;
	unsigned long long *st = (unsigned long long *)lab_alloc(sizeof(unsigned long long) * (2 + 2 * NCH));
	std::vector<unsigned long long> h(2 + 2 * NCH);
	x4k_pdl_set(1);
	if (!x4p::on()) {
		fprintf(stderr, "pdl_depth: programmatic dependent launch is not on for this device (sm_90 and later)\n");
		return 0;
	}
	auto enqueue = [&](int early) {
		x4p::launch(head_kernel, dim3(1), dim3(32), 0, L.s, st);
		for (int j = 0; j < NCH; j++)
			x4p::launch(chain_kernel, dim3(1), dim3(32), 0, L.s, st, j, early);
		LAB_CK(cudaGetLastError());
	};
	for (int graph = 0; graph <= 1; graph++)
		for (int early = 1; early >= 0; early--) {
			cudaGraphExec_t ge = nullptr;
			if (graph) {
				cudaGraph_t g;
				LAB_CK(cudaStreamBeginCapture(L.s, cudaStreamCaptureModeThreadLocal));
				enqueue(early);
				LAB_CK(cudaStreamEndCapture(L.s, &g));
				LAB_CK(cudaGraphInstantiate(&ge, g, 0));
				LAB_CK(cudaGraphDestroy(g));
			}
			std::vector<double> d[NCH];
			for (int r = 0; r < 9; r++) { /* the median of 9 (the first a warm-up) */
				LAB_CK(cudaMemsetAsync(st, 0, h.size() * sizeof h[0], L.s));
				if (graph)
					LAB_CK(cudaGraphLaunch(ge, L.s));
				else
					enqueue(early);
				LAB_CK(cudaMemcpyAsync(h.data(), st, h.size() * sizeof h[0], cudaMemcpyDeviceToHost, L.s));
				LAB_CK(cudaStreamSynchronize(L.s));
				for (int j = 0; r && j < NCH; j++)
					d[j].push_back(((double)h[2 + 2 * j] - (double)h[1]) / 1e3);
			}
			for (int j = 0; j < NCH; j++) {
				std::sort(d[j].begin(), d[j].end());
				char variant[32], shape[32];
				snprintf(variant, sizeof variant, "%s_%s", graph ? "graph" : "stream", early ? "early" : "exit");
				snprintf(shape, sizeof shape, "kernel%d_entry_after_head_end", j + 2);
				lab_row(&L, "pdl_depth", variant, shape, 0, d[j][d[j].size() / 2]);
			}
			if (ge)
				LAB_CK(cudaGraphExecDestroy(ge));
		}
	LAB_CK(cudaFree(st));
	return 0;
}
