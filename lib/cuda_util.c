/* cuda_util.c - the CUDA-call checker and device-buffer helpers (cuda_check.h). */
#include "cuda_check.h"

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
#else
/* A build without CUDA has no device: nothing here is compiled. */
typedef int x4_cuda_util_unused;
#endif
