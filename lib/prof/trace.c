/*
 * trace.c - a finished profile as Chrome trace-event JSON, the format
 * ui.perfetto.dev and chrome://tracing open: one process, with tracks
 *   1  the host: each counted step as a range, and inside it (GPU) the
 *      runtime calls that submitted work and that waited for it;
 *   2  the GPU's kernels and copies, or the CPU trunk's operations;
 *   3  (GPU) each step from its first kernel's start to its last's end.
 * Times are microseconds from the first counted step's start.  Written to a
 * temporary name and renamed, gzip-compressed through zlib for a ".gz".
 */
#include "prof_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <unistd.h>

#ifdef X4_HAVE_ZLIB
#include <zlib.h>
#endif

bool x4_prof_have_zlib(void)
{
#ifdef X4_HAVE_ZLIB
	return true;
#else
	return false;
#endif
}

typedef struct tw {
	FILE *f;
#ifdef X4_HAVE_ZLIB
	gzFile gz;
#endif
	char buf[1 << 16];
	size_t n;
	bool err;
} tw;

static void tw_flush(tw *w)
{
	if (!w->n || w->err)
		return;
#ifdef X4_HAVE_ZLIB
	if (w->gz) {
		w->err = gzwrite(w->gz, w->buf, (unsigned)w->n) != (int)w->n;
		w->n = 0;
		return;
	}
#endif
	w->err = fwrite(w->buf, 1, w->n, w->f) != w->n;
	w->n = 0;
}

__attribute__((format(printf, 2, 3))) static void tw_printf(tw *w, const char *fmt, ...)
{
	for (int tries = 0; tries < 2; tries++) {
		va_list ap;
		va_start(ap, fmt);
		int k = vsnprintf(w->buf + w->n, sizeof w->buf - w->n, fmt, ap);
		va_end(ap);
		if (k >= 0 && (size_t)k < sizeof w->buf - w->n) {
			w->n += (size_t)k;
			return;
		}
		tw_flush(w);
	}
	w->err = true; /* one event longer than the buffer: never for ours */
}

/* A JSON string. */
static void tw_str(tw *w, const char *s)
{
	tw_printf(w, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			tw_printf(w, "\\%c", c);
		else if (c < 0x20)
			tw_printf(w, "\\u%04x", c);
		else
			tw_printf(w, "%c", c);
	}
	tw_printf(w, "\"");
}

static double rel_us(uint64_t t, uint64_t origin)
{
	return ((double)t - (double)origin) / 1e3;
}

/* The counted ordinal of each step, -1 for the uncounted. */
static int *ordinals(const x4_prof *p, int *n, x4_err *e)
{
	int *ord = x4_alloc((p->n_steps ? p->n_steps : 1) * sizeof *ord, "the trace", e);
	*n = 0;
	for (size_t i = 0; ord && i < p->n_steps; i++)
		ord[i] = p->steps[i].counted ? (*n)++ : -1;
	return ord;
}

static void meta(tw *w, int tid, const char *what, const char *name)
{
	tw_printf(w, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":", what,
		  tid);
	tw_str(w, name);
	tw_printf(w, "}},\n");
}

static void x_event(tw *w, const char *name, const char *cat, int tid, uint64_t t0, uint64_t t1,
		    uint64_t origin)
{
	tw_printf(w, "{\"name\":");
	tw_str(w, name);
	tw_printf(w, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", cat,
		  tid, rel_us(t0, origin), t1 > t0 ? (double)(t1 - t0) / 1e3 : 0.0);
}

