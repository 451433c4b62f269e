/*
 * kn_stats after known sequences of operations must count exactly: blocks
 * live per size class, bytes in blocks, huge blocks, heaps abandoned by
 * ended threads and the pages they hold, single- and multi-threaded.
 * Nothing between two snapshots allocates except what the test does.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kennel.h"

static int failures;

#define CHECK_EQ(what, got, want)                                                                         \
    do {                                                                                                  \
        size_t got_ = (got), want_ = (want);                                                              \
        if (got_ != want_) {                                                                              \
            printf("FAIL  %s: %zu, expected %zu (line %d)\n", what, got_, want_, __LINE__);            \
            failures++;                                                                                   \
        }                                                                                                 \
    } while (0)

#define CHECK(what, cond)                                                                                 \
    do {                                                                                                  \
        if (!(cond)) {                                                                                    \
            printf("FAIL  %s (line %d)\n", what, __LINE__);                                             \
            failures++;                                                                                   \
        }                                                                                                 \
    } while (0)

static struct kn_stats before, after;

/* The class whose blocks are `block_size` bytes. */
static size_t class_of(size_t block_size) {
    for (size_t c = 0; c < KN_CLASS_COUNT; c++)
        if (before.classes[c].block_size == block_size) return c;
    printf("FAIL  no class of %zu bytes\n", block_size);
    exit(1);
}

enum { small_count = 1000, small_size = 24 };
static void *small[small_count];

static void *free_half(void *arg) {
    (void)arg;
    for (int i = 0; i < small_count; i += 2) free(small[i]);
    return NULL;
}

enum { thread_count = 4, per_thread = 2000, left_size = 200 };
static void *left[thread_count][per_thread];

static void *allocate_and_end(void *arg) {
    void **mine = arg;
    for (int i = 0; i < per_thread; i++) mine[i] = malloc(left_size);
    return NULL; /* ends holding every block */
}

