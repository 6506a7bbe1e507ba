/* gguf — reading and writing GGUF files (versions 2 and 3).
 *
 * A gguf_file is a validated, read-only view of a file mapped into memory (or of a caller's buffer).
 * gguf_open() checks every byte before returning: magic, version, counts bounded by the bytes left, string
 * and array lengths, known value types, no nested arrays, unique keys and tensor names, n_dims <= 4, dims
 * >= 1, overflow-safe element and byte counts, rows divisible by the block size, aligned offsets, every
 * tensor inside the file and no two overlapping. After a successful open nothing returned by this module
 * can point outside the mapping. Memory allocated is O(number of keys + tensors + array-of-string
 * elements), all bounded by the file size.
 *
 * Strings in GGUF are length-prefixed and not NUL-terminated: they come back as struct gguf_str views into
 * the mapping. Key names and tensor names are additionally copied NUL-terminated (they are used as C
 * strings everywhere). All views stay valid until gguf_close(). Host byte order must be little-endian.
 */
#ifndef NS_GGUF_H
#define NS_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Metadata value types (GGUF spec numbering). */
enum gguf_vtype {
    GGUF_VTYPE_UINT8 = 0,
    GGUF_VTYPE_INT8 = 1,
    GGUF_VTYPE_UINT16 = 2,
    GGUF_VTYPE_INT16 = 3,
    GGUF_VTYPE_UINT32 = 4,
    GGUF_VTYPE_INT32 = 5,
    GGUF_VTYPE_FLOAT32 = 6,
    GGUF_VTYPE_BOOL = 7,
    GGUF_VTYPE_STRING = 8,
    GGUF_VTYPE_ARRAY = 9,
    GGUF_VTYPE_UINT64 = 10,
    GGUF_VTYPE_INT64 = 11,
    GGUF_VTYPE_FLOAT64 = 12,
    GGUF_VTYPE_COUNT
};

/* Tensor element types (ggml numbering). Ids 4, 5 (removed Q4_2/Q4_3) and unknown ids are rejected. */
enum gguf_dtype {
    GGUF_DTYPE_F32 = 0,
    GGUF_DTYPE_F16 = 1,
    GGUF_DTYPE_Q4_0 = 2,
    GGUF_DTYPE_Q4_1 = 3,
    GGUF_DTYPE_Q5_0 = 6,
    GGUF_DTYPE_Q5_1 = 7,
    GGUF_DTYPE_Q8_0 = 8,
    GGUF_DTYPE_Q8_1 = 9,
    GGUF_DTYPE_Q2_K = 10,
    GGUF_DTYPE_Q3_K = 11,
    GGUF_DTYPE_Q4_K = 12,
    GGUF_DTYPE_Q5_K = 13,
    GGUF_DTYPE_Q6_K = 14,
    GGUF_DTYPE_Q8_K = 15,
    GGUF_DTYPE_IQ2_XXS = 16,
    GGUF_DTYPE_IQ2_XS = 17,
    GGUF_DTYPE_IQ3_XXS = 18,
    GGUF_DTYPE_IQ1_S = 19,
    GGUF_DTYPE_IQ4_NL = 20,
    GGUF_DTYPE_IQ3_S = 21,
    GGUF_DTYPE_IQ2_S = 22,
    GGUF_DTYPE_IQ4_XS = 23,
    GGUF_DTYPE_I8 = 24,
    GGUF_DTYPE_I16 = 25,
    GGUF_DTYPE_I32 = 26,
    GGUF_DTYPE_I64 = 27,
    GGUF_DTYPE_F64 = 28,
    GGUF_DTYPE_IQ1_M = 29,
    GGUF_DTYPE_BF16 = 30,
    GGUF_DTYPE_TQ1_0 = 34,
    GGUF_DTYPE_TQ2_0 = 35,
    GGUF_DTYPE_COUNT_MAX = 64 /* ids >= this are rejected */
};

/* One row of the table of tensor types, the one list of weight types (the table and gguf_dtype_info are in
 * quant.c, beside the row functions): adding a type is one row there plus its row functions, and the
 * kernels of each backend that computes it. Every other list of types derives from these columns
 * (quant_can_dequantize, quant_can_quantize, model_type_supported, the backends' caps, cuda_dequant_supported,
 * the names in messages); tests/test_dtype.c checks every row. */
