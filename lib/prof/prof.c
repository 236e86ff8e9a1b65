/*
 * prof.c - the profiler's frame: attaching to a trunk, the step brackets,
 * and the tables made from what was collected (lib/prof_int.h says what a
 * mark, an event and a template are).
 *
 * Every kernel record is tied to the operation that launched it: an eager
 * launch through its correlation id; a replayed graph's kernels, which all
 * carry the graph launch's id, through the graph node each ran.  CUPTI names
 * the instantiated graph's node, a clone of the node the capture made for
 * one launch, and that launch's operation was collected in capture order
 * (lib/prof/prof_cupti.c).  A record whose node we never heard of takes the
 * operation at its place in the replay's start order instead: right only
 * while the graph is a chain, where start order is capture order; a branch
 * (a forked capture stream) breaks it.  An operation's bytes go to its kernels
 * part by part when it launched as many kernels as it listed parts, else
 * all to its longest kernel.
 */
#include "prof_int.h"
#include "trunk_int.h"

#ifdef X4_HAVE_CUDA
#include "trunk_cuda.h"
#endif

static const char *const class_names[X4_PC_COUNT] = {
	"hc_gate", "sublayer_norm", "attention", "moe_router", "routed_experts",
	"shared_expert", "dense_ffn", "head_pick", "embed", "other",
};

const char *x4_prof_class_name(int cls)
{
	return cls >= 0 && cls < X4_PC_COUNT ? class_names[cls] : "other";
}

/* ---- attach, brackets ---- */

static void bind(x4_prof *p, x4_prof *to)
{
	x4_trunk_cpu *c = x4_trunk_cpu_part(p->t);
	if (c)
		c->prof = to;
#ifdef X4_HAVE_CUDA
	x4_trunk_cuda *g = x4_trunk_cuda_part(p->t);
	if (g)
		g->prof = to;
#endif
}

int x4_prof_attach(x4_prof **out, x4_trunk *t, x4_err *e)
{
	*out = NULL;
	x4_prof *p = x4_calloc(1, sizeof *p, "the profiler", e);
	if (!p)
		return X4_ENOMEM;
	p->t = t;
	p->cur_op = p->cur_ev = p->cur_step = p->last_tmpl = -1;
	pthread_mutex_init(&p->mu, NULL);
	p->gpu = x4_trunk_cpu_part(t) == NULL;
	p->now = p->gpu ? x4_prof_cupti_now : x4_prof_mono_ns;
	if (p->gpu) {
		int rc = x4_prof_cupti_start(p, e);
		if (rc) {
			x4_prof_free(p);
			return rc;
		}
#ifdef X4_HAVE_CUDA
		/* A graph captured before now would replay kernels no mark named,
		 * whose records CUPTI may not even keep: capture the step again. */
		x4_trunk_cuda *g = x4_trunk_cuda_part(t);
		if (g->step_graph) {
			cudaGraphExecDestroy(g->step_graph);
			g->step_graph = NULL;
		}
#endif
	}
	bind(p, p);
	p->attached = true;
	*out = p;
	return 0;
}

void x4_prof_step_begin(x4_prof *p, bool counted)
{
	if (!p->attached)
		return;
	x4_prof_end_(p);
	x4_prof_step *s = X4_PROF_PUSH(p, steps);
	if (!s)
		return;
	s->pos = x4_trunk_pos(p->t);
	s->counted = counted;
	s->pdl_edges = s->full_edges = -1;
	p->cur_step = (int)(p->n_steps - 1);
	s->t0 = p->now();
}

void x4_prof_step_end(x4_prof *p)
{
	if (!p->attached || p->cur_step < 0)
		return;
	uint64_t t = p->now();
	x4_prof_end_(p);
	p->steps[p->cur_step].t1 = t;
	p->steps[p->cur_step].pos_end = x4_trunk_pos(p->t);
	p->cur_step = -1;
}

static int detach(x4_prof *p, x4_err *e)
{
	if (!p->attached)
		return 0;
	bind(p, NULL);
	p->attached = false;
	return p->gpu ? x4_prof_cupti_stop(p, e) : 0;
}

