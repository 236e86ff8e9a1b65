/*
 * pdl.cuh - programmatic dependent launch (sm_90 and later) for the decode
 * step's kernels, off unless x4k_pdl_set(1) (x4_kern.h).
 *
 * With it on, a kernel of the step is launched with the programmatic
 * stream serialization attribute: it may start while the kernel before it
 * drains, issues the loads that do not depend on that kernel (its
 * weights) and then waits (griddepcontrol.wait) before it reads any
 * activation or writes anything.  Every kernel launched through
 * x4p::launch must call x4p::wait() in every thread before its first
 * dependent access, and before any early return: the chain of waits is
 * what makes a kernel's predecessors' predecessors complete too.  Kernels
 * launched plainly keep the ordinary stream order with their neighbours.
 * Built for an arch below sm_90 the device calls are empty, and the host
 * never sets the attribute on a device below 9.0.  Measured on the H200:
 * a synthetic step of 240 kernels went from 765 to 973 steps/s with the
 * weight loads issued before the wait (docs/record.md 9), and x4's own
 * step 1.056x at 512 tokens of context, 1.051x at 4096 (bench/RESULTS.md
 * 14), which is why it is on by default.
 */
#ifndef X4_PDL_CUH
#define X4_PDL_CUH

#include <cuda_runtime.h>

#include "x4_kern.h"

namespace x4p {

/* Host: is the attribute set on this device's launches (x4k_pdl_get() and
 * compute capability 9.0 or later, looked up once a device)? */
bool on();

/* Let the next kernel of the stream start launching (its blocks then wait
 * in x4p::wait until this grid has completed). */
__device__ __forceinline__ void trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Wait until every kernel this one depends on has completed and its
 * memory is visible (returns at once when launched without the attribute). */
__device__ __forceinline__ void wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* k<<<g, b, smem, s>>>(args...), with the attribute when on(); the launch's
 * error is left for x4_cuda_launched, as with <<< >>>. */
template <typename... KArgs, typename... Args>
inline void launch(void (*k)(KArgs...), dim3 g, dim3 b, size_t smem, cudaStream_t s, Args... args)
{
	if (!on()) {
		k<<<g, b, smem, s>>>(args...);
		return;
	}
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = g;
	cfg.blockDim = b;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = s;
	cudaLaunchAttribute at[1];
	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = at;
	cfg.numAttrs = 1;
	cudaLaunchKernelEx(&cfg, k, static_cast<KArgs>(args)...);
}

} /* namespace x4p */

#endif
