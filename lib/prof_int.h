/*
 * prof_int.h - the profiler's state (lib/prof/prof.c, prof_hook.c, prof_cupti.c,
 * trace.c) and the hooks the trunks call as they enqueue each operation.
 *
 * A trunk holds `x4_prof *prof`, NULL unless x4_prof_attach set it, so a
 * hook costs one NULL check when nobody profiles.  What a mark says:
 *   - the operation's class and a static label ("attn_q_b");
 *   - the bytes it must read at least once (its weights; the latent cache
 *     rows of attention), per kernel in launch order when the trunk knows
 *     that its kernels read different parts (the routed experts' gate/up
 *     launch and down launch), else one figure for the whole operation.
 * On the GPU the mark is the "current operation" that CUPTI's launch
 * callback (lib/prof/prof_cupti.c) ties each kernel launch to, and a graph's
 * capture is where a replayed step's kernels learn their operations (by the
 * graph node each was captured as).  On the CPU a mark closes the previous
 * operation's wall-clock event and opens the next one.
 */
#ifndef X4_PROF_INT_H
#define X4_PROF_INT_H

#include "x4_int.h"

#include <pthread.h>

/* Bytes the host cannot know (the experts a prefill chunk's routes touch
 * are chosen on the device). */
#define X4_PROF_UNKNOWN UINT64_MAX
#define X4_PROF_PARTS 2

/* One operation as the trunk marked it. */
typedef struct x4_prof_opinfo {
	const char *label;   /* static */
	int cls;             /* enum x4_prof_class */
	int nparts;          /* 1, or 2 when its two kernels read bytes[0] and bytes[1] */
	uint64_t bytes[X4_PROF_PARTS]; /* weights, or X4_PROF_UNKNOWN */
	uint64_t row_bytes;  /* latent cache bytes a position it reads (0: none) */
	int rows_rel;        /* positions it reads, less its step's starting position */
	int step;            /* the step it was marked in */
	int launches;        /* GPU: kernels launched while it was current */
} x4_prof_opinfo;

enum { X4_PROF_EV_KERNEL = 0, X4_PROF_EV_MEMCPY = 1, X4_PROF_EV_MEMSET = 2 };

/* One kernel, copy or fill (GPU), or one operation's run (CPU). */
typedef struct x4_prof_ev {
	uint64_t t0, t1;     /* ns on the profiler's clock */
	uint32_t corr;       /* GPU: CUPTI's correlation id */
	int kind;            /* X4_PROF_EV_* */
	int name;            /* GPU: into names; CPU: -1 (the op's label) */
	int op;              /* into ops, -1 none */
	int step;            /* into steps, -1 outside every step */
	uint64_t bytes;      /* copies: their size; kernels: set by the finish */
	uint64_t node;       /* GPU kernel: CUPTI's id of the graph node that ran it, 0 none */
} x4_prof_ev;

enum { X4_PROF_API_SUBMIT = 0, X4_PROF_API_SYNC = 1, X4_PROF_API_OTHER = 2 };

/* A host API call (GPU): a submission or a synchronisation. */
typedef struct x4_prof_api {
	uint64_t t0, t1;
	const char *name;    /* CUPTI's function name (static) */
	int kind;            /* X4_PROF_API_* */
	int step;
} x4_prof_api;

/* A kernel launch or a graph launch seen by the launch callback, by
 * correlation id (appended in increasing order). */
typedef struct x4_prof_launch {
	uint32_t corr;
	int op;              /* kernel launch: its operation */
	int step;
	int tmpl;            /* graph launch: the template it replays; -1 a kernel launch */
	bool outer;          /* not a driver call inside the runtime's launch */
} x4_prof_launch;

/* A kernel launched while a stream was captured. */
typedef struct x4_prof_tkernel {
	int op;              /* the operation current at its launch, -1 none */
	uint64_t node;       /* CUPTI's id of its node in the captured graph, 0 unknown */
} x4_prof_tkernel;

/* A graph node's id and the one it leads to: an instantiated graph's node
 * and the captured node it was cloned from, or a captured kernel's node and
 * its index in tmpl_kernels. */
typedef struct x4_prof_nodepair {
	uint64_t node, to;
} x4_prof_nodepair;

/* A captured graph: its kernels in capture order. */
typedef struct x4_prof_tmpl {
	size_t first, n;     /* into tmpl_kernels */
	int64_t nodes;       /* kernel nodes the trunk counted in the graph; -1 unknown */
	int64_t pdl_edges;   /* its dependencies between kernel nodes: programmatic ones */
	int64_t full_edges;  /* and full ones (-1 each: unknown) */
} x4_prof_tmpl;

typedef struct x4_prof_step {
	uint64_t t0, t1;     /* host, bracket to bracket */
	uint64_t submit_end; /* the end of its last submission (GPU) */
	int pos, pos_end;    /* the trunk's position at its start and end */
	bool counted;
	int64_t enqueued;    /* kernels the trunk enqueued in it */
	int64_t pdl_edges, full_edges; /* its graph's (x4_prof_tmpl); -1 eager */
	int64_t kernels;     /* kernel records that fell in it (the finish) */
} x4_prof_step;

