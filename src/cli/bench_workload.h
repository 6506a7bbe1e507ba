/* bench_workload — the requests `nightshift bench` runs (cmd_bench.c): their prompts and how they end.
 *
 *   random  prompts of random token ids (an optional shared prefix, then prompt-len unique ids); greedy,
 *           EOS ignored, so every request generates exactly gen-len tokens. Measures the engine.
 *   copy    prompts whose answer repeats a long span of the prompt: "repeat the following text exactly"
 *           and "fix the spelling mistakes in" (the passage then has typos), rendered with the model's chat
 *           template (plain text when it has none); each passage is generated English of about prompt-len
 *           tokens, different for every request. Greedy, ending at EOS or gen-len. Measures prompt-lookup
 *           decoding (--lookup): the answers are long copies of the prompt.
 * Both are deterministic functions of their arguments (the seed included).
 */
#ifndef NS_CLI_BENCH_WORKLOAD_H
#define NS_CLI_BENCH_WORKLOAD_H

#include <stdint.h>

#include "tokenizer/chat.h"
#include "tokenizer/tok.h"
#include "util/err.h"

enum bench_workload_kind { BENCH_WORKLOAD_RANDOM, BENCH_WORKLOAD_COPY };

struct bench_workload {
    enum bench_workload_kind kind;
    int32_t n;          /* requests */
    int32_t *ids;       /* (n, stride) prompt i at ids + i * stride */
    int32_t *len;       /* (n) prompt lengths */
    int32_t stride;     /* the longest prompt */
    int64_t total;      /* sum of len */
    int ignore_eos;     /* random: 1 */
};

/* "random" or "copy"; -1 if name is neither. */
int bench_workload_parse(const char *name, enum bench_workload_kind *out);
const char *bench_workload_name(enum bench_workload_kind k);

/* n prompts of shared_prefix + prompt_len random ids in [0, n_vocab) (the prefix the same for all). */
int bench_workload_random(int32_t n, int32_t n_vocab, int32_t shared_prefix, int32_t prompt_len, uint64_t seed,
                          struct bench_workload *out, struct err *e);
/* n copy prompts with passages of about passage_tokens tokens (at least 8), rendered with the chat template
 * family fam (CHAT_NONE: plain text) and tokenized with v. */
int bench_workload_copy(enum chat_family fam, const tok_vocab *v, int32_t n, int32_t passage_tokens, uint64_t seed,
                        struct bench_workload *out, struct err *e);
/* Frees the arrays; safe on a zeroed workload. */
void bench_workload_free(struct bench_workload *w);

#endif