static bool write_events(const x4_prof *p, tw *w, const int *ord, int n_counted,
			 const char *run_json, bool (*stop)(void *), void *ctx)
{
	uint64_t origin = 0;
	for (size_t i = 0; i < p->n_steps; i++)
		if (p->steps[i].counted) {
			origin = p->steps[i].t0;
			break;
		}
	tw_printf(w, "{\"traceEvents\":[\n");
	meta(w, 0, "process_name", "x4-profile (profiled run: not a speed)");
	meta(w, 1, "thread_name", p->gpu ? "host: steps, submissions, synchronisations"
					 : "host: steps");
	meta(w, 2, "thread_name", p->gpu ? "GPU: kernels and copies" : "CPU trunk: operations");
	if (p->gpu)
		meta(w, 3, "thread_name", "GPU: each step, first kernel to last");
	size_t polled = 0;
	for (size_t i = 0; i < p->n_steps; i++) {
		const x4_prof_step *s = &p->steps[i];
		if (!s->counted)
			continue;
		char name[32];
		snprintf(name, sizeof name, "step %d", ord[i]);
		x_event(w, name, "step", 1, s->t0, s->t1, origin);
		tw_printf(w, ",\"args\":{\"step\":%d,\"pos\":%d,\"tokens\":%d,\"kernels\":%lld,"
			  "\"enqueued\":%lld}},\n", ord[i], s->pos, s->pos_end - s->pos,
			  (long long)s->kernels, (long long)s->enqueued);
	}
	for (size_t i = 0; i < p->n_apis; i++) {
		const x4_prof_api *a = &p->apis[i];
		if (a->step < 0 || ord[a->step] < 0)
			continue;
		if ((++polled & 1023) == 0 && stop && stop(ctx))
			return false;
		x_event(w, a->name ? a->name : "?",
			a->kind == X4_PROF_API_SYNC ? "sync" : a->kind == X4_PROF_API_SUBMIT ? "submit"
											 : "api",
			1, a->t0, a->t1, origin);
		tw_printf(w, ",\"args\":{\"step\":%d}},\n", ord[a->step]);
	}
	/* The device span of each step, gathered as the kernels are written. */
	uint64_t *first = calloc((size_t)n_counted + 1, sizeof *first);
	uint64_t *last = calloc((size_t)n_counted + 1, sizeof *last);
	if (!first || !last) {
		free(first);
		free(last);
		w->err = true;
		return false;
	}
	for (size_t i = 0; i < p->n_evs; i++) {
		const x4_prof_ev *ev = &p->evs[i];
		if (ev->step < 0 || ord[ev->step] < 0)
			continue;
		if ((++polled & 1023) == 0 && stop && stop(ctx)) {
			free(first);
			free(last);
			return false;
		}
		int so = ord[ev->step];
		const x4_prof_opinfo *o = ev->op >= 0 ? &p->ops[ev->op] : NULL;
		if (ev->kind != X4_PROF_EV_KERNEL) {
			x_event(w, ev->kind == X4_PROF_EV_MEMCPY ? "memcpy" : "memset",
				ev->kind == X4_PROF_EV_MEMCPY ? "memcpy" : "memset", 2, ev->t0,
				ev->t1, origin);
			tw_printf(w, ",\"args\":{\"step\":%d,\"bytes\":%llu}},\n", so,
				  (unsigned long long)ev->bytes);
			continue;
		}
		if (!first[so] || ev->t0 < first[so])
			first[so] = ev->t0;
		if (ev->t1 > last[so])
			last[so] = ev->t1;
		const char *name = p->gpu ? (ev->name >= 0 ? p->names[ev->name] : "?")
					  : (o ? o->label : "?");
		x_event(w, name, "kernel", 2, ev->t0, ev->t1, origin);
		tw_printf(w, ",\"args\":{\"step\":%d,\"class\":\"%s\",\"op\":", so,
			  x4_prof_class_name(o ? o->cls : X4_PC_OTHER));
		tw_str(w, o ? o->label : "");
		if (ev->bytes == X4_PROF_UNKNOWN)
			tw_printf(w, ",\"bytes\":null}},\n");
		else
			tw_printf(w, ",\"bytes\":%llu}},\n", (unsigned long long)ev->bytes);
	}
	for (int s = 0; p->gpu && s < n_counted; s++) {
		if (!first[s])
			continue;
		char name[48];
		snprintf(name, sizeof name, "step %d (device)", s);
		x_event(w, name, "step_device", 3, first[s], last[s], origin);
		tw_printf(w, ",\"args\":{\"step\":%d}},\n", s);
	}
	free(first);
	free(last);
	/* The last event carries no comma: the metadata of the whole trace. */
	tw_printf(w, "{\"name\":\"profiled run: not a speed\",\"ph\":\"i\",\"s\":\"g\",\"pid\":1,"
		  "\"tid\":1,\"ts\":0}\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{"
		  "\"profiled\":true,\"note\":\"profiled run: not a speed\",\"steps\":%d,"
		  "\"device\":\"%s\",\"run\":", n_counted, p->gpu ? "gpu" : "cpu");
	if (run_json && *run_json)
		tw_printf(w, "%s", run_json);
	else
		tw_printf(w, "null");
	tw_printf(w, "}}\n");
	return true;
}

