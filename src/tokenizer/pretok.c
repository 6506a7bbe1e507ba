/* pretok — regex pre-tokenizers for byte-level BPE.
 *
 * Invariant: a struct pretok holds 1..PRETOK_MAX_RX compiled patterns, all compiled with
 * PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, never modified after pretok_create(). Splitting is
 * lossless: the pieces handed to the callback, concatenated in order, are exactly the input bytes.
 *
 * The regexes are the published pre-tokenizer patterns of each model family's Hugging Face tokenizer (as
 * also listed per pre-tokenizer type by llama.cpp); PCRE2 handles \p{..}, (?i:..) and lookahead natively,
 * so they are used in their original form.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretok.h"

#include <pcre2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

#define PRETOK_MAX_RX 6

/* GPT-2 (also MPT, OLMo, Phi-2, ...): contractions, letters, digits, other symbols, whitespace. */
#define RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* Llama 3: case-insensitive contractions, a letter run with one leading non-letter, digits in groups of
 * up to three, symbol runs that swallow following newlines, newline runs, trailing whitespace. */
#define RX_LLAMA3                                                                                           \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen 2: as Llama 3 but every digit alone. */
#define RX_QWEN2                                                                                       \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* GPT-4o / Llama 4: case-aware letter runs with optional contraction suffix. */
#define RX_GPT4O                                                                                              \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"                                                                          \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"                                                                          \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Mistral Tekken. */
#define RX_TEKKEN                                                                                             \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"                  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"                  \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* DeepSeek LLM: cased letters (Lu/Ll/Lt ranges spelled out), ASCII + full-width punctuation, CJK. */
#define RX_DEEPSEEK_LETTERS                                                                                   \
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"          \
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"         \
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"               \
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"            \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"             \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"    \
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"   \
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"             \
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"               \
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"              \
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"             \
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"             \
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"          \
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"   \
    "\\x{1E900}-\\x{1E943}]+"
#define RX_DEEPSEEK_PUNCT "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+"
#define RX_DEEPSEEK_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define RX_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

struct pretok_def {
    const char *names; /* '|'-separated aliases; the first is the canonical one */
    int ignore_merges;
    int add_bos;
    const char *rx[PRETOK_MAX_RX];
};

static const struct pretok_def pretok_defs[] = {
    {"default",
     0,
     0,
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {"gpt-2|phi-2|mpt|olmo|jais|gigachat|jina-es|jina-de|jina-v2-es|jina-v2-de|exaone4", 0, 0, {RX_GPT2}},
    {"llama-bpe|llama3|llama-v3|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", 1, 1, {RX_LLAMA3}},
    {"dbrx|smaug-bpe", 0, 0, {RX_LLAMA3}},
    {"qwen2|deepseek-r1-qwen|megrez|stablelm2|hunyuan", 0, 0, {RX_QWEN2}},
    {"smollm|starcoder|refact|command-r|codeshell|exaone|minerva-7b", 0, 0, {"\\p{N}", RX_GPT2}},
    {"falcon", 0, 0, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2, "[0-9][0-9][0-9]"}},
    {"deepseek-llm",
     0,
     0,
     {"[\\r\\n]", RX_DEEPSEEK_LETTERS, RX_DEEPSEEK_PUNCT, "\\s+$", RX_DEEPSEEK_CJK, "\\p{N}+"}},
    {"deepseek-coder", 0, 0, {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RX_DEEPSEEK_CJK, "\\p{N}"}},
    {"deepseek-v3",
     0,
     0,
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
      " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"gpt-4o|llama4", 0, 0, {RX_GPT4O}},
    {"tekken", 1, 1, {RX_TEKKEN}},
    {"chatglm-bpe|glm4", 0, 0, {RX_LLAMA3}},
    {"bloom|poro-chat|gpt3-finnish", 0, 0, {RX_BLOOM}},
    {"viking", 0, 0, {RX_BLOOM, "\\p{N}"}},
};
#define PRETOK_N_DEFS (sizeof pretok_defs / sizeof pretok_defs[0])

struct pretok {
    char name[64];
    int n_rx;
    pcre2_code *rx[PRETOK_MAX_RX];
    int jit[PRETOK_MAX_RX];
};

static char pretok_supported_buf[1024];

static void pretok_supported_init(void)
{
    size_t n = 0;
    for (size_t i = 0; i < PRETOK_N_DEFS; i++) {
        for (const char *p = pretok_defs[i].names; *p && n + 3 < sizeof pretok_supported_buf; p++) {
            if (*p == '|') {
                pretok_supported_buf[n++] = ',';
                pretok_supported_buf[n++] = ' ';
            } else {
                pretok_supported_buf[n++] = *p;
            }
        }
        if (i + 1 < PRETOK_N_DEFS && n + 3 < sizeof pretok_supported_buf) {
            pretok_supported_buf[n++] = ',';
            pretok_supported_buf[n++] = ' ';
        }
    }
    pretok_supported_buf[n] = '\0';
}

/* "default, gpt-2, llama-bpe, ..." for error messages (a static buffer, built once). */
static const char *pretok_supported(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pretok_supported_init);
    return pretok_supported_buf;
}

