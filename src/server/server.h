/* server — the engine thread, and the server's parts put together: the submit queue (server_queue), the
 * runtime's engine and what the request parser (openai) needs about the model.
 *
 *   server_init       the queue exists and answers 503 (loading) while the model loads
 *   server_start      the runtime is open: the engine thread starts, admission opens
 *   server_drain      stop admitting; let in-flight requests finish until a deadline, then cancel the rest
 *   server_stop       the engine thread exits (after a drain nothing is in flight)
 *   server_free
 *
 * The engine thread is the only one that touches the engine. Its loop: take new requests and
 * cancellations from the queue (sleeping there while the engine is idle), engine_add / engine_cancel them,
 * run one engine_step, post every streaming choice's new text (engine_peek_text), post finished results
 * (engine_take) and the engine's counters. Engine request ids are the choices' engine_id; the thread maps
 * them back to (request, choice). The batch lane's requests (server_lane: batches, at batch priority) are
 * taken and engine_added in the same loop; their results (ids with SERVER_LANE_ID_BIT) go back to the lane.
 * Admission (server_queue) is told the engine's interactive counts only: batch sequences yield to
 * interactive ones in the scheduler's queue. If a step fails (the engine can then only be freed), every request in
 * flight fails with the error, admission closes (503) and server_failed says why.
 *
 * Invariant (checked after every loop with params.debug_checks): every choice the engine holds is in the
 * id map exactly once, every other request it holds is the batch lane's (and all of them are of batch
 * priority), and the queue's and the lane's invariants (server_queue_check, server_lane_check) hold.
 */
#ifndef NS_SERVER_SERVER_H
#define NS_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/runtime.h"
#include "server/openai.h"
#include "server/server_lane.h"
#include "server/server_queue.h"
#include "tokenizer/chat.h"
#include "util/err.h"

struct server_params {
    const char *model_name;            /* what /v1/models and responses call the model (not copied) */
    const char *model_path;            /* the GGUF file (not copied) */
    const struct gen_params *defaults; /* generation defaults for requests (borrowed) */
    int parse_special;        /* special-token text in prompts becomes those tokens (run's default: 1) */
    int32_t max_queue;        /* requests waiting to start, at most; 0: 4 x max_seqs */
    int64_t max_queue_tokens; /* their reserved tokens, at most; 0: the KV pool's tokens */
    double max_wait;          /* seconds a queued request may be expected to wait (default 10) */
    int debug_checks;         /* check the invariants after every loop of the engine thread */
};

struct server_params server_default_params(void);

typedef struct server server;

int server_init(const struct server_params *p, server **out, struct err *e);
/* The runtime is open (rt->eng made by runtime_open; rt must outlive server_stop): starts the engine
 * thread and opens admission with limits from rt's KV pool. chat: how chat is rendered, its chat,
 * chat_jinja and chat_source fields as cli_model_chat sets them (no template and CHAT_NONE: chat requests
 * are refused); chat_jinja and chat_source are borrowed and must outlive the server. */
int server_start(server *s, struct runtime *rt, const struct job_model *chat, struct err *e);
server_queue *server_get_queue(server *s);
/* The batch lane (server/batches runs its batches through it). */
server_lane *server_get_lane(server *s);
/* What parsing needs; NULL while loading. */
const struct openai_ctx *server_openai(server *s);
const char *server_model_name(const server *s);
/* 1 when the engine thread stopped on an error (its message in msg). */
int server_failed(server *s, char *msg, size_t cap);
/* Stops admitting; waits until nothing is in flight or `seconds` have passed, then cancels what is left
 * and waits for it to end. Returns the number of requests cancelled. */
int32_t server_drain(server *s, double seconds);
/* Stops and joins the engine thread (no-op if it was never started). */
void server_stop(server *s);
void server_free(server *s);

#endif
