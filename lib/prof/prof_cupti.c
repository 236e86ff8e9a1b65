/*
 * prof_cupti.c - the GPU profiler's two CUPTI parts.
 *
 * Activity records (CONCURRENT_KERNEL, MEMCPY, MEMSET) give every kernel's
 * device start and end.  They are written by the device and delivered in
 * buffers, so they add no synchronisation, and they are produced for the
 * kernels of a replayed graph too, each carrying the correlation id of the
 * cudaGraphLaunch that ran it.
 *
 * Runtime-API callbacks, on the host thread that calls CUDA, tie a launch
 * to the operation the trunk marked current (lib/prof_int.h) through its
 * correlation id, which the kernel's activity record carries; they record
 * the host's submissions and synchronisations for the trace; and between a
 * stream capture's begin and end they collect the operations of the graph's
 * kernels in capture order (the template a replay is matched against).
 *
 * Resource callbacks name the graph nodes.  A launch being captured creates
 * its kernel's node (GRAPHNODE_CREATED, inside the launch's callbacks), and
 * instantiation clones every node into the executable graph
 * (GRAPHNODE_CLONED: the clone and its original).  A replayed kernel's
 * record carries the clone's id, so clone -> original -> the launch that
 * made it gives its operation whatever order the replay ran its branches in.
 *
 * CUPTI is process-wide: one profiler at a time.
 */
#include "prof_int.h"

#ifdef X4_HAVE_CUPTI
#include "cuda_check.h"

#include <cupti.h>

/* Activity buffers: a decode step of the full model is ~1000 kernel records
 * of ~250 bytes; CUPTI asks for more when one fills. */
#define BUF_BYTES ((size_t)8 << 20)

static x4_prof *g_prof;
static CUpti_SubscriberHandle g_sub;
static bool g_registered;

bool x4_prof_have_cupti(void) { return true; }

static int cupti_check(CUptiResult r, const char *what, x4_err *e)
{
	if (r == CUPTI_SUCCESS)
		return 0;
	const char *s = NULL;
	cuptiGetResultString(r, &s);
	const char *hint = "";
	if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
		hint = " (another profiler, such as Nsight Systems, holds CUPTI: run x4-profile "
		       "on its own)";
	else if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
		hint = " (the driver restricts profiling to administrators)";
	return x4_err_set(e, X4_ECUDA, "CUPTI: %s: %s%s", what, s ? s : "unknown error", hint);
}

uint64_t x4_prof_cupti_now(void)
{
	uint64_t t = 0;
	cuptiGetTimestamp(&t);
	return t;
}

/* ---- kernel names ---- */

/* libstdc++'s demangler (the CUDA build links it already). */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* "void gemv_kernel<20>(unsigned char const*, int, ...)" -> "gemv_kernel<20>":
 * the name without its return type, parameter list and anonymous namespace. */
static char *short_name(const char *raw)
{
	int st = -1;
	char *dm = raw && raw[0] == '_' && raw[1] == 'Z' ? __cxa_demangle(raw, NULL, NULL, &st) : NULL;
	const char *s = dm && st == 0 ? dm : raw ? raw : "?";
	size_t n = strlen(s), start = 0, cut = n;
	int depth = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '<') {
			depth++;
		} else if (c == '>') {
			depth--;
		} else if (c == '(' && depth == 0) {
			static const char anon[] = "(anonymous namespace)";
			if (strncmp(s + i, anon, sizeof anon - 1) == 0) {
				i += sizeof anon - 2;
				continue;
			}
			cut = i;
			break;
		} else if (c == ' ' && depth == 0) {
			start = i + 1;
		}
	}
	if (start >= cut)
		start = 0;
	/* The kernels' files keep them in anonymous namespaces: say nothing. */
	static const char anon_ns[] = "(anonymous namespace)::";
	if (cut - start > sizeof anon_ns - 1 && strncmp(s + start, anon_ns, sizeof anon_ns - 1) == 0)
		start += sizeof anon_ns - 1;
	char *out = malloc(cut - start + 1);
	if (out) {
		memcpy(out, s + start, cut - start);
		out[cut - start] = 0;
		for (char *q = out; *q; q++)
			if (*q == '\t' || *q == '\n')
				*q = ' ';
	}
	free(dm);
	return out;
}

/* The index of a kernel's name (under p->mu).  CUPTI shares one pointer
 * among a kernel's records, so that is checked first. */
