/*
 * kennel: a general-purpose memory allocator (C interface).
 *
 * libkennel.so and libkennel.a export the standard malloc family under the
 * standard names, so that linking kennel, or loading it with
 *
 *     LD_PRELOAD=/path/to/libkennel.so program
 *
 * replaces the C library's allocator for the whole program, and C++'s
 * operator new and delete (see "C++" below). The malloc family is also
 * available with a kn_ prefix, for programs that link kennel beside
 * another malloc and want to call it explicitly.
 *
 * Where the C standard leaves a choice, kennel does what glibc does:
 *
 *   - malloc(0), calloc(0, n), aligned_alloc(a, 0) return a unique non-null
 *     pointer that may be passed to free().
 *   - free(NULL) does nothing.
 *   - realloc(NULL, n) is malloc(n). realloc(p, 0) frees p and returns NULL
 *     (errno unchanged). realloc grows or shrinks in place when the block's
 *     size class (or, above 2 MiB, its mapping) allows it; huge blocks move
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
 *   - On Linux, glibc's internal names __libc_malloc, __libc_free,
 *     __libc_calloc, __libc_realloc, __libc_memalign, __libc_valloc,
 *     __libc_pvalloc, __posix_memalign and cfree are the same functions.
 *
 * Misuse is not survived silently: free() or realloc() of a pointer kennel
 * did not return (a stack or static address, another allocator's memory,
 * an interior pointer) and a second free() of a block that is still free
 * print one line naming the pointer on stderr and abort(). A double free is
 * caught while the block has not been handed out again (kennel writes a
 * mark into the second word of every freed block).
 *
 * C++: the libraries also export the twenty replaceable global allocation
 * functions of [new.delete] (plain, array, nothrow, sized, aligned, and
 * each combination) under their Itanium C++ ABI names for x86_64 and
 * aarch64 Linux, as libstdc++ does; <new> declares them. kennel links no
 * C++ runtime (a C program that loads it needs none) and uses the one the
 * program loaded (libstdc++, or libc++) for what only it can do.
 *
 *   - operator new(size) and operator new(size, align_val_t) are kennel's
 *     own, and so are operator delete(ptr) and its aligned form. Every other
 *     form calls one of these by its exported name, as the standard's
 *     default behaviour says (new[] calls new, sized delete calls unsized
 *     delete, ...), so a program that replaces only some forms gets its own
 *     from the rest, as with libstdc++. The definitions are weak: a program
 *     linking libkennel.a may define its own without a duplicate symbol.
 *   - While allocation fails, the throwing forms call the installed
 *     new-handler (std::get_new_handler()) and try again; with none
 *     installed they throw std::bad_alloc, by calling the runtime's
 *     std::__throw_bad_alloc(). Without a C++ runtime in the process there
 *     is no handler and nothing to throw with: a failure prints one line
 *     naming the size and aborts.
 *   - The nothrow forms return NULL where the throwing form would throw
 *     (the handler has run and given up, or thrown bad_alloc itself): they
 *     hand the call to the runtime's own nothrow form, which calls the
 *     throwing form in a try block. Without a runtime they return NULL on
 *     failure.
 *   - new(0) returns a unique non-null pointer.
 *   - Aligned forms: an alignment that is not a power of two (undefined
 *     behaviour) throws std::bad_alloc at once, without calling the
 *     handler (the nothrow forms return NULL), as libstdc++ does. Blocks
 *     are aligned to at least 16 bytes.
 *   - A delete of NULL, in any form, does nothing. Every delete validates
 *     its pointer as free() does: an invalid or double delete prints one
 *     line naming the pointer and aborts, e.g.
 *     "kennel: operator delete(): invalid pointer 0x7ffc...: not allocated
 *     by kennel".
 *   - The size passed to sized delete (and the alignment passed to aligned
 *     delete) is not used: kennel finds every block's size and alignment
 *     from its page, and the size would spare none of that work (measured:
 *     a sized delete calling kennel's free directly costs what an unsized
 *     one does). So sized delete calls operator delete(ptr), as the
 *     standard's default behaviour says, and a size that disagrees with the
 *     block (a program bug: larger than malloc_usable_size) is not
 *     detected; it does the heap no harm. Checking it would cost about 10%
 *     of a new+delete pair, and would bypass a program's own
 *     operator delete(ptr).
 *
 * libkennel-secure.so is the same allocator hardened: free-list links are
 * encoded and checked (a write after free or an overflow into a free block
 * aborts when the list is next used), freed marks are per-block secrets set
 * with an atomic swap (a double free from two threads at once is caught),
 * segments and huge blocks end in guard pages (an overflow into one aborts
 * with a message, unless the program handles SIGSEGV itself), fresh pages
 * hand out blocks in random order, and freed huge blocks are unmapped at
 * once (a use after free faults). Costs are listed in README.md.
 *
 * Environment, read once at start:
 *   KENNEL_SHOW_STATS=1   print kn_stats_print(NULL) on stderr at exit.
 *   KENNEL_VERBOSE=1      print the library's configuration at start, and
 *                         warnings (a refused mapping, a bad variable).
 *   KENNEL_FILL_FREED=1   libkennel-secure only: fill freed blocks with 0xdf
 *                         past their first 16 bytes, so a read after free
 *                         sees the pattern instead of old data.
 */