struct gguf_dtype_info {
    const char *name;     /* "F32", "Q4_K", ... */
    uint32_t block_size;  /* elements per block (1 for plain types) */
    uint32_t block_bytes; /* bytes per block */
    /* (optional) n elements (whole blocks, n >= 0) at src as f32 into dst / f32 at src into dst; NULL where
     * the type is not read / not written (through quant_dequantize_row / quant_quantize_row). */
    void (*dequantize_row)(const void *src, float *dst, int64_t n);
    void (*quantize_row)(const float *src, void *dst, int64_t n);
    int gpu_dequant; /* 1: the cuda backend converts it to BF16 on the device at load (cuda_dequant.cu) */
};

/* Facts about a tensor type; NULL for an id that is not a known type. */
const struct gguf_dtype_info *gguf_dtype_info(uint32_t dtype);
/* "F32, F16, ..." in id order: the names of the types whose bit (1ull << type) is set in `types` (cut to
 * cap bytes, NUL-terminated when cap > 0). */
void gguf_dtype_names(uint64_t types, char *out, size_t cap);
const char *gguf_vtype_name(uint32_t vtype); /* "?" when unknown */

/* Bytes of a row of n elements of type t; 0 if t is unknown or n is not a multiple of the block size. */
uint64_t gguf_row_bytes(uint32_t dtype, uint64_t n);

struct gguf_str {
    const char *ptr; /* NOT NUL-terminated; points into the mapping */
    uint64_t len;
};

struct gguf_tensor {
    const char *name; /* NUL-terminated copy */
    uint32_t n_dims;  /* 1..4 */
    uint64_t ne[4];   /* ne[0] = row length (fastest-varying); unused dims are 1 */
    enum gguf_dtype type;
    uint64_t n_elements;
    uint64_t n_bytes;
    uint64_t offset;  /* from the start of the data section (aligned) */
    const void *data; /* = data section + offset, inside the mapping */
};

typedef struct gguf_file gguf_file;

/* Maps and validates `path`. On failure *out is NULL and e says what is wrong and at which byte offset. */
int gguf_open(const char *path, gguf_file **out, struct err *e);
/* Validates a caller-owned buffer (fuzzing, tests); buf must outlive the gguf_file. */
int gguf_open_memory(const void *buf, size_t n, gguf_file **out, struct err *e);
void gguf_close(gguf_file *f); /* NULL is a no-op */
/* Debug check of the invariant stated at the top of gguf.c (every view inside the mapping, names unique
 * and findable, tensor sizes consistent); 0 when it holds. O(n_kv + n_tensors + string elements). */