static int intern(x4_prof *p, const char *raw)
{
	for (size_t i = 0; i < p->n_names; i++)
		if (p->name_keys[i] == raw)
			return (int)i;
	char *s = short_name(raw);
	if (!s) {
		p->oom = true;
		return -1;
	}
	for (size_t i = 0; i < p->n_names; i++)
		if (strcmp(p->names[i], s) == 0) {
			free(s);
			return (int)i;
		}
	if (p->n_names == p->cap_names) {
		size_t nc = p->cap_names ? 2 * p->cap_names : 64;
		char **a = realloc(p->names, nc * sizeof *a);
		if (a)
			p->names = a;
		const char **b = a ? realloc(p->name_keys, nc * sizeof *b) : NULL;
		if (b)
			p->name_keys = b;
		if (!a || !b) {
			free(s);
			p->oom = true;
			return -1;
		}
		p->cap_names = nc;
	}
	p->names[p->n_names] = s;
	p->name_keys[p->n_names] = raw;
	return (int)p->n_names++;
}

/* ---- activity buffers ---- */

static void CUPTIAPI buf_request(uint8_t **buf, size_t *size, size_t *max_records)
{
	*buf = aligned_alloc(8, BUF_BYTES);
	*size = *buf ? BUF_BYTES : 0;
	*max_records = 0;
}

static void add_ev(x4_prof *p, int kind, uint64_t t0, uint64_t t1, uint32_t corr, int name,
		   uint64_t bytes, uint64_t node)
{
	x4_prof_ev *ev = X4_PROF_PUSH(p, evs);
	if (!ev)
		return;
	ev->t0 = t0;
	ev->t1 = t1;
	ev->corr = corr;
	ev->kind = kind;
	ev->name = name;
	ev->op = -1;
	ev->step = -1;
	ev->bytes = bytes;
	ev->node = node;
}

static void CUPTIAPI buf_complete(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
				  size_t valid)
{
	x4_prof *p = g_prof;
	if (p) {
		pthread_mutex_lock(&p->mu);
		CUpti_Activity *r = NULL;
		while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
			if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
			    r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
				const CUpti_ActivityKernel10 *k = (const void *)r;
				add_ev(p, X4_PROF_EV_KERNEL, k->start, k->end, k->correlationId,
				       intern(p, k->name), 0, k->graphNodeId);
			} else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
				const CUpti_ActivityMemcpy6 *m = (const void *)r;
				add_ev(p, X4_PROF_EV_MEMCPY, m->start, m->end, m->correlationId, -1,
				       m->bytes, 0);
			} else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
				const CUpti_ActivityMemset4 *m = (const void *)r;
				add_ev(p, X4_PROF_EV_MEMSET, m->start, m->end, m->correlationId, -1,
				       m->bytes, 0);
			}
		}
		size_t dropped = 0;
		if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
			p->dropped += dropped;
		pthread_mutex_unlock(&p->mu);
	}
	free(buf);
}

/* ---- runtime-API and resource callbacks ---- */

enum { C_NONE, C_LAUNCH, C_GRAPH, C_CAP_BEGIN, C_CAP_END, C_SUBMIT, C_SYNC, C_NODE, C_CLONE };

/* A kernel record carries the correlation id of the call that launched it:
 * the runtime's, or the driver call beneath it (CUPTI's headers allow
 * either), so both domains' launches are followed; a launch inside another
 * is one launch. */
#define CB(x) CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_##x
#define CD(x) CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##x
#define CR(x) CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_##x
static const struct {
	CUpti_CallbackDomain dom;
	CUpti_CallbackId id;
	int cls;
} cbids[] = {
	{ CD(cuLaunchKernel), C_LAUNCH },
	{ CD(cuLaunchKernel_ptsz), C_LAUNCH },
	{ CD(cuLaunchKernelEx), C_LAUNCH },
	{ CD(cuLaunchKernelEx_ptsz), C_LAUNCH },
	{ CD(cuLaunchCooperativeKernel), C_LAUNCH },
	{ CD(cuLaunchCooperativeKernel_ptsz), C_LAUNCH },
	{ CD(cuGraphLaunch), C_GRAPH },
	{ CD(cuGraphLaunch_ptsz), C_GRAPH },
	{ CB(cudaLaunchKernel_v7000), C_LAUNCH },
	{ CB(cudaLaunchKernel_ptsz_v7000), C_LAUNCH },
	{ CB(cudaLaunchKernelExC_v11060), C_LAUNCH },
	{ CB(cudaLaunchKernelExC_ptsz_v11060), C_LAUNCH },
	{ CB(cudaLaunchCooperativeKernel_v9000), C_LAUNCH },
	{ CB(cudaLaunchCooperativeKernel_ptsz_v9000), C_LAUNCH },
	{ CB(__cudaLaunchKernel_v13000), C_LAUNCH },
	{ CB(__cudaLaunchKernel_ptsz_v13000), C_LAUNCH },
	{ CB(cudaGraphLaunch_v10000), C_GRAPH },
	{ CB(cudaGraphLaunch_ptsz_v10000), C_GRAPH },
	{ CB(cudaStreamBeginCapture_v10000), C_CAP_BEGIN },
	{ CB(cudaStreamBeginCapture_ptsz_v10000), C_CAP_BEGIN },
	{ CB(cudaStreamBeginCaptureToGraph_v12030), C_CAP_BEGIN },
	{ CB(cudaStreamBeginCaptureToGraph_ptsz_v12030), C_CAP_BEGIN },
	{ CB(cudaStreamEndCapture_v10000), C_CAP_END },
	{ CB(cudaStreamEndCapture_ptsz_v10000), C_CAP_END },
	{ CB(cudaMemcpyAsync_v3020), C_SUBMIT },
	{ CB(cudaMemcpyAsync_ptsz_v7000), C_SUBMIT },
	{ CB(cudaMemsetAsync_v3020), C_SUBMIT },
	{ CB(cudaMemsetAsync_ptsz_v7000), C_SUBMIT },
	{ CB(cudaMemcpy_v3020), C_SYNC },
	{ CB(cudaMemcpy_ptds_v7000), C_SYNC },
	{ CB(cudaStreamSynchronize_v3020), C_SYNC },
	{ CB(cudaStreamSynchronize_ptsz_v7000), C_SYNC },
	{ CB(cudaDeviceSynchronize_v3020), C_SYNC },
	{ CB(cudaEventSynchronize_v3020), C_SYNC },
	{ CR(GRAPHNODE_CREATED), C_NODE },
	{ CR(GRAPHNODE_CLONED), C_CLONE },
};
#undef CB
#undef CD
#undef CR