void x4_prof_free(x4_prof *p)
{
	if (!p)
		return;
	x4_err ignored;
	detach(p, &ignored);
	for (size_t i = 0; i < p->n_names; i++)
		free(p->names[i]);
	free(p->names);
	free(p->name_keys);
	free(p->ops);
	free(p->steps);
	free(p->evs);
	free(p->apis);
	free(p->launches);
	free(p->tmpl_kernels);
	free(p->tmpls);
	free(p->clones);
	free(p->rows);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

/* ---- tying records to operations and steps ---- */

static int cmp_launch(const void *a, const void *b)
{
	uint32_t x = ((const x4_prof_launch *)a)->corr, y = ((const x4_prof_launch *)b)->corr;
	return (x > y) - (x < y);
}

static const x4_prof_launch *find_launch(const x4_prof *p, uint32_t corr)
{
	x4_prof_launch key = { .corr = corr };
	return bsearch(&key, p->launches, p->n_launches, sizeof key, cmp_launch);
}

int x4_prof_cmp_node(const void *a, const void *b)
{
	uint64_t x = ((const x4_prof_nodepair *)a)->node, y = ((const x4_prof_nodepair *)b)->node;
	return (x > y) - (x < y);
}

static const x4_prof_nodepair *find_node(const x4_prof_nodepair *v, size_t n, uint64_t node)
{
	x4_prof_nodepair key = { .node = node };
	return n ? bsearch(&key, v, n, sizeof key, x4_prof_cmp_node) : NULL;
}

int64_t x4_prof_node_slot(const x4_prof_nodepair *slots, size_t n_slots,
			  const x4_prof_nodepair *clones, size_t n_clones, uint64_t node)
{
	/* A graph instantiated from a clone of the captured one would add a
	 * link; ids are unique, but the bound keeps a bad map from looping. */
	for (size_t hops = 0; node && hops <= n_clones; hops++) {
		const x4_prof_nodepair *s = find_node(slots, n_slots, node);
		if (s)
			return (int64_t)s->to;
		const x4_prof_nodepair *c = find_node(clones, n_clones, node);
		if (!c)
			break;
		node = c->to;
	}
	return -1;
}

/* The step whose bracket holds t (a copy outside any launch we saw). */
static int step_at(const x4_prof *p, uint64_t t)
{
	for (size_t s = 0; s < p->n_steps; s++)
		if (t >= p->steps[s].t0 && t <= p->steps[s].t1)
			return (int)s;
	return -1;
}

/* Sorting indexes into p->evs needs p, and qsort_r is not C11: the one
 * profile being finished (finishing is not reentrant). */
static const x4_prof *g_sort;

static int cmp_graph_ev(const void *a, const void *b)
{
	const x4_prof_ev *x = &g_sort->evs[*(const size_t *)a], *y = &g_sort->evs[*(const size_t *)b];
	if (x->corr != y->corr)
		return (x->corr > y->corr) - (x->corr < y->corr);
	return (x->t0 > y->t0) - (x->t0 < y->t0);
}

static int cmp_step_op(const void *a, const void *b)
{
	const x4_prof_ev *x = &g_sort->evs[*(const size_t *)a], *y = &g_sort->evs[*(const size_t *)b];
	if (x->step != y->step)
		return x->step - y->step;
	if (x->op != y->op)
		return x->op - y->op;
	return (x->t0 > y->t0) - (x->t0 < y->t0);
}

static int cmp_step_t0(const void *a, const void *b)
{
	const x4_prof_ev *x = &g_sort->evs[*(const size_t *)a], *y = &g_sort->evs[*(const size_t *)b];
	if (x->step != y->step)
		return x->step - y->step;
	return (x->t0 > y->t0) - (x->t0 < y->t0);
}

/* The operations of the replays' kernel records, ix[0..n) by replay then
 * start: a record's node names its captured kernel exactly; a record whose
 * node is not known takes the kernel at its place in the replay. */
static int match_replays(x4_prof *p, const size_t *ix, size_t n, x4_err *e)
{
	size_t n_slots = 0;
	for (size_t i = 0; i < p->n_tmpl_kernels; i++)
		n_slots += p->tmpl_kernels[i].node != 0;
	x4_prof_nodepair *slots = malloc((n_slots ? n_slots : 1) * sizeof *slots);
	if (!slots)
		return x4_err_set(e, X4_ENOMEM, "out of memory tabulating the profile");
	n_slots = 0;
	for (size_t i = 0; i < p->n_tmpl_kernels; i++)
		if (p->tmpl_kernels[i].node)
			slots[n_slots++] = (x4_prof_nodepair){ p->tmpl_kernels[i].node, i };
	qsort(slots, n_slots, sizeof *slots, x4_prof_cmp_node);
	if (p->n_clones) /* (clones is NULL when no graph was instantiated: qsort takes no NULL) */
		qsort(p->clones, p->n_clones, sizeof *p->clones, x4_prof_cmp_node);
	for (size_t i = 0; i < n;) {
		uint32_t corr = p->evs[ix[i]].corr;
		const x4_prof_tmpl *tp = &p->tmpls[find_launch(p, corr)->tmpl];
		for (size_t j = 0; i < n && p->evs[ix[i]].corr == corr; i++, j++) {
			x4_prof_ev *ev = &p->evs[ix[i]];
			int64_t s = x4_prof_node_slot(slots, n_slots, p->clones, p->n_clones,
						      ev->node);
			p->graph_kernels++;
			p->by_node += s >= 0;
			if (s >= 0)
				ev->op = p->tmpl_kernels[s].op;
			else if (j < tp->n)
				ev->op = p->tmpl_kernels[tp->first + j].op;
		}
	}
	free(slots);
	return 0;
}

/* GPU: each record's step and operation. */
static int resolve(x4_prof *p, x4_err *e)
{
	qsort(p->launches, p->n_launches, sizeof *p->launches, cmp_launch);
	size_t n_graph = 0;
	for (size_t i = 0; i < p->n_evs; i++) {
		x4_prof_ev *ev = &p->evs[i];
		const x4_prof_launch *l = find_launch(p, ev->corr);
		ev->op = -1;
		ev->step = l ? l->step : step_at(p, ev->t0);
		if (l && l->tmpl < 0 && ev->kind == X4_PROF_EV_KERNEL)
			ev->op = l->op;
		else if (l && l->tmpl >= 0 && ev->kind == X4_PROF_EV_KERNEL)
			n_graph++;
	}
	/* A replay's kernels together, in start order for those whose node is
	 * not known. */
	size_t *ix = malloc((n_graph ? n_graph : 1) * sizeof *ix);
	if (!ix)
		return x4_err_set(e, X4_ENOMEM, "out of memory tabulating the profile");
	size_t k = 0;
	for (size_t i = 0; i < p->n_evs; i++) {
		const x4_prof_launch *l = find_launch(p, p->evs[i].corr);
		if (l && l->tmpl >= 0 && p->evs[i].kind == X4_PROF_EV_KERNEL)
			ix[k++] = i;
	}
	g_sort = p;
	qsort(ix, n_graph, sizeof *ix, cmp_graph_ev);
	int rc = match_replays(p, ix, n_graph, e);
	free(ix);
	if (rc)
		return rc;
	/* What the trunk enqueued in a graphed step: its graph's kernel nodes. */
	for (size_t i = 0; i < p->n_launches; i++) {
		const x4_prof_launch *l = &p->launches[i];
		if (l->tmpl >= 0 && l->step >= 0 && l->outer) {
			const x4_prof_tmpl *tp = &p->tmpls[l->tmpl];
			x4_prof_step *ps = &p->steps[l->step];
			ps->enqueued += tp->nodes >= 0 ? tp->nodes : (int64_t)tp->n;
			if (tp->pdl_edges >= 0) {
				ps->pdl_edges = X4_MAX(ps->pdl_edges, 0) + tp->pdl_edges;
				ps->full_edges = X4_MAX(ps->full_edges, 0) + tp->full_edges;
			}
		}
	}
	return 0;
}

/* The bytes of one operation's kernels in one step: ix[0..n) in start order. */
static void op_bytes(x4_prof *p, const size_t *ix, size_t n)
{
	x4_prof_ev *first = &p->evs[ix[0]];
	if (first->op < 0) {
		for (size_t j = 0; j < n; j++)
			p->evs[ix[j]].bytes = 0;
		return;
	}
	const x4_prof_opinfo *o = &p->ops[first->op];
	uint64_t part[X4_PROF_PARTS] = { o->bytes[0], o->nparts > 1 ? o->bytes[1] : 0 };
	bool unknown = part[0] == X4_PROF_UNKNOWN || part[1] == X4_PROF_UNKNOWN;
	int rows = o->rows_rel + p->steps[first->step].pos;
	part[0] += o->row_bytes * (uint64_t)(rows > 0 ? rows : 0);
	size_t longest = 0;
	for (size_t j = 0; j < n; j++) {
		x4_prof_ev *ev = &p->evs[ix[j]];
		ev->bytes = unknown ? X4_PROF_UNKNOWN : 0;
		if (ev->t1 - ev->t0 > p->evs[ix[longest]].t1 - p->evs[ix[longest]].t0)
			longest = j;
	}
	if (unknown)
		return;
	if ((int)n == o->nparts) {
		for (size_t j = 0; j < n; j++)
			p->evs[ix[j]].bytes = part[j];
	} else {
		p->evs[ix[longest]].bytes = part[0] + part[1];
	}
}

/* ---- the tables ---- */

static double us(uint64_t ns) { return (double)ns / 1e3; }

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Mean, median and extremes of v[0..n) (sorts v). */
static void stats(double *v, int n, double *mean, double *med, double *mn, double *mx)
{
	if (n < 1) {
		*mean = *med = *mn = *mx = -1;
		return;
	}
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += v[i];
	*mean = sum / n;
	*med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
	*mn = v[0];
	*mx = v[n - 1];
}

static int cmp_row(const void *a, const void *b)
{
	double x = ((const x4_prof_row *)a)->us, y = ((const x4_prof_row *)b)->us;
	return (x < y) - (x > y);
}

static const char *ev_name(const x4_prof *p, const x4_prof_ev *ev)
{
	if (!p->gpu)
		return ev->op >= 0 ? p->ops[ev->op].label : "?";
	return ev->name >= 0 ? p->names[ev->name] : "?";
}

/* ev into row r, with its exposed time (see tabulate). */
static void row_add(x4_prof_row *r, const x4_prof_ev *ev, uint64_t exposed_ns)
{
	double d = us(ev->t1 - ev->t0);
	if (r->launches == 0 || d < r->min_us)
		r->min_us = d;
	if (r->launches == 0 || d > r->max_us)
		r->max_us = d;
	r->launches += 1;
	r->us += d;
	r->exposed_us += us(exposed_ns);
	if (ev->bytes == X4_PROF_UNKNOWN || r->bytes < 0)
		r->bytes = -1;
	else
		r->bytes += (double)ev->bytes;
}

/* The row of (name, cls) in kr[0..*nk), added when there is none. */
static x4_prof_row *kernel_row(x4_prof_row *kr, int *nk, const char *name, int cls)
{
	int r = 0;
	while (r < *nk && (kr[r].cls != cls || strcmp(kr[r].name, name) != 0))
		r++;
	if (r == *nk) {
		kr[r].name = name;
		kr[r].cls = cls;
		(*nk)++;
	}
	return &kr[r];
}

/* ix: the counted steps' kernel events, by step then start. */
static int tabulate(x4_prof *p, const size_t *ix, size_t n, x4_err *e)
{
	x4_prof_summary *s = &p->sum;
	int steps = 0;
	for (size_t i = 0; i < p->n_steps; i++)
		steps += p->steps[i].counted;
	s->steps = steps;
	s->gpu = p->gpu;
	/* Rows: at most one per (name, class) and one per class. */
	p->rows = calloc(n + X4_PC_COUNT + 1, sizeof *p->rows);
	double *wall = malloc(sizeof(double) * (size_t)(steps + 1));
	double *sub = malloc(sizeof(double) * (size_t)(steps + 1));
	if (!p->rows || !wall || !sub) {
		free(wall);
		free(sub);
		return x4_err_set(e, X4_ENOMEM, "out of memory tabulating the profile");
	}
	x4_prof_row *kr = p->rows, cr[X4_PC_COUNT];
	memset(cr, 0, sizeof cr);
	int nk = 0;
	double total_bytes = 0;
	bool bytes_unknown = false;
	/* One sweep of each step's kernels in start order makes the rows and
	 * the step's figures.  end is the latest end so far; a kernel's
	 * exposed time is what it runs past end: all of it when kernels do not
	 * overlap; under programmatic dependent launch, where a kernel starts
	 * before its predecessor ends and waits inside, only what it runs past
	 * that end.  (Kernels side by side on two streams: the time they share
	 * goes to the one that started first.)  The exposed times sum to the
	 * step's union of kernel time. */
	int w = 0;
	uint64_t kernel_ns = 0, busy_ns = 0, gap_ns = 0, gap_max = 0, ngaps = 0;
	for (size_t i = 0, j; i < n; i = j) {
		int st = p->evs[ix[i]].step;
		const x4_prof_step *ps = &p->steps[st];
		uint64_t end = 0;
		for (j = i; j < n && p->evs[ix[j]].step == st; j++) {
			const x4_prof_ev *ev = &p->evs[ix[j]];
			uint64_t from = ev->t0 > end ? ev->t0 : end;
			uint64_t exposed = ev->t1 > from ? ev->t1 - from : 0;
			busy_ns += exposed;
			kernel_ns += ev->t1 - ev->t0;
			s->outside += ev->t0 < ps->t0 || ev->t1 > ps->t1;
			if (j > i && ev->t0 > end) {
				uint64_t g = ev->t0 - end;
				gap_ns += g;
				ngaps++;
				gap_max = g > gap_max ? g : gap_max;
			}
			end = ev->t1 > end ? ev->t1 : end;
			int cls = ev->op >= 0 ? p->ops[ev->op].cls : X4_PC_OTHER;
			row_add(kernel_row(kr, &nk, ev_name(p, ev), cls), ev, exposed);
			row_add(&cr[cls], ev, exposed);
			s->unattributed += ev->op < 0;
			if (ev->bytes == X4_PROF_UNKNOWN)
				bytes_unknown = true;
			else
				total_bytes += (double)ev->bytes;
		}
		p->steps[st].kernels = (int64_t)(j - i);
	}
	for (size_t i = 0; i < p->n_steps; i++) {
		const x4_prof_step *ps = &p->steps[i];
		if (!ps->counted)
			continue;
		if (!w) {
			s->pos = ps->pos;
			s->tokens = ps->pos_end - ps->pos;
		}
		s->kernels_total += ps->kernels;
		s->enqueued_total += ps->enqueued;
		if (ps->pdl_edges >= 0) {
			s->graphed_steps++;
			s->pdl_edges_total += ps->pdl_edges;
			s->full_edges_total += ps->full_edges;
		}
		s->mismatched_steps += ps->kernels != ps->enqueued;
		wall[w] = us(ps->t1 - ps->t0);
		sub[w++] = p->gpu ? us((ps->submit_end > ps->t0 ? ps->submit_end : ps->t0) - ps->t0) : -1;
	}
	double ns_ = steps ? (double)steps : 1;
	s->kernels = (double)s->kernels_total / ns_;
	s->kernel_us = us(kernel_ns) / ns_;
	s->busy_us = us(busy_ns) / ns_;
	s->gaps = (double)ngaps / ns_;
	s->gap_us = us(gap_ns) / ns_;
	s->gap_max_us = us(gap_max);
	s->bytes = bytes_unknown ? -1 : total_bytes / ns_;
	s->dropped = p->dropped;
	s->graph_kernels = p->graph_kernels;
	s->by_node = p->by_node;
	double ignored;
	stats(wall, w, &s->wall_us, &s->wall_median_us, &s->wall_min_us, &s->wall_max_us);
	stats(sub, w, &s->submit_us, &ignored, &s->submit_min_us, &s->submit_max_us);
	if (!p->gpu)
		s->submit_us = s->submit_min_us = s->submit_max_us = -1;
	free(wall);
	free(sub);

	double all_us = 0;
	for (int r = 0; r < nk; r++)
		all_us += kr[r].us;
	int nc = 0;
	x4_prof_row *crow = kr + nk;
	for (int c = 0; c < X4_PC_COUNT; c++) {
		if (!cr[c].launches)
			continue;
		crow[nc] = cr[c];
		crow[nc].name = class_names[c];
		crow[nc++].cls = c;
	}
	x4_prof_row *sets[2] = { kr, crow };
	int counts[2] = { nk, nc };
	for (int k = 0; k < 2; k++)
		for (int r = 0; r < counts[k]; r++) {
			x4_prof_row *row = &sets[k][r];
			row->share = all_us > 0 ? row->us / all_us : 0;
			row->launches /= ns_;
			row->us /= ns_;
			row->exposed_us /= ns_;
			if (row->bytes > 0)
				row->bytes /= ns_;
		}
	qsort(kr, (size_t)nk, sizeof *kr, cmp_row);
	qsort(crow, (size_t)nc, sizeof *crow, cmp_row);
	p->n_kernel_rows = nk;
	p->n_class_rows = nc;
	return 0;
}

int x4_prof_finish(x4_prof *p, x4_prof_result *r, x4_err *e)
{
	memset(r, 0, sizeof *r);
	if (p->finished)
		return x4_err_set(e, X4_EINVAL, "the profile is already finished");
	int rc = detach(p, e);
	if (rc)
		return rc;
	p->finished = true;
	if (p->oom)
		return x4_err_set(e, X4_ENOMEM, "out of memory while profiling (the records of "
				  "%zu steps)", p->n_steps);
	if (p->gpu && (rc = resolve(p, e)))
		return rc;
	/* The counted steps' kernels, by step then start. */
	size_t n = 0;
	for (size_t i = 0; i < p->n_evs; i++) {
		const x4_prof_ev *ev = &p->evs[i];
		n += ev->kind == X4_PROF_EV_KERNEL && ev->step >= 0 && p->steps[ev->step].counted;
	}
	size_t *ix = malloc((n ? n : 1) * sizeof *ix);
	if (!ix)
		return x4_err_set(e, X4_ENOMEM, "out of memory tabulating the profile");
	size_t k = 0;
	for (size_t i = 0; i < p->n_evs; i++) {
		const x4_prof_ev *ev = &p->evs[i];
		if (ev->kind == X4_PROF_EV_KERNEL && ev->step >= 0 && p->steps[ev->step].counted)
			ix[k++] = i;
	}
	/* The CPU trunk's count: the operations it marked in each step. */
	if (!p->gpu)
		for (size_t i = 0; i < p->n_ops; i++)
			if (p->ops[i].step >= 0)
				p->steps[p->ops[i].step].enqueued++;
	g_sort = p;
	qsort(ix, n, sizeof *ix, cmp_step_op);
	for (size_t i = 0, j; i < n; i = j) {
		const x4_prof_ev *a = &p->evs[ix[i]];
		for (j = i + 1; j < n; j++) {
			const x4_prof_ev *b = &p->evs[ix[j]];
			/* CPU events are one operation each; GPU ones share it. */
			if (b->step != a->step || b->op != a->op || a->op < 0)
				break;
		}
		op_bytes(p, ix + i, j - i);
	}
	qsort(ix, n, sizeof *ix, cmp_step_t0);
	rc = tabulate(p, ix, n, e);
	free(ix);
	if (rc)
		return rc;
	r->kernels = p->rows;
	r->n_kernels = p->n_kernel_rows;
	r->classes = p->rows + p->n_kernel_rows;
	r->n_classes = p->n_class_rows;
	r->s = p->sum;
	return 0;
}