#ifndef KENNEL_H
#define KENNEL_H

#include <stddef.h>
#include <stdio.h>

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
/* glibc's malloc_trim: the calling thread's free memory goes back to the OS,
   all but `pad` bytes, with the empty segments pooled for reuse; other
   threads' heaps give theirs back as they run. 1 if any memory went back. */
int kn_malloc_trim(size_t pad);

/* glibc's mallinfo2 and mallinfo (the same with int fields, saturated),
   filled from kn_stats's walk: arena = bytes touched and not given back,
   huge blocks left out, = uordblks (bytes in live blocks other than huge
   ones) + fordblks (the rest: free blocks, resident free slices, metadata,
   cached huge mappings); ordblks = free blocks of pages in use; hblks and
   hblkhd = live huge blocks and their bytes; smblks, fsmblks, usmblks and
   keepcost = 0 (glibc's fastbins and top chunk have no counterpart). */
struct kn_mallinfo2 {
    size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};
struct kn_mallinfo {
    int arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};
struct kn_mallinfo2 kn_mallinfo2(void);
struct kn_mallinfo kn_mallinfo(void);
/* glibc's mallopt: kennel has none of glibc's tunables; every parameter is
   accepted and ignored (returns 1), so programs tuning glibc run unchanged. */
int kn_mallopt(int param, int value);
/* glibc's malloc_stats: kn_stats_print(NULL), on stderr. */
void kn_malloc_stats(void);
/* glibc's malloc_info: kennel's figures in glibc's XML, written to `stream`,
   from the same walk, one <heap nr="0"> for the whole process: <sizes> has
   a <size from to total count> per class with free blocks; total "rest" =
   mallinfo2's ordblks and fordblks, total "mmap" = hblks and hblkhd, total
   "fast" = 0; system "current"/"max" = address space mapped now / at most,
   aspace "total" = mapped now, aspace "mprotect" = touched and not given
   back. Returns 0, or EINVAL when `options` is not 0 (as glibc) or `stream`
   is NULL. */
int kn_malloc_info(int options, FILE *stream);

/* Size classes: kn_stats reports each. */
#define KN_CLASS_COUNT 128

struct kn_class_stats {
    size_t block_size;  /* bytes per block */
    size_t blocks_live; /* blocks handed out and not freed */
    size_t pages;       /* pages holding blocks of this class */
};

/* What kennel holds now, process-wide. Computed on demand from the pages'
   own metadata (nothing is counted on the allocation paths), so a call walks
   every segment: exact when other threads are quiet, a close snapshot
   otherwise. Requested sizes are not known in C (free does not pass them),
   so there is no figure for requested bytes. The struct grew in 0.2.0 (it
   held the first three figures only): rebuild against this header. */
struct kn_stats {
    size_t block_bytes;       /* bytes in live blocks (block sizes) */
    size_t committed_bytes;   /* touched and not given back to the OS */
    size_t mapped_bytes;      /* address space mapped from the OS now */
    size_t mapped_bytes_peak; /* and at most so far */
    size_t heap_count;        /* heaps: one per thread alive at once */
    size_t abandoned_heaps;   /* heaps of ended threads not yet reused */
    size_t abandoned_pages;   /* pages with live blocks in those heaps */
    size_t segment_count;     /* 4 MiB segments (in use or kept for reuse) */
    size_t huge_count;        /* live blocks above 2 MiB, own mappings */
    size_t huge_bytes;        /* their usable bytes (part of block_bytes) */
    size_t blocks_live;       /* live blocks of every class and huge */
    size_t class_count;       /* KN_CLASS_COUNT */
    struct kn_class_stats classes[KN_CLASS_COUNT];
};

void kn_stats(struct kn_stats *stats);

/* Prints the same figures, one line each and one per size class in use, to
   `stream`, or straight to stderr (without stdio) when it is NULL. */
void kn_stats_print(FILE *stream);

/* Returns the calling thread's unused memory to the OS now, with the empty
   segments ended threads left for reuse (otherwise done by the purge policy:
   when the thread ends, and as free memory stays unused). */
void kn_release_thread_memory(void);

#ifdef __cplusplus
}
#endif

#endif /* KENNEL_H */
