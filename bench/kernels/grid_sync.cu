/*
 * grid_sync.cu - the kernel lab's grid barriers (bench/kernels/lab.h): what
 * one barrier of a persistent decode step (branch step-persistent) costs
 * on a cooperative grid of one block of 512 threads an SM, and the ways to
 * build it, N barriers in a row with nothing between (bytes 0; time_us is
 * a barrier's, the launch's time over N).
 *
 *   counter_acquire  a release add on one counter, every block's thread 0
 *                    spinning on an acquire load of it (the step's)
 *   counter_relaxed  the same add, the spin on a relaxed load, one acquire
 *                    fence after it
 *   counter_sleep    counter_relaxed with a 64 ns back-off in the spin
 *   flag             an acq_rel add that returns the count: the last block
 *                    releases a flag on a line of its own, the others spin
 *                    on it relaxed and fence once
 *
 *   nvcc -O3 -arch=sm_90 -Ilib -Ibench/kernels bench/kernels/grid_sync.cu -o grid_sync
 *   ./grid_sync [all]
 */
#include "lab.h"
#include "core_dev.cuh"

namespace {

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
	unsigned v;
	asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}
__device__ __forceinline__ unsigned ld_relaxed(const unsigned *p)
{
	unsigned v;
	asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}
__device__ __forceinline__ void red_release(unsigned *p)
{
	asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}
__device__ __forceinline__ unsigned atom_acq_rel(unsigned *p)
{
	unsigned v;
	asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(v) : "l"(p) : "memory");
	return v;
}
__device__ __forceinline__ void st_release(unsigned *p, unsigned v)
{
	asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

template <int V> __global__ void __launch_bounds__(512, 1) sync_kernel(unsigned *bar, int n)
{
	unsigned target = 0;
	unsigned *flag = bar + 32; /* its own 128-byte line */
	for (int i = 0; i < n; i++) {
		target += gridDim.x;
		__syncthreads();
		if (threadIdx.x == 0) {
			if (V == 0) {
				red_release(bar);
				while (ld_acquire(bar) < target) {
				}
			} else if (V == 1 || V == 2) {
				red_release(bar);
				while (ld_relaxed(bar) < target)
					if (V == 2)
						__nanosleep(64);
				x4c::fence_acq_rel_gpu();
			} else {
				const unsigned gen = (unsigned)i + 1;
				if (atom_acq_rel(bar) == target - 1) {
					st_release(flag, gen);
				} else {
					while (ld_relaxed(flag) < gen) {
					}
					x4c::fence_acq_rel_gpu();
				}
			}
		}
		__syncthreads();
	}
}

const char *const names[] = { "counter_acquire", "counter_relaxed", "counter_sleep", "flag" };

} // namespace

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "grid barriers: all variants are new");
	const int sms = L.sms;
	unsigned *bar;
	LAB_CK(cudaMalloc(&bar, 256));
	void (*k[4])(unsigned *, int) = { sync_kernel<0>, sync_kernel<1>, sync_kernel<2>, sync_kernel<3> };
	for (int n : { 360, 2000 })
		for (int v = 0; v < 4; v++) {
			std::vector<float> t;
			for (int r = 0; r < 7; r++) {
				LAB_CK(cudaMemsetAsync(bar, 0, 256, L.s));
				void *args[] = { &bar, &n };
				LAB_CK(cudaEventRecord(L.a, L.s));
				LAB_CK(cudaLaunchCooperativeKernel((void *)k[v], dim3(sms), dim3(512), args, 0, L.s));
				LAB_CK(cudaEventRecord(L.b, L.s));
				LAB_CK(cudaEventSynchronize(L.b));
				float ms;
				LAB_CK(cudaEventElapsedTime(&ms, L.a, L.b));
				t.push_back(ms);
			}
			std::sort(t.begin(), t.end());
			char shape[64];
			snprintf(shape, sizeof shape, "%d blocks x 512, %d barriers", sms, n);
			lab_row(&L, "grid_sync", names[v], shape, 0, t[t.size() / 2] * 1e3 / n, 0);
		}
	return 0;
}