static int pretok_name_in(const char *names, const char *name)
{
    size_t n = strlen(name);
    const char *p = names;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

void pretok_free(struct pretok *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_rx; i++) pcre2_code_free(p->rx[i]);
    free(p);
}

int pretok_create(const char *name, struct pretok **out, int *ignore_merges, int *add_bos, struct err *e)
{
    *out = NULL;
    const struct pretok_def *def = NULL;
    for (size_t i = 0; i < PRETOK_N_DEFS && !def; i++)
        if (pretok_name_in(pretok_defs[i].names, name)) def = &pretok_defs[i];
    if (!def)
        return err_set(e, "unknown pre-tokenizer '%.64s' (tokenizer.ggml.pre); supported: %s", name,
                       pretok_supported());
    struct pretok *p = calloc(1, sizeof *p);
    if (!p) return err_set(e, "out of memory");
    snprintf(p->name, sizeof p->name, "%s", name);
    for (int i = 0; i < PRETOK_MAX_RX && def->rx[i]; i++) {
        int code;
        PCRE2_SIZE at;
        p->rx[i] = pcre2_compile((PCRE2_SPTR)def->rx[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
        if (!p->rx[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof msg);
            pretok_free(p);
            return err_set(e, "pre-tokenizer '%s': regex %d does not compile at offset %zu: %s", name, i,
                           (size_t)at, (const char *)msg);
        }
        p->n_rx = i + 1;
        p->jit[i] = pcre2_jit_compile(p->rx[i], PCRE2_JIT_COMPLETE) == 0;
    }
    if (ignore_merges) *ignore_merges = def->ignore_merges;
    if (add_bos) *add_bos = def->add_bos;
    *out = p;
    return 0;
}

/* Per-call state: one match data block per level (levels recurse while the outer one iterates). */
struct pretok_run {
    const struct pretok *p;
    pcre2_match_data *md[PRETOK_MAX_RX];
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    pretok_piece_fn fn;
    void *user;
};

static int pretok_level(struct pretok_run *r, int level, const char *s, size_t n, struct err *e);

static int pretok_emit(struct pretok_run *r, int level, const char *s, size_t n, struct err *e)
{
    if (n == 0) return 0;
    if (level + 1 >= r->p->n_rx) return r->fn(r->user, s, n, e);
    return pretok_level(r, level + 1, s, n, e);
}

static int pretok_match(struct pretok_run *r, int level, const char *s, size_t n, size_t start, struct err *e)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        int rc = pcre2_match(r->p->rx[level], (PCRE2_SPTR)s, n, start, 0, r->md[level], r->mctx);
        if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH) return rc;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !r->jstack) {
            /* the default 32 KiB JIT stack ran out on a pathological piece: retry with a larger one */
            r->mctx = pcre2_match_context_create(NULL);
            r->jstack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
            if (!r->mctx || !r->jstack) return err_set(e, "out of memory (regex stack)");
            pcre2_jit_stack_assign(r->mctx, NULL, r->jstack);
            continue;
        }
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return err_set(e, "pre-tokenizer '%s': regex %d failed at byte %zu: %s", r->p->name, level, start,
                       (const char *)msg);
    }
    return err_set(e, "pre-tokenizer '%s': regex %d failed at byte %zu", r->p->name, level, start);
}

static int pretok_level(struct pretok_run *r, int level, const char *s, size_t n, struct err *e)
{
    size_t pos = 0;  /* next byte to search from */
    size_t done = 0; /* bytes already handed on */
    while (pos < n) {
        int rc = pretok_match(r, level, s, n, pos, e);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return -1;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->md[level]);
        size_t a = ov[0], b = ov[1];
        if (a > n || b > n || b < a || a < done) return err_set(e, "pre-tokenizer: bad match offsets");
        if (b == a) { /* empty match: not a piece; search again one character further */
            pos = a + utf8_char_len((const unsigned char *)s + a, n - a);
            continue;
        }
        if (pretok_emit(r, level, s + done, a - done, e)) return -1; /* the gap before the match */
        if (pretok_emit(r, level, s + a, b - a, e)) return -1;
        done = pos = b;
    }
    return pretok_emit(r, level, s + done, n - done, e);
}

int pretok_split(const struct pretok *p, const char *text, size_t len, pretok_piece_fn fn, void *user,
                 struct err *e)
{
    struct pretok_run r = {.p = p, .fn = fn, .user = user};
    int rc = 0;
    if (len == 0) return 0;
    for (int i = 0; i < p->n_rx; i++) {
        r.md[i] = pcre2_match_data_create_from_pattern(p->rx[i], NULL);
        if (!r.md[i]) {
            rc = err_set(e, "out of memory (regex match data)");
            goto done;
        }
    }
    rc = pretok_level(&r, 0, text, len, e);
done:
    for (int i = 0; i < p->n_rx; i++) pcre2_match_data_free(r.md[i]);
    if (r.mctx) pcre2_match_context_free(r.mctx);
    if (r.jstack) pcre2_jit_stack_free(r.jstack);
    return rc;
}
