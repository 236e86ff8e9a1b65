/*
 * prof_hook.c - what the trunks call while a profiler is attached: the
 * operation marks, and the count of a captured step graph's kernels.  Kept
 * apart from lib/prof/prof.c and lib/prof/prof_cupti.c so that a tool which never
 * profiles links none of CUPTI.
 */
#include "prof_int.h"

#include <time.h>

void *x4_prof_push(x4_prof *p, void **arr, size_t *n, size_t *cap, size_t size)
{
	if (*n == *cap) {
		size_t nc = *cap ? 2 * *cap : 256;
		void *a = realloc(*arr, nc * size);
		if (!a) {
			p->oom = true;
			return NULL;
		}
		*arr = a;
		*cap = nc;
	}
	char *slot = (char *)*arr + *n * size;
	memset(slot, 0, size);
	(*n)++;
	return slot;
}

uint64_t x4_prof_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CPU: the open operation ends at t. */
static void cpu_close(x4_prof *p, uint64_t t)
{
	if (p->cur_ev >= 0)
		p->evs[p->cur_ev].t1 = t;
	p->cur_ev = -1;
}

void x4_prof_op_(x4_prof *p, int cls, const char *label, int nparts, uint64_t b0, uint64_t b1,
		 uint64_t row_bytes, int rows)
{
	/* The clock first: what follows is the profiler's cost, not the op's. */
	uint64_t t = p->gpu ? 0 : p->now();
	p->cur_op = -1;
	if (!p->gpu) {
		cpu_close(p, t);
		if (p->cur_step < 0)
			return; /* a CPU forward outside a bracket is not tabulated */
	}
	x4_prof_opinfo *o = X4_PROF_PUSH(p, ops);
	if (!o)
		return;
	o->label = label;
	o->cls = cls;
	o->nparts = nparts;
	o->bytes[0] = b0;
	o->bytes[1] = b1;
	o->row_bytes = row_bytes;
	o->rows_rel = rows - (p->cur_step >= 0 ? p->steps[p->cur_step].pos : 0);
	o->step = p->cur_step;
	p->cur_op = (int)(p->n_ops - 1);
	if (p->gpu)
		return;
	x4_prof_ev *ev = X4_PROF_PUSH(p, evs);
	if (!ev)
		return;
	ev->t0 = t;
	ev->t1 = t;
	ev->kind = X4_PROF_EV_KERNEL;
	ev->name = -1;
	ev->op = p->cur_op;
	ev->step = p->cur_step;
	p->cur_ev = (int)(p->n_evs - 1);
	/* The op's own time starts after the bookkeeping above. */
	ev->t0 = p->now();
}

void x4_prof_end_(x4_prof *p)
{
	if (!p->gpu)
		cpu_close(p, p->now());
	p->cur_op = -1;
}

#ifdef X4_HAVE_CUDA
/* A graph's edges with their kinds: the runtime's call since CUDA 13, its
 * _v2 form in 12.3-12.9; older runtimes do not say (edge_count: -1). */
#if CUDART_VERSION >= 13000
#define X4_GRAPH_EDGES(g, from, to, ed, n) cudaGraphGetEdges(g, from, to, ed, n)
#elif CUDART_VERSION >= 12030
#define X4_GRAPH_EDGES(g, from, to, ed, n) cudaGraphGetEdges_v2(g, from, to, ed, n)
#endif

/* The graph's dependencies between two kernel nodes, programmatic and full;
 * -1 each where the runtime does not say. */
static void edge_count(cudaGraph_t g, int64_t *pdl, int64_t *full)
{
	*pdl = *full = -1;
#ifdef X4_GRAPH_EDGES
	size_t ne = 0;
	if (X4_GRAPH_EDGES(g, NULL, NULL, NULL, &ne) != cudaSuccess) {
		(void)cudaGetLastError();
		return;
	}
	cudaGraphNode_t *from = malloc((ne ? ne : 1) * sizeof *from), *to = malloc((ne ? ne : 1) * sizeof *to);
	cudaGraphEdgeData *ed = malloc((ne ? ne : 1) * sizeof *ed);
	if (from && to && ed && X4_GRAPH_EDGES(g, from, to, ed, &ne) == cudaSuccess) {
		*pdl = *full = 0;
		for (size_t i = 0; i < ne; i++) {
			enum cudaGraphNodeType ta, tb;
			if (cudaGraphNodeGetType(from[i], &ta) != cudaSuccess ||
			    cudaGraphNodeGetType(to[i], &tb) != cudaSuccess) {
				*pdl = *full = -1;
				break;
			}
			if (ta == cudaGraphNodeTypeKernel && tb == cudaGraphNodeTypeKernel)
				++*(ed[i].type == cudaGraphDependencyTypeProgrammatic ? pdl : full);
		}
	}
	(void)cudaGetLastError();
	free(from), free(to), free(ed);
#else
	(void)g;
#endif
}

void x4_prof_graph_(x4_prof *p, cudaGraph_t g)
{
	size_t n = 0;
	if (p->last_tmpl < 0 || cudaGraphGetNodes(g, NULL, &n) != cudaSuccess) {
		(void)cudaGetLastError();
		return;
	}
	cudaGraphNode_t *nodes = malloc((n ? n : 1) * sizeof *nodes);
	if (!nodes) {
		p->oom = true;
		return;
	}
	int64_t k = -1;
	if (cudaGraphGetNodes(g, nodes, &n) == cudaSuccess) {
		k = 0;
		for (size_t i = 0; i < n; i++) {
			enum cudaGraphNodeType ty;
			if (cudaGraphNodeGetType(nodes[i], &ty) == cudaSuccess &&
			    ty == cudaGraphNodeTypeKernel)
				k++;
		}
	}
	(void)cudaGetLastError();
	free(nodes);
	x4_prof_tmpl *tp = &p->tmpls[p->last_tmpl];
	tp->nodes = k;
	edge_count(g, &tp->pdl_edges, &tp->full_edges);
}
#endif