static int cb_class(CUpti_CallbackDomain dom, CUpti_CallbackId id)
{
	for (size_t i = 0; i < X4_ARRAY_LEN(cbids); i++)
		if (cbids[i].dom == dom && cbids[i].id == id)
			return cbids[i].cls;
	return C_NONE;
}

static void push_launch(x4_prof *p, uint32_t corr, int op, int tmpl, bool outer)
{
	x4_prof_launch *l = X4_PROF_PUSH(p, launches);
	if (l) {
		l->corr = corr;
		l->op = op;
		l->step = p->cur_step;
		l->tmpl = tmpl;
		l->outer = outer;
	}
}

static void api_enter(x4_prof *p, int cls, const CUpti_CallbackData *d)
{
	bool outer = (cls == C_LAUNCH || cls == C_GRAPH) && p->launch_depth++ == 0;
	switch (cls) {
	case C_LAUNCH:
		push_launch(p, d->correlationId, p->cur_op, -1, outer);
		if (!outer)
			break;
		if (p->cur_op >= 0)
			p->ops[p->cur_op].launches++;
		if (p->capturing) {
			x4_prof_tkernel *slot = X4_PROF_PUSH(p, tmpl_kernels);
			if (slot)
				slot->op = p->cur_op; /* its node comes while it is captured */
		} else if (p->cur_step >= 0) {
			p->steps[p->cur_step].enqueued++;
		}
		break;
	case C_GRAPH:
		push_launch(p, d->correlationId, -1, p->last_tmpl, outer);
		break;
	case C_CAP_BEGIN:
		p->capturing = true;
		p->capture_first = p->n_tmpl_kernels;
		break;
	default:
		break;
	}
}

static void api_exit(x4_prof *p, int cls, const CUpti_CallbackData *d, uint64_t t0, uint64_t t1)
{
	if ((cls == C_LAUNCH || cls == C_GRAPH) && --p->launch_depth > 0)
		return;
	if (cls == C_CAP_END && p->capturing) {
		p->capturing = false;
		x4_prof_tmpl *tp = X4_PROF_PUSH(p, tmpls);
		if (tp) {
			tp->first = p->capture_first;
			tp->n = p->n_tmpl_kernels - p->capture_first;
			tp->nodes = tp->pdl_edges = tp->full_edges = -1;
			p->last_tmpl = (int)(p->n_tmpls - 1);
		}
	}
	int kind = cls == C_SYNC ? X4_PROF_API_SYNC
		 : cls == C_LAUNCH || cls == C_GRAPH || cls == C_SUBMIT ? X4_PROF_API_SUBMIT
		 : X4_PROF_API_OTHER;
	if (p->cur_step < 0)
		return;
	x4_prof_step *st = &p->steps[p->cur_step];
	if (kind == X4_PROF_API_SUBMIT && t1 > st->submit_end)
		st->submit_end = t1;
	x4_prof_api *a = X4_PROF_PUSH(p, apis);
	if (a) {
		a->t0 = t0;
		a->t1 = t1;
		a->name = d->functionName;
		a->kind = kind;
		a->step = p->cur_step;
	}
}

/* A kernel node created or cloned.  Only kernels count: the event record
 * and wait nodes of a forked capture stream, and copies and fills, have no
 * operation and no kernel record. */
