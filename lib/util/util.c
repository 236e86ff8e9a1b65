/* util.c - clocks, threads, and the file fingerprint. */
#include "x4_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double x4_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int x4_ncpu(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 1 ? 1 : (int)n;
}

struct pf_ctx {
	int64_t n;
	int64_t next;
	pthread_mutex_t mu;
	void (*fn)(void *, int64_t);
	void *arg;
};

static void *pf_worker(void *p)
{
	struct pf_ctx *c = p;
	for (;;) {
		pthread_mutex_lock(&c->mu);
		int64_t i = c->next++;
		pthread_mutex_unlock(&c->mu);
		if (i >= c->n)
			return NULL;
		c->fn(c->arg, i);
	}
}

void x4_parallel_for(int64_t n, int nthreads, void (*fn)(void *arg, int64_t i), void *arg)
{
	if (nthreads <= 0)
		nthreads = x4_ncpu();
	if (nthreads > n)
		nthreads = (int)n;
	if (nthreads <= 1) {
		for (int64_t i = 0; i < n; i++)
			fn(arg, i);
		return;
	}
	struct pf_ctx c = { .n = n, .next = 0, .fn = fn, .arg = arg };
	pthread_mutex_init(&c.mu, NULL);
	pthread_t *th = malloc(sizeof(pthread_t) * (size_t)nthreads);
	int started = 0;
	for (int t = 0; th && t < nthreads; t++) {
		if (pthread_create(&th[t], NULL, pf_worker, &c) != 0)
			break;
		started++;
	}
	if (started == 0)
		pf_worker(&c); /* no threads could be had: do it here */
	for (int t = 0; t < started; t++)
		pthread_join(th[t], NULL);
	free(th);
	pthread_mutex_destroy(&c.mu);
}

/* A word-at-a-time multiply-xorshift hash: not cryptographic, only a
 * fingerprint that changes when any hashed byte changes. */
#define HK1 0x9e3779b97f4a7c15ull
#define HK2 0xbf58476d1ce4e5b9ull

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= HK2;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

void x4_hash_init(x4_hash *s, uint64_t seed)
{
	s->h = mix64(seed ^ HK1);
	s->n = 0;
}

void x4_hash_update(x4_hash *s, const void *data, size_t n)
{
	const unsigned char *p = data;
	uint64_t h = s->h;
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		h = (h ^ mix64(w + HK1)) * HK2;
		h ^= h >> 29;
		p += 8;
		n -= 8;
		s->n += 8;
	}
	if (n) {
		uint64_t w = 0;
		memcpy(&w, p, n);
		h = (h ^ mix64(w + HK1 + n)) * HK2;
		h ^= h >> 29;
		s->n += n;
	}
	s->h = h;
}

uint64_t x4_hash_final(const x4_hash *s)
{
	return mix64(s->h ^ s->n);
}

int x4_fingerprint(const char *path, bool full, char out[17], x4_err *e)
{
	/* O_NONBLOCK: opening a FIFO must not wait for a writer. */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return x4_err_set(e, X4_EIO, "%s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return x4_err_set(e, X4_EIO, "%s: %s", path, strerror(errno));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return x4_err_set(e, X4_EIO, "%s is not a regular file; the fingerprint reads a "
				  "GGUF file", path);
	}
	uint64_t size = (uint64_t)st.st_size;
	x4_hash h;
	x4_hash_init(&h, size);
	enum { CHUNK = 1 << 20, SAMPLE = 64 << 10, NSAMPLES = 64 };
	unsigned char *buf = x4_alloc(CHUNK, "the fingerprint buffer", e);
	if (!buf) {
		close(fd);
		return X4_ENOMEM;
	}
	int rc = 0;
	if (full) {
		for (uint64_t at = 0; at < size;) {
			ssize_t r = pread(fd, buf, CHUNK, (off_t)at);
			if (r <= 0) {
				rc = x4_err_set(e, X4_EIO, "%s: read failed at byte %llu",
						path, (unsigned long long)at);
				break;
			}
			x4_hash_update(&h, buf, (size_t)r);
			at += (uint64_t)r;
		}
	} else {
		/* The first MiB holds the header and (for most files) the directory;
		 * then evenly spaced samples over the rest, the last one at the end. */
		uint64_t head = size < CHUNK ? size : CHUNK;
		ssize_t r = pread(fd, buf, head, 0);
		if (r != (ssize_t)head)
			rc = x4_err_set(e, X4_EIO, "%s: short read of the header", path);
		else
			x4_hash_update(&h, buf, head);
		for (int i = 0; rc == 0 && i < NSAMPLES && size > head; i++) {
			uint64_t span = size - head;
			uint64_t at = head + (span > SAMPLE ? (span - SAMPLE) * (uint64_t)i / (NSAMPLES - 1) : 0);
			size_t n = span > SAMPLE ? SAMPLE : span;
			r = pread(fd, buf, n, (off_t)at);
			if (r != (ssize_t)n) {
				rc = x4_err_set(e, X4_EIO, "%s: short read at byte %llu", path,
						(unsigned long long)at);
				break;
			}
			x4_hash_update(&h, buf, n);
		}
	}
	free(buf);
	close(fd);
	if (rc == 0)
		snprintf(out, 17, "%016llx", (unsigned long long)x4_hash_final(&h));
	return rc;
}

const char *x4_resid_name(int r)
{
	return r == X4_RESID_F16 ? "f16" : r == X4_RESID_BF16 ? "bf16" : "f32";
}
