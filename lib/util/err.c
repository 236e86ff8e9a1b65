/* err.c - error values and version strings. */
#include "x4_int.h"

#include <stdarg.h>

#ifndef X4_COMMIT
#define X4_COMMIT "unknown"
#endif

int x4_err_set(x4_err *e, int code, const char *fmt, ...)
{
	if (e) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof e->msg, fmt, ap);
		va_end(ap);
		e->code = code;
	}
	return code;
}

const char *x4_status_name(int code)
{
	switch (code) {
	case X4_OK: return "ok";
	case X4_EIO: return "io";
	case X4_EFORMAT: return "format";
	case X4_ENOMEM: return "nomem";
	case X4_EINVAL: return "invalid";
	case X4_ESHAPE: return "shape";
	case X4_ENOTFOUND: return "notfound";
	case X4_ERANGE: return "range";
	case X4_ECUDA: return "cuda";
	case X4_ENUMERIC: return "numeric";
	case X4_EINTR: return "interrupted";
	}
	return "unknown";
}

const char *x4_version(void) { return "0.1.0"; }
const char *x4_commit(void) { return X4_COMMIT; }

void *x4_alloc(size_t n, const char *what, x4_err *e)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		x4_err_set(e, X4_ENOMEM, "out of host memory allocating %zu bytes for %s", n, what);
	return p;
}

void *x4_calloc(size_t n, size_t size, const char *what, x4_err *e)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		x4_err_set(e, X4_ENOMEM, "out of host memory allocating %zu x %zu bytes for %s",
			   n, size, what);
	return p;
}

#ifdef X4_HAVE_CUDA
#include <cuda_runtime_api.h>
const char *x4_cuda_runtime(void)
{
	static char buf[32];
	int v = 0;
	if (cudaRuntimeGetVersion(&v) != cudaSuccess)
		return "unavailable";
	snprintf(buf, sizeof buf, "%d.%d", v / 1000, (v % 1000) / 10);
	return buf;
}
#else
const char *x4_cuda_runtime(void) { return "none"; }
#endif
