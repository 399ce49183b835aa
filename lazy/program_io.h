/*
 * lazy/program_io.h — a compiled program (program.h) as bytes and back, and
 * a graph's signature, for the persistent compile cache (lazy/pcache.c).
 *
 * The bytes are this build's own format: plain fields in host byte order,
 * no pointers. A kernel function is written as the op whose table entry
 * names it (lt_kernel_for) or as the strided copy kernel; nothing else can
 * be named, so a program holding another function is not written. Reading
 * checks every count and index against the bytes and the program itself,
 * so malformed bytes give NULL, never a program that reads out of bounds;
 * whether the bytes belong to this build and this graph is the caller's
 * check (pcache.c keys files by build and verifies the signature).
 */
#ifndef LT_PROGRAM_IO_H
#define LT_PROGRAM_IO_H

#include <stddef.h>
#include <stdint.h>
#include "compile.h"

/* A growable byte string. Zero-initialise; free p with free(). */
typedef struct lt_bytes {
    uint8_t *p;
    size_t n, cap;
    int oom;          /* 1 once an append failed (the string is then cut) */
} lt_bytes;

/* Appends n bytes (sets b->oom on malloc failure). */
void lt_bytes_put(lt_bytes *b, const void *data, size_t n);

/* Appends p's serialized form to b. Returns LT_OK, LT_ERR_OOM, or
 * LT_ERR_STATE (message set) when p holds a kernel function the format
 * cannot name (b then holds a partial record: discard it). */
lt_status lt_program_write(const lt_program *p, lt_bytes *b);

/* Rebuilds a program from the n bytes at data (all of them: trailing bytes
 * are malformed). Returns a program with 1 reference for the caller, or
 * NULL (no error set) when the bytes are malformed or host memory runs out. */
lt_program *lt_program_read(const uint8_t *data, size_t n);

/* Appends g's signature to b: every node in post order (op, dtype, flags,
 * shape, attributes, a constant's value, the node hash, which covers its
 * sharding), its operand positions, the parameter aliasing, the outputs and
 * the matmul precision. Two graphs with equal signatures are the same
 * computation up to parameter values, so one program serves both. */
void lt_graph_signature(const lt_graph *g, lt_bytes *b);

#endif