static void on_node(x4_prof *p, int cls, const CUpti_GraphData *g)
{
	uint64_t node = 0, orig = 0;
	if (!g || !g->node || g->nodeType != CU_GRAPH_NODE_TYPE_KERNEL ||
	    cuptiGetGraphNodeId(g->node, &node) != CUPTI_SUCCESS)
		return;
	if (cls == C_NODE) {
		/* The node of the launch being captured, the last one collected.
		 * Instantiation creates nodes too (its clones), outside any launch
		 * and after the capture ended. */
		if (!p->capturing || p->launch_depth == 0 || p->n_tmpl_kernels == p->capture_first)
			return;
		x4_prof_tkernel *k = &p->tmpl_kernels[p->n_tmpl_kernels - 1];
		if (!k->node)
			k->node = node;
	} else if (g->originalNode && cuptiGetGraphNodeId(g->originalNode, &orig) == CUPTI_SUCCESS) {
		x4_prof_nodepair *c = X4_PROF_PUSH(p, clones);
		if (c)
			*c = (x4_prof_nodepair){ node, orig };
	}
}

static void CUPTIAPI on_api(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId id,
			    const void *cbdata)
{
	x4_prof *p = ud;
	if (p != g_prof)
		return;
	int cls = cb_class(dom, id);
	if (cls == C_NODE || cls == C_CLONE) {
		const CUpti_ResourceData *r = cbdata;
		on_node(p, cls, r->resourceDescriptor);
		return;
	}
	if (cls == C_NONE)
		return;
	const CUpti_CallbackData *d = cbdata;
	uint64_t t = x4_prof_cupti_now();
	if (d->callbackSite == CUPTI_API_ENTER) {
		*d->correlationData = t;
		api_enter(p, cls, d);
	} else {
		api_exit(p, cls, d, *d->correlationData, t);
	}
}

/* ---- start, stop ---- */

static const CUpti_ActivityKind kinds[] = {
	CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
	CUPTI_ACTIVITY_KIND_MEMSET,
};

int x4_prof_cupti_start(x4_prof *p, x4_err *e)
{
	if (g_prof)
		return x4_err_set(e, X4_EINVAL, "a profiler is already attached in this process "
				  "(CUPTI is process-wide)");
	int rc = 0;
	if (!g_registered) {
		rc = cupti_check(cuptiActivityRegisterCallbacks(buf_request, buf_complete),
				 "register the activity buffers", e);
		if (rc)
			return rc;
		g_registered = true;
	}
	g_prof = p;
	rc = cupti_check(cuptiSubscribe(&g_sub, on_api, p), "subscribe to the runtime's callbacks",
			 e);
	if (rc) {
		g_prof = NULL;
		return rc;
	}
	for (size_t i = 0; i < X4_ARRAY_LEN(cbids) && !rc; i++)
		rc = cupti_check(cuptiEnableCallback(1, g_sub, cbids[i].dom, cbids[i].id),
				 "enable a launch or graph node callback", e);
	for (size_t i = 0; i < X4_ARRAY_LEN(kinds) && !rc; i++)
		rc = cupti_check(cuptiActivityEnable(kinds[i]), "enable the activity records", e);
	if (rc) {
		x4_err ignored;
		x4_prof_cupti_stop(p, &ignored);
	}
	return rc;
}

int x4_prof_cupti_stop(x4_prof *p, x4_err *e)
{
	if (g_prof != p)
		return 0;
	/* Every kernel of the brackets has ended (each step synchronised); the
	 * records still in CUPTI's buffers come out with a forced flush. */
	cudaError_t st = cudaDeviceSynchronize();
	int rc = cupti_check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
			     "flush the activity records", e);
	for (size_t i = 0; i < X4_ARRAY_LEN(kinds); i++)
		cuptiActivityDisable(kinds[i]);
	cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	cuptiUnsubscribe(g_sub);
	g_prof = NULL;
	if (!rc)
		rc = x4_cuda_check(st, "finish the profiled work on the GPU", e);
	return rc;
}

#else /* no CUPTI in this build */

bool x4_prof_have_cupti(void) { return false; }

uint64_t x4_prof_cupti_now(void) { return x4_prof_mono_ns(); }

int x4_prof_cupti_start(x4_prof *p, x4_err *e)
{
	(void)p;
	return x4_err_set(e, X4_ECUDA, "this build of x4 has no CUPTI (the CUDA Toolkit's "
			  "profiling library was not found at build time), so it cannot profile "
			  "a GPU: rebuild with CUPTI beside cudart, or use --device cpu");
}

int x4_prof_cupti_stop(x4_prof *p, x4_err *e)
{
	(void)p;
	(void)e;
	return 0;
}
#endif
