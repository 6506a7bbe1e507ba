/* cuda_graph — decode steps of the CUDA backend as CUDA graphs.
 *
 * Why: a step launches ~10 kernels a layer (330 for an 8B model). At batch 1 each runs for a few
 * microseconds to a few tens, so the gaps between launches are a visible share of the step; a graph
 * launches them all at once with shorter gaps.
 *
 * What is captured: cuda_enqueue_step for one uploaded batch of n rows (layers and output head), not the
 * upload and not the draws. Its kernels read the batch (tokens, positions, block tables, attention items)
 * from the batch buffer, whose layout is a function of (n_rows, n_logits, n_seqs) alone (cuda.cu,
 * cuda_upload_batch), so a graph replays correctly for any later batch of the same shape as long as the
 * values baked into its nodes are the same: the buffers' addresses (cuda_ctx.gen, bumped when one moves,
 * and the batch buffer's address), the number of sequences and the attention plan's counts, which set
 * grid sizes. That is the key (struct cuda_graph_key). Steps whose rows all draw on the device fit, drafts
 * included (a sequence with drafts has several rows). Graphs are kept by row count, CUDA_GRAPH_WAYS of
 * them each; a step whose key none of them has is captured again into the least recently launched one,
 * updating its executable (cudaGraphExecUpdate; a new instantiation where that fails). At batch 1 the plan
 * changes when the sequence enters a new chunk of CUDA_ATT_CHUNK positions, so one capture serves ~128
 * steps; with drafts, the same row count comes with different plans (which sequence has how many rows),
 * which the ways keep apart.
 *
 * The arithmetic is that of cuda_enqueue_step itself: a graph gives the same bits (tests/test_cuda_engine.c,
 * engine_graphs_on_vs_off).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_ctx.h"

int cuda_graph_fits(const struct cuda_ctx *c, const struct step_batch *b, const float *logits)
{
    return c->graphs_on && !c->prof_on && !logits && b->n_rows <= CUDA_GRAPH_ROWS && b->n_seqs <= CUDA_GRAPH_SEQS &&
           b->n_logits == b->n_rows && b->n_hidden == 0;
}

static int cuda_graph_key_eq(const struct cuda_graph_key *a, const struct cuda_graph_key *b)
{
    return a->gen == b->gen && a->batch_d == b->batch_d && a->n_seqs == b->n_seqs && a->n_items == b->n_items &&
           a->n_split_rows == b->n_split_rows && a->max_item_rows == b->max_item_rows &&
           a->n_split_items == b->n_split_items;
}

/* Captures cuda_enqueue_step into g->exec (updated in place where possible). */
static int cuda_graph_capture(struct cuda_ctx *c, struct cuda_graph *g, const struct cuda_batch_dev *bd,
                              int32_t n_logits, struct err *e)
{
    cudaGraph_t graph = NULL;
    CU_TRY(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal));
    const int rc = cuda_enqueue_step(c, bd, n_logits, e);
    const cudaError_t end = cudaStreamEndCapture(c->st, &graph); /* always: the stream leaves capture mode */
    if (rc) {
        if (graph) cudaGraphDestroy(graph);
        return err_prefix(e, "cuda graph capture");
    }
    CU_TRY(end);
    cudaError_t st = cudaErrorUnknown;
    if (g->exec) {
        cudaGraphExecUpdateResultInfo info;
        st = cudaGraphExecUpdate(g->exec, graph, &info);
        if (st != cudaSuccess) {
            cudaGetLastError(); /* clear it: a new instantiation follows */
            cudaGraphExecDestroy(g->exec);
            g->exec = NULL;
        }
    }
    if (!g->exec) st = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    CU_TRY(st);
    c->n_graph_captures++;
    return 0;
}

/* The way of ways that holds key, else NULL; *lru: the way to capture into then (an empty one first). */
static struct cuda_graph *cuda_graph_find(struct cuda_graph *ways, const struct cuda_graph_key *key,
                                          struct cuda_graph **lru)
{
    *lru = &ways[0];
    for (int i = 0; i < CUDA_GRAPH_WAYS; i++) {
        struct cuda_graph *g = &ways[i];
        if (g->exec && cuda_graph_key_eq(&g->key, key)) return g;
        if ((*lru)->exec && (!g->exec || g->used < (*lru)->used)) *lru = g;
    }
    return NULL;
}

int cuda_graph_run(struct cuda_ctx *c, const struct cuda_batch_dev *bd, int32_t n_seqs, int32_t n_logits, struct err *e)
{
    const struct cuda_graph_key key = {c->gen, c->batch.d, n_seqs, bd->n_items, bd->n_split_rows, bd->max_item_rows,
                                       bd->n_split_items};
    struct cuda_graph *lru, *g = cuda_graph_find(c->graphs[bd->n_rows], &key, &lru);
    if (!g) {
        g = lru;
        g->key.gen = -1; /* invalid until the capture succeeds */
        if (cuda_graph_capture(c, g, bd, n_logits, e)) return -1;
        g->key = key;
    }
    CU_TRY(cudaGraphLaunch(g->exec, c->st));
    g->used = ++c->n_graph_launches;
    return 0;
}

void cuda_graph_free(struct cuda_ctx *c)
{
    for (int i = 0; i <= CUDA_GRAPH_ROWS; i++)
        for (int w = 0; w < CUDA_GRAPH_WAYS; w++) {
            if (c->graphs[i][w].exec) cudaGraphExecDestroy(c->graphs[i][w].exec);
            c->graphs[i][w].exec = NULL;
        }
    c->gen++;
}
