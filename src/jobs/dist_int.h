/* dist_int — what dist.c (serialization, figures) and dist_mpi.c (the MPI side) share. Private to them. */
#ifndef NS_JOBS_DIST_INT_H
#define NS_JOBS_DIST_INT_H

#include "jobs/dist.h"

/* The coordinator's view of one worker (see the invariant in dist.h). */
struct dist_worker {
    int64_t handed, returned; /* requests */
    int asked;                /* an UP that wants more is waiting for its answer */
    int final;                /* its final is in */
    struct dist_rank_stats stats;
};

struct dist {
    int rank, size, local_rank, local_size;
    struct dist_worker *w; /* (size) coordinator only; w[0] unused */
    int n_final;           /* workers whose final is in */
    double t_serve;        /* seconds in dist_serve, not waiting */
    void *mpi;             /* dist_mpi.c: sends in flight */
};

int dist_buf_put(struct dist_buf *b, const void *src, size_t n);
int dist_buf_put_i64(struct dist_buf *b, int64_t v);
int64_t dist_buf_get_i64(struct dist_buf *b);
int dist_pack_stats(struct dist_buf *b, const struct dist_rank_stats *s);
void dist_unpack_stats(struct dist_buf *b, struct dist_rank_stats *s);
int64_t dist_peak_rss_bytes(void);
/* The integer value of environment variable name, -1 when unset or empty. */
int dist_env_int(const char *name);

#endif
