/*
 * cuda_check.h - the one way x4 checks a CUDA call: a failure becomes
 * "<what>: <cuda message>" in the caller's x4_err and X4_ECUDA, so every
 * CUDA error names the operation that met it.  Also the few device-buffer
 * helpers lib/ and tests/ share.  Seen by lib/, kernels/ and tests/ only.
 */
#ifndef X4_CUDA_CHECK_H
#define X4_CUDA_CHECK_H

#include "x4.h"

#if defined(X4_HAVE_CUDA) || defined(__CUDACC__)
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when rc is cudaSuccess; else X4_ECUDA with "<what>: <message>" in e. */
int x4_cuda_check(cudaError_t rc, const char *what, x4_err *e);
/* After a kernel launch: the launch's own error (bad configuration, no
 * kernel image for this GPU), without synchronising, so it is legal while a
 * stream is being captured into a graph. */
int x4_cuda_launched(const char *what, x4_err *e);

/* Device buffers; each failure names `what` and the byte count. */
int x4_dev_alloc(void **p, size_t n, const char *what, x4_err *e);
void x4_dev_free(void *p); /* NULL is fine */
int x4_dev_upload(void *dst, const void *src, size_t n, const char *what, x4_err *e);
int x4_dev_download(void *dst, const void *src, size_t n, const char *what, x4_err *e);

#ifdef __cplusplus
}
#endif

/* `X4_CUDA_TRY(cudaMemsetAsync(...), "clear the logits", e);` returns on failure. */
#define X4_CUDA_TRY(call, what, e)                                     \
	do {                                                           \
		int x4_rc_ = x4_cuda_check((call), (what), (e));       \
		if (x4_rc_)                                            \
			return x4_rc_;                                 \
	} while (0)

#endif /* X4_HAVE_CUDA || __CUDACC__ */
#endif