struct x4_prof {
	x4_trunk *t;
	bool gpu;
	bool attached;
	uint64_t (*now)(void); /* the clock every timestamp is on */
	bool oom;              /* an append failed: finish reports it */

	x4_prof_opinfo *ops;
	size_t n_ops, cap_ops;
	int cur_op;            /* what a launch now belongs to; -1 none */
	int cur_ev;            /* CPU: the open event, -1 none */

	x4_prof_step *steps;
	size_t n_steps, cap_steps;
	int cur_step;          /* -1 between brackets */

	pthread_mutex_t mu;    /* evs and names: CUPTI delivers from its own thread */
	x4_prof_ev *evs;
	size_t n_evs, cap_evs;
	char **names;
	const char **name_keys; /* CUPTI's pointer for each name, a cache */
	size_t n_names, cap_names;
	uint64_t dropped;
	int64_t graph_kernels, by_node; /* a replay's kernels; matched by graph node */

	x4_prof_api *apis;
	size_t n_apis, cap_apis;
	x4_prof_launch *launches;
	size_t n_launches, cap_launches;
	int launch_depth;      /* a launch API inside another (counted once) */

	x4_prof_tkernel *tmpl_kernels;
	size_t n_tmpl_kernels, cap_tmpl_kernels;
	x4_prof_tmpl *tmpls;
	size_t n_tmpls, cap_tmpls;
	x4_prof_nodepair *clones; /* instantiated kernel node -> the node it copies */
	size_t n_clones, cap_clones;
	bool capturing;
	size_t capture_first;  /* tmpl_kernels index where the capture began */
	int last_tmpl;         /* the template the next graph launch replays */

	/* the tables (x4_prof_finish) */
	x4_prof_row *rows;     /* kernel rows then class rows */
	int n_kernel_rows, n_class_rows;
	x4_prof_summary sum;
	bool finished;
};

/* Append one zeroed element to a growing array; NULL (and p->oom) when
 * memory runs out. */
void *x4_prof_push(x4_prof *p, void **arr, size_t *n, size_t *cap, size_t size);
#define X4_PROF_PUSH(p, arr) \
	((__typeof__(p->arr))x4_prof_push((p), (void **)&(p)->arr, &(p)->n_##arr, \
					  &(p)->cap_##arr, sizeof *(p)->arr))

/* The monotonic clock in ns (the CPU profiler's). */
uint64_t x4_prof_mono_ns(void);

/* Orders x4_prof_nodepair by node. */
int x4_prof_cmp_node(const void *a, const void *b);
/* The index in tmpl_kernels of the captured kernel that graph node `node`
 * ran: found in slots (captured node -> index) directly or after following
 * clones (node -> the node it was cloned from), both sorted by node; -1
 * when neither knows it. */
int64_t x4_prof_node_slot(const x4_prof_nodepair *slots, size_t n_slots,
			  const x4_prof_nodepair *clones, size_t n_clones, uint64_t node);

/* ---- the trunk's hooks ---- */
void x4_prof_op_(x4_prof *p, int cls, const char *label, int nparts, uint64_t b0, uint64_t b1,
		 uint64_t row_bytes, int rows);
void x4_prof_end_(x4_prof *p);

/* An operation reading `bytes` (its weights; X4_PROF_UNKNOWN). */
static inline void x4_prof_op(x4_prof *p, int cls, const char *label, uint64_t bytes)
{
	if (p)
		x4_prof_op_(p, cls, label, 1, bytes, 0, 0, 0);
}
/* One whose two kernels read b0 and b1, in launch order. */
static inline void x4_prof_op2(x4_prof *p, int cls, const char *label, uint64_t b0, uint64_t b1)
{
	if (p)
		x4_prof_op_(p, cls, label, 2, b0, b1, 0, 0);
}
/* Attention over the cache: row_bytes a position, positions [0, rows). */
static inline void x4_prof_op_cache(x4_prof *p, int cls, const char *label, uint64_t row_bytes,
				    int rows)
{
	if (p)
		x4_prof_op_(p, cls, label, 1, 0, 0, row_bytes, rows);
}
/* The end of the last operation (CPU: closes its event). */
static inline void x4_prof_end(x4_prof *p)
{
	if (p)
		x4_prof_end_(p);
}

#ifdef X4_HAVE_CUDA
#include <cuda_runtime_api.h>
/* The trunk's own count of what a graphed step enqueues: the kernel nodes
 * of the step graph it has just instantiated. */
void x4_prof_graph_(x4_prof *p, cudaGraph_t g);
static inline void x4_prof_graph(x4_prof *p, cudaGraph_t g)
{
	if (p)
		x4_prof_graph_(p, g);
}
#endif

/* ---- the CUPTI side (lib/prof/prof_cupti.c) ---- */
int x4_prof_cupti_start(x4_prof *p, x4_err *e);
/* Flush every record (after a device synchronisation) and stop. */
int x4_prof_cupti_stop(x4_prof *p, x4_err *e);
uint64_t x4_prof_cupti_now(void);

#endif