int gguf_check(const gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_alignment(const gguf_file *f); /* general.alignment or 32 */
uint64_t gguf_file_size(const gguf_file *f);
const char *gguf_path(const gguf_file *f);   /* "" for memory buffers */

/* --- metadata: by index (i < gguf_n_kv; an out-of-range i gives NULL / GGUF_VTYPE_COUNT / 0) --- */
uint64_t gguf_n_kv(const gguf_file *f);
int64_t gguf_find_kv(const gguf_file *f, const char *key); /* index, or -1 when absent */
const char *gguf_kv_key(const gguf_file *f, uint64_t i);
enum gguf_vtype gguf_kv_type(const gguf_file *f, uint64_t i);
/* Element type, or GGUF_VTYPE_COUNT if kv i is not an array; element count, or 0 if not an array. */
enum gguf_vtype gguf_kv_arr_type(const gguf_file *f, uint64_t i);
uint64_t gguf_kv_arr_n(const gguf_file *f, uint64_t i);
/* Numeric array elements, packed little-endian as in the file (arrays of non-strings only; NULL if none). */
const void *gguf_kv_arr_data(const gguf_file *f, uint64_t i);
/* Element j of an array of strings (j < gguf_kv_arr_n); O(1). {NULL, 0} when i/j is out of range or the
 * kv is not an array of strings (an empty string element has a non-NULL ptr). */
struct gguf_str gguf_kv_arr_str(const gguf_file *f, uint64_t i, uint64_t j);

/* --- metadata: typed getters by key. Return 0 and fill *out; on a missing key or a value of the wrong
 * type return -1 with an error naming the key, its actual type and the expected one. --- */
/* Any integer type (and bool) whose value fits in int64_t. */
int gguf_get_int(const gguf_file *f, const char *key, int64_t *out, struct err *e);
/* FLOAT32 or FLOAT64 (integers are accepted too). */
int gguf_get_float(const gguf_file *f, const char *key, double *out, struct err *e);
int gguf_get_bool(const gguf_file *f, const char *key, int *out, struct err *e);
int gguf_get_str(const gguf_file *f, const char *key, struct gguf_str *out, struct err *e);
/* Copies a string value NUL-terminated into buf (error if it does not fit or holds a NUL byte). */
int gguf_get_cstr(const gguf_file *f, const char *key, char *buf, size_t cap, struct err *e);

/* --- tensors --- */
uint64_t gguf_n_tensors(const gguf_file *f);
const struct gguf_tensor *gguf_tensor(const gguf_file *f, uint64_t i);
const struct gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* NULL when absent */

/* --- writer ---
 * Builds a GGUF v3 file. Metadata and tensor descriptions are added first, then gguf_writer_write()
 * writes header + tensor infos and streams each tensor's bytes: from the pointer given at add time, or,
 * when that was NULL, from fill(user, tensor_index, dst, n_bytes) into a scratch buffer (so multi-GB
 * random-weight files never need the whole model in memory). Alignment 32 unless general.alignment is set
 * before tensors are added, as a UINT32 power of two (every setter refuses it otherwise). Keys and tensor
 * names must be unique (checked).
 * fill contract: tensors are filled in the order they were added; a tensor of up to 16 MiB gets exactly one
 * call with its whole size; a larger one gets several calls, each for the NEXT consecutive chunk of whole
 * rows (n_bytes a multiple of the row size, at most 16 MiB or one row), so a stateful callback can stream
 * any size with bounded memory. The writer keeps one scratch buffer of at most max(16 MiB, one row). */
typedef struct gguf_writer gguf_writer;
typedef int (*gguf_fill_fn)(void *user, uint64_t tensor_index, void *dst, uint64_t n_bytes, struct err *e);

gguf_writer *gguf_writer_init(void); /* NULL on out-of-memory */
void gguf_writer_free(gguf_writer *w);
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v, struct err *e);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v, struct err *e);
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v, struct err *e);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v, struct err *e);
int gguf_writer_set_bool(gguf_writer *w, const char *key, int v, struct err *e);
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *s, uint64_t len, struct err *e);
/* Any fixed-size scalar type (UINT8..FLOAT64, BOOL; not STRING/ARRAY), value copied from *v (t's size). */
int gguf_writer_set_val(gguf_writer *w, const char *key, enum gguf_vtype t, const void *v, struct err *e);
/* An array of n fixed-size elements of type t (not STRING/ARRAY), copied from data. */
int gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_vtype t, const void *data, uint64_t n,
                        struct err *e);
/* An array of n strings, copied. */
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const struct gguf_str *strs, uint64_t n,
                            struct err *e);
/* Copies every metadata key of src whose name starts with prefix (e.g. "tokenizer.") into w. */
int gguf_writer_copy_kv(gguf_writer *w, const gguf_file *src, const char *prefix, struct err *e);
/* Copies metadata key i (< gguf_n_kv(src)) of src into w, with its type and value. */
int gguf_writer_copy_kv_at(gguf_writer *w, const gguf_file *src, uint64_t i, struct err *e);
/* data may be NULL (then fill is called at write time); otherwise it must stay valid until write. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, enum gguf_dtype t, uint32_t n_dims,
                           const uint64_t *ne, const void *data, struct err *e);
int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *user, struct err *e);
/* Writes into a malloc'd buffer (tests, fuzz seeds); caller frees *buf. */
int gguf_writer_write_mem(gguf_writer *w, void **buf, size_t *n, gguf_fill_fn fill, void *user,
                          struct err *e);

#endif
