/*
 * kennel: a general-purpose memory allocator (C interface).
 *
 * libkennel.so and libkennel.a export the standard malloc family under the
 * standard names, so that linking kennel, or loading it with
 *
 *     LD_PRELOAD=/path/to/libkennel.so program
 *
 * replaces the C library's allocator for the whole program (C++ new and
 * delete included, since libstdc++ calls malloc and free). The same
 * functions are also available with a kn_ prefix, for programs that link
 * kennel beside another malloc and want to call it explicitly.
 *
 * Where the C standard leaves a choice, kennel does what glibc does:
 *
 *   - malloc(0), calloc(0, n), aligned_alloc(a, 0) return a unique non-null
 *     pointer that may be passed to free().
 *   - free(NULL) does nothing.
 *   - realloc(NULL, n) is malloc(n). realloc(p, 0) frees p and returns NULL
 *     (errno unchanged). realloc grows or shrinks in place when the block's
 *     size class (or, above 1 MiB, its mapping) allows it; huge blocks move
 *     with mremap, without copying.
 *   - calloc and reallocarray detect overflow of n * size: NULL, errno ENOMEM.
 *   - aligned_alloc(alignment, size): alignment must be a power of two
 *     (otherwise NULL, errno EINVAL, as in glibc 2.38 and later); size need
 *     not be a multiple of it.
 *   - posix_memalign returns EINVAL for an alignment that is not a power of
 *     two multiple of sizeof(void *), ENOMEM when out of memory, and never
 *     changes errno.
 *   - memalign rounds an alignment that is not a power of two up to the
 *     next one (glibc); valloc aligns to the page size; pvalloc also rounds
 *     the size up to whole pages (pvalloc(0) allocates one page).
 *   - Every failure sets errno to ENOMEM (EINVAL for invalid alignments) and
 *     returns NULL; nothing aborts on out-of-memory.
 *   - malloc returns memory aligned to alignof(max_align_t), 16 bytes.
 *   - malloc_usable_size(p) is the block's real capacity (>= the request);
 *     malloc_usable_size(NULL) is 0.
 *
 * Misuse is not survived silently: free() or realloc() of a pointer kennel
 * did not return (a stack or static address, another allocator's memory,
 * an interior pointer) and a second free() of a block that is still free
 * print one line naming the pointer on stderr and abort(). A double free is
 * caught while the block has not been handed out again (kennel writes a
 * mark into the second word of every freed block); the hardened build
 * catches more.
 *
 * Environment, read once at start:
 *   KENNEL_SHOW_STATS=1   print kennel's figures on stderr at exit.
 */
#ifndef KENNEL_H
#define KENNEL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void *kn_malloc(size_t size);
void kn_free(void *ptr);
void *kn_calloc(size_t count, size_t size);
void *kn_realloc(void *ptr, size_t size);
void *kn_reallocarray(void *ptr, size_t count, size_t size);
void *kn_aligned_alloc(size_t alignment, size_t size);
int kn_posix_memalign(void **result, size_t alignment, size_t size);
void *kn_memalign(size_t alignment, size_t size);
void *kn_valloc(size_t size);
void *kn_pvalloc(size_t size);
size_t kn_malloc_usable_size(void *ptr);
void kn_free_sized(void *ptr, size_t size);
void kn_free_aligned_sized(void *ptr, size_t alignment, size_t size);

/* Process-wide figures. */
struct kn_stats {
    /* Bytes kennel has mapped from the OS now, and at most so far. */
    size_t mapped_bytes;
    size_t mapped_bytes_peak;
    /* Heaps created: one per thread alive at the same time (ended threads'
       heaps are reused). */
    size_t heap_count;
};

void kn_stats(struct kn_stats *stats);

/* Returns the calling thread's unused memory to the OS now (otherwise done
   when the thread ends, or 10 ms after memory is freed). */
void kn_release_thread_memory(void);

#ifdef __cplusplus
}
#endif

#endif /* KENNEL_H */