int main(void) {
    /* One thread: allocate, check, free from another thread, check. */
    kn_stats(&before);
    CHECK_EQ("class count", before.class_count, KN_CLASS_COUNT);
    for (int i = 0; i < small_count; i++) small[i] = malloc(small_size);
    kn_stats(&after);
    size_t block = malloc_usable_size(small[0]);
    size_t c = class_of(block);
    CHECK_EQ("live blocks of the class after 1000 mallocs", after.classes[c].blocks_live, before.classes[c].blocks_live + small_count);
    CHECK_EQ("live blocks after 1000 mallocs", after.blocks_live, before.blocks_live + small_count);
    CHECK_EQ("bytes in blocks after 1000 mallocs", after.block_bytes, before.block_bytes + small_count * block);
    CHECK("pages of the class", after.classes[c].pages >= 1);
    CHECK("committed covers the blocks", after.committed_bytes >= after.block_bytes);
    CHECK("mapped covers committed", after.mapped_bytes >= after.committed_bytes);

    pthread_t t;
    pthread_create(&t, NULL, free_half, NULL);
    pthread_join(t, NULL);
    kn_stats(&after);
    CHECK_EQ("live blocks after 500 remote frees", after.classes[c].blocks_live, before.classes[c].blocks_live + small_count / 2);
    for (int i = 1; i < small_count; i += 2) free(small[i]);
    kn_stats(&after);
    CHECK_EQ("live blocks after freeing all", after.blocks_live, before.blocks_live);
    CHECK_EQ("bytes in blocks after freeing all", after.block_bytes, before.block_bytes);

    /* Huge blocks. */
    char *huge = malloc(5 << 20);
    kn_stats(&after);
    CHECK_EQ("huge blocks", after.huge_count, before.huge_count + 1);
    CHECK_EQ("huge bytes", after.huge_bytes, before.huge_bytes + malloc_usable_size(huge));
    CHECK_EQ("bytes in blocks with a huge one", after.block_bytes, before.block_bytes + malloc_usable_size(huge));
    free(huge);
    kn_stats(&after);
    CHECK_EQ("huge blocks after free", after.huge_count, before.huge_count);

    /* Threads that end holding blocks leave abandoned heaps. */
    kn_stats(&before);
    pthread_t threads[thread_count];
    for (int i = 0; i < thread_count; i++) pthread_create(&threads[i], NULL, allocate_and_end, left[i]);
    for (int i = 0; i < thread_count; i++) pthread_join(threads[i], NULL);
    kn_stats(&after);
    size_t lc = class_of(malloc_usable_size(left[0][0]));
    CHECK_EQ("live blocks left by ended threads", after.classes[lc].blocks_live, before.classes[lc].blocks_live + thread_count * per_thread);
    CHECK("abandoned heaps", after.abandoned_heaps >= 1);
    CHECK("abandoned pages", after.abandoned_pages >= 1);
    for (int i = 0; i < thread_count; i++)
        for (int j = 0; j < per_thread; j++) free(left[i][j]);
    kn_stats(&after);
    CHECK_EQ("live blocks after freeing what ended threads left", after.classes[lc].blocks_live, before.classes[lc].blocks_live);
    CHECK_EQ("abandoned pages after freeing", after.abandoned_pages, 0);

    /* glibc's mallinfo2, mallinfo, mallopt and malloc_stats report and
       answer for kennel (under LD_PRELOAD they would otherwise be glibc's,
       describing an arena kennel never uses). */
    struct mallinfo2 info_before = mallinfo2();
    for (int i = 0; i < small_count; i++) small[i] = malloc(small_size);
    char *big = malloc(6 << 20);
    struct mallinfo2 info = mallinfo2();
    CHECK_EQ("mallinfo2: bytes in use", info.uordblks, info_before.uordblks + small_count * block);
    CHECK_EQ("mallinfo2: huge blocks", info.hblks, info_before.hblks + 1);
    CHECK_EQ("mallinfo2: huge bytes", info.hblkhd, info_before.hblkhd + malloc_usable_size(big));
    CHECK_EQ("mallinfo2: arena = in use + free", info.arena, info.uordblks + info.fordblks);
    CHECK("mallinfo2: arena holds the blocks", info.arena >= small_count * block);
    struct kn_mallinfo narrow = kn_mallinfo();
    CHECK_EQ("mallinfo: bytes in use", (size_t)narrow.uordblks, info.uordblks);
    CHECK_EQ("mallinfo: huge blocks", (size_t)narrow.hblks, info.hblks);
    CHECK_EQ("kn_mallinfo2 is mallinfo2", kn_mallinfo2().uordblks, info.uordblks);
    for (int i = 0; i < small_count; i++) free(small[i]);
    free(big);
    info = mallinfo2();
    CHECK_EQ("mallinfo2: bytes in use after the frees", info.uordblks, info_before.uordblks);
    CHECK_EQ("mallinfo2: huge blocks after the frees", info.hblks, info_before.hblks);
    CHECK("mallinfo2: the frees' blocks are free blocks", info.ordblks >= small_count);
    {
        /* glibc's malloc_info: the same figures in glibc's XML. The blocks
           just freed are free blocks of their class; a huge block is an
           mmapped one. */
        char *huge_again = malloc(6 << 20);
        CHECK("a huge block", huge_again != NULL && malloc_usable_size(huge_again) >= 6 << 20);
        FILE *xml = tmpfile();
        CHECK("tmpfile", xml != NULL);
        if (xml == NULL) return 1;
        CHECK_EQ("malloc_info with options is EINVAL", (size_t)malloc_info(1, xml), EINVAL);
        CHECK_EQ("kn_malloc_info without a stream is EINVAL", (size_t)kn_malloc_info(0, NULL), EINVAL);
        struct mallinfo2 now = mallinfo2(); /* nothing allocates until the walk */
        CHECK_EQ("malloc_info", (size_t)malloc_info(0, xml), 0);
        rewind(xml);
        static char doc[1 << 16];
        size_t len = fread(doc, 1, sizeof(doc) - 1, xml);
        doc[len] = 0;
        fclose(xml);
        const char *head = "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n";
        CHECK("malloc_info opens glibc's document", strncmp(doc, head, strlen(head)) == 0);
        CHECK("malloc_info closes it", len > 10 && strcmp(doc + len - 10, "</malloc>\n") == 0);
        char want[160];
        snprintf(want, sizeof want, " to=\"%zu\" total=\"", block);
        const char *size = strstr(doc, want);
        CHECK("malloc_info lists the class of the freed blocks", size != NULL);
        if (size != NULL) {
            size_t total = 0, count = 0;
            CHECK_EQ("the class's line", (size_t)sscanf(size + strlen(want), "%zu\" count=\"%zu\"/>", &total, &count), 2);
            CHECK("its free blocks", count >= small_count);
            CHECK_EQ("its free bytes", total, count * block);
        }
        snprintf(want, sizeof want, "<total type=\"rest\" count=\"%zu\" size=\"%zu\"/>", now.ordblks, now.fordblks);
        CHECK("malloc_info: free blocks and bytes as mallinfo2's", strstr(doc, want) != NULL);
        snprintf(want, sizeof want, "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>", now.hblks, now.hblkhd);
        CHECK("malloc_info: huge blocks as mallinfo2's", strstr(doc, want) != NULL && now.hblks >= 1);
        if (failures) printf("%s", doc);
        free(huge_again);
    }
    CHECK_EQ("mallopt accepts M_ARENA_MAX", mallopt(M_ARENA_MAX, 1), 1);
    CHECK_EQ("mallopt accepts M_MMAP_THRESHOLD", mallopt(M_MMAP_THRESHOLD, 1 << 20), 1);
    {
        FILE *captured = tmpfile();
        CHECK("tmpfile", captured != NULL);
        if (captured == NULL) return 1;
        fflush(stderr);
        int saved = dup(2);
        CHECK("dup stderr", saved >= 0 && dup2(fileno(captured), 2) == 2);
        malloc_stats();
        CHECK("restore stderr", dup2(saved, 2) == 2);
        close(saved);
        rewind(captured);
        char line[512] = {0};
        size_t got = fread(line, 1, sizeof(line) - 1, captured);
        fclose(captured);
        CHECK("malloc_stats prints kennel's figures on stderr", got > 0 && strstr(line, "kennel: ") == line);
    }

    /* The printed form. */
    FILE *f = tmpfile();
    kn_stats_print(f);
    rewind(f);
    char text[8192];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = 0;
    fclose(f);
    CHECK("kn_stats_print names live blocks", strstr(text, "live blocks") != NULL);
    CHECK("kn_stats_print has the mapped line", strstr(text, "bytes mapped, peak") != NULL);

    if (failures) {
        printf("stats: %d failure(s)\n%s", failures, text);
        return 1;
    }
    printf("stats: exact counts single- and multi-threaded (%zu heaps, %zu segments)\n", after.heap_count, after.segment_count);
    return 0;
}