int x4_prof_write_trace(const x4_prof *p, const char *path, const char *run_json,
			bool (*stop)(void *ctx), void *ctx, x4_err *e)
{
	if (!p->finished)
		return x4_err_set(e, X4_EINVAL, "the trace is written after the profile is finished");
	size_t len = strlen(path);
	bool gz = len > 3 && strcmp(path + len - 3, ".gz") == 0;
#ifndef X4_HAVE_ZLIB
	if (gz)
		return x4_err_set(e, X4_EINVAL, "%s: this build of x4 has no zlib, so it cannot "
				  "write a .gz trace (install zlib1g-dev and rebuild, or drop the "
				  ".gz)", path);
#endif
	int n_counted = 0;
	int *ord = ordinals(p, &n_counted, e);
	tw *w = x4_calloc(1, sizeof *w, "the trace writer", e);
	char *tmp = x4_alloc(len + 32, "the trace path", e);
	if (!ord || !w || !tmp) {
		free(ord);
		free(w);
		free(tmp);
		return X4_ENOMEM;
	}
	snprintf(tmp, len + 32, "%s.tmp.%ld", path, (long)getpid());
	int rc = 0;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0) {
		rc = x4_err_set(e, X4_EIO, "cannot create %s: %s", tmp, strerror(errno));
		goto out;
	}
#ifdef X4_HAVE_ZLIB
	if (gz) {
		int zfd = dup(fd);
		w->gz = zfd >= 0 ? gzdopen(zfd, "wb") : NULL;
		if (!w->gz) {
			if (zfd >= 0)
				close(zfd);
			close(fd);
			unlink(tmp);
			rc = x4_err_set(e, X4_EIO, "cannot start gzip on %s", tmp);
			goto out;
		}
	}
#endif
	if (!gz && !(w->f = fdopen(fd, "wb"))) {
		close(fd);
		unlink(tmp);
		rc = x4_err_set(e, X4_EIO, "cannot write %s: %s", tmp, strerror(errno));
		goto out;
	}
	bool done = write_events(p, w, ord, n_counted, run_json, stop, ctx);
	tw_flush(w);
	bool bad = w->err;
#ifdef X4_HAVE_ZLIB
	if (w->gz) {
		bad = gzclose(w->gz) != Z_OK || bad;
		bad = fsync(fd) != 0 || bad;
		close(fd);
	}
#endif
	if (w->f) {
		bad = fflush(w->f) != 0 || bad;
		bad = fsync(fileno(w->f)) != 0 || bad;
		bad = fclose(w->f) != 0 || bad;
	}
	if (!done && !bad) {
		unlink(tmp);
		rc = x4_err_set(e, X4_EINTR, "interrupted while writing the trace %s", path);
	} else if (bad) {
		unlink(tmp);
		rc = x4_err_set(e, X4_EIO, "cannot write the trace %s: %s", tmp,
				errno ? strerror(errno) : "write failed");
	} else if (rename(tmp, path) != 0) {
		rc = x4_err_set(e, X4_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
		unlink(tmp);
	}
out:
	free(ord);
	free(w);
	free(tmp);
	return rc;
}
