/* cuda_util.c - the CUDA-call checker and device-buffer helpers (cuda_check.h). */
#include "cuda_check.h"

#include <stdio.h>

#ifdef X4_HAVE_CUDA
int x4_cuda_check(cudaError_t rc, const char *what, x4_err *e)
{
	if (rc == cudaSuccess)
		return 0;
	/* A failed call's error stays as the runtime's last error until read;
	 * left there, the next x4_cuda_launched would blame an innocent kernel
	 * for it.  (A sticky error, a faulted context, comes back anyway.) */
	(void)cudaGetLastError();
	return x4_err_set(e, X4_ECUDA, "%s: %s", what, cudaGetErrorString(rc));
}

int x4_cuda_launched(const char *what, x4_err *e)
{
	return x4_cuda_check(cudaGetLastError(), what, e);
}

int x4_dev_alloc(void **p, size_t n, const char *what, x4_err *e)
{
	*p = NULL;
	cudaError_t rc = cudaMalloc(p, n ? n : 1);
	if (rc == cudaSuccess)
		return 0;
	*p = NULL;
	(void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
	return x4_err_set(e, rc == cudaErrorMemoryAllocation ? X4_ENOMEM : X4_ECUDA,
			  "allocate %zu bytes of device memory for %s: %s", n, what,
			  cudaGetErrorString(rc));
}

void x4_dev_free(void *p)
{
	if (p)
		cudaFree(p);
}

int x4_dev_upload(void *dst, const void *src, size_t n, const char *what, x4_err *e)
{
	return x4_cuda_check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), what, e);
}

int x4_dev_download(void *dst, const void *src, size_t n, const char *what, x4_err *e)
{
	return x4_cuda_check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), what, e);
}

int x4_device_mem(int device, uint64_t *free_bytes, uint64_t *total_bytes, char *name,
		  size_t name_cap, x4_err *e)
{
	int n = 0;
	X4_CUDA_TRY(cudaGetDeviceCount(&n), "count the CUDA devices", e);
	if (device < 0 || device >= n)
		return x4_err_set(e, X4_ECUDA, "cuda:%d: this machine has %d CUDA device%s", device,
				  n, n == 1 ? "" : "s");
	X4_CUDA_TRY(cudaSetDevice(device), "select the CUDA device", e);
	size_t f = 0, t = 0;
	X4_CUDA_TRY(cudaMemGetInfo(&f, &t), "read the free device memory", e);
	*free_bytes = f;
	*total_bytes = t;
	if (name && name_cap) {
		struct cudaDeviceProp p;
		X4_CUDA_TRY(cudaGetDeviceProperties(&p, device), "read the CUDA device's properties",
			    e);
		snprintf(name, name_cap, "%.100s (cuda:%d)", p.name, device);
	}
	return 0;
}
#else
/* A build without CUDA has no device. */
int x4_device_mem(int device, uint64_t *free_bytes, uint64_t *total_bytes, char *name,
		  size_t name_cap, x4_err *e)
{
	(void)device, (void)name, (void)name_cap;
	*free_bytes = *total_bytes = 0;
	return x4_err_set(e, X4_ECUDA, "this build of x4 has no CUDA (nvcc was not found at "
			  "build time)");
}
#endif
