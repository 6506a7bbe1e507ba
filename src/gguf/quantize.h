/* quantize — converts a GGUF file to another target type (`nightshift quantize IN OUT TYPE`).
 *
 * Every tensor that gguf/qmix converts (the weight matrices) is written in the type qmix gives it: read row
 * by row, dequantized to f32 (quant_dequantize_row) and quantized again (quant_quantize_row); a tensor
 * already in that type is copied byte for byte, as is every tensor qmix does not convert (norms, biases).
 * All metadata is copied in its order, general.file_type set to the target's and
 * general.quantization_version to 2 (both added when absent). Tensors keep their order, names and shapes.
 *
 * Safety: the input is refused as the output (same file, also through a link); the output is written to
 * OUT.partial.PID next to it, synced, then renamed over OUT, so OUT is either the old file or the whole new
 * one, never a torn write; on failure the partial file is removed. Memory: the input is mapped; the writer
 * streams the output in chunks of at most 16 MiB, plus one f32 row per thread.
 *
 * Errors name the tensor: a type quantize cannot read (only when the tensor must be converted), a
 * non-finite value (with its row), a write failure.
 */
#ifndef NS_GGUF_QUANTIZE_H
#define NS_GGUF_QUANTIZE_H

#include <stdint.h>

#include "gguf/gguf.h"
#include "gguf/qmix.h"
#include "util/err.h"

struct quantize_params {
    const char *in_path;
    const char *out_path;
    const struct qmix_type *type; /* the target (qmix_find) */
    int pure;                     /* 1: no mix, every converted tensor in the base type (llama-quantize --pure) */
    int threads;                  /* rows are converted in parallel; <= 0: one thread per online core */
    /* (optional) Called before writing for each tensor whose rows are not whole blocks of the type the
     * rules want: it is written in `used` instead (qmix_fallback). */
    void (*on_fallback)(void *user, const char *tensor, uint64_t ne0, enum gguf_dtype wanted, enum gguf_dtype used);
    /* (optional) Called after each converted tensor: bytes of converted tensor data written so far, of the
     * total to convert. */
    void (*on_progress)(void *user, uint64_t done_bytes, uint64_t total_bytes);
    void *user;
};

struct quantize_report {
    uint64_t in_file_bytes, out_file_bytes;
    uint64_t in_tensor_bytes, out_tensor_bytes;
    uint64_t n_tensors;
    uint64_t n_converted; /* dequantized and quantized again */
    uint64_t n_copied;    /* written byte for byte (not converted, or already in their type) */
    uint64_t n_fallback;  /* written in a fallback type (on_fallback) */
    uint32_t in_types[GGUF_DTYPE_COUNT_MAX];  /* tensors per type in the input */
    uint32_t out_types[GGUF_DTYPE_COUNT_MAX]; /* ... and in the output */
};

/* Converts in_path to out_path (see the top of this file). Fills *r (also on failure, as far as it got). */
int quantize_file(const struct quantize_params *p, struct quantize_report *r, struct err *e);

#endif
