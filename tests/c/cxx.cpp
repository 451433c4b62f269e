// C++'s operator new and delete served by kennel: built with the system g++
// (libstdc++) and linked with a kennel library by tests/c/cxx.sh.
//
// Every one of the twenty replaceable forms must resolve into kennel's
// object (the one that holds kn_malloc), so the test fails where kennel
// does not export them; the blocks the forms hand out must be kennel's
// (malloc_usable_size validates them, kn_stats counts them). Failure paths:
// nothrow forms return null, throwing forms throw std::bad_alloc (through
// libstdc++'s thrower, unwinding through kennel's frames), the new-handler
// runs and is retried, and a handler that throws inside a nothrow form
// still ends in null. Misuse (a delete of a stack address, a double delete)
// aborts with kennel's one line naming the pointer, in a child process.
#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kennel.h"

#include "check.h"

// Sizes no allocator can serve; volatile, so the compiler cannot reason
// about them (and reject or fold the calls).
static volatile std::size_t impossible = SIZE_MAX / 2;
static volatile std::size_t small = 100;

// Keeps the compiler from tying a pointer to what it points to (so a
// delete of a stack address compiles without a warning).
static void *volatile laundered;
__attribute__((noinline)) static void *launder(void *p) {
    laundered = p;
    return laundered;
}

static std::size_t blocks_live() {
    static struct kn_stats s;
    kn_stats(&s);
    return s.blocks_live;
}

static bool aligned_to(const void *p, std::size_t alignment) {
    return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

// ---- The symbols ---------------------------------------------------------

static const char *const forms[] = {
    "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t", "_ZnamSt11align_val_t",
    "_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZnamSt11align_val_tRKSt9nothrow_t", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm",
    "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t", "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t",
    "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t", "_ZdlPvSt11align_val_tRKSt9nothrow_t",
    "_ZdaPvSt11align_val_tRKSt9nothrow_t",
};

static void check_symbols() {
    Dl_info kennel;
    if (!dladdr(reinterpret_cast<void *>(&kn_malloc), &kennel)) {
        std::printf("FAIL  dladdr(kn_malloc)\n");
        failures++;
        return;
    }
    int served = 0;
    for (const char *name : forms) {
        void *f = dlsym(RTLD_DEFAULT, name);
        Dl_info where;
        if (f && dladdr(f, &where) && where.dli_fbase == kennel.dli_fbase) {
            served++;
        } else {
            std::printf("FAIL  %s resolves to %s, not to kennel's %s\n", name, f && dladdr(f, &where) ? where.dli_fname : "nothing",
                        kennel.dli_fname);
            failures++;
        }
    }
    std::printf("%s  %d of 20 operator new and delete forms resolve into kennel (%s)\n", served == 20 ? "ok  " : "FAIL", served,
                kennel.dli_fname);
}

// ---- Allocation and deletion ---------------------------------------------

struct Node {
    long values[5];
};

struct Counted {
    Counted() { live++; }
    ~Counted() { live--; }
    static int live;
    char bytes[24];
};
int Counted::live;

struct alignas(64) Line {
    char bytes[64];
};

struct alignas(4096) Page {
    char bytes[100];
};

static void check_plain() {
    std::size_t base = blocks_live();
    Node *n = new Node{};
    CHECK("new Node is a kennel block", malloc_usable_size(n) >= sizeof(Node) && blocks_live() == base + 1);
    delete n; // sized: operator delete(void *, size_t)
    CHECK("delete Node (sized) frees it", blocks_live() == base);

    int *a = new int[1000];
    CHECK("new int[1000] is a kennel block", malloc_usable_size(a) >= 4000 && blocks_live() == base + 1);
    delete[] a;
    CHECK("delete[] int frees it", blocks_live() == base);

    // A destructor: the array carries a cookie, and delete[] is sized.
    Counted *c = new Counted[7];
    CHECK("new Counted[7] constructs", Counted::live == 7 && blocks_live() == base + 1);
    delete[] c;
    CHECK("delete[] Counted (sized) destroys and frees", Counted::live == 0 && blocks_live() == base);

    void *p = ::operator new(small);
    CHECK("operator new(100) is a kennel block", malloc_usable_size(p) >= 100);
    ::operator delete(p, std::size_t{small});
    void *q = ::operator new[](small);
    ::operator delete[](q, std::size_t{small});
    void *r = ::operator new(small);
    ::operator delete(r, std::nothrow);
    void *s = ::operator new[](small);
    ::operator delete[](s, std::nothrow);
    CHECK("explicit sized and nothrow deletes free", blocks_live() == base);

    void *z1 = ::operator new(0), *z2 = ::operator new(0), *z3 = ::operator new[](0);
    CHECK("new(0) is unique and non-null", z1 && z2 && z3 && z1 != z2 && z2 != z3 && z1 != z3);
    ::operator delete(z1);
    ::operator delete(z2);
    ::operator delete[](z3);

    ::operator delete(nullptr);
    ::operator delete[](nullptr);
    ::operator delete(nullptr, std::size_t{8});
    ::operator delete(nullptr, std::align_val_t{64});
    ::operator delete[](nullptr, std::size_t{8}, std::align_val_t{64});
    CHECK("deletes of null do nothing", blocks_live() == base);
}

static void check_aligned() {
    std::size_t base = blocks_live();
    const std::size_t alignments[] = {64, 4096, std::size_t{1} << 20};
    bool ok = true;
    for (std::size_t a : alignments) {
        std::align_val_t al{a};
        char *p = static_cast<char *>(::operator new(small, al));
        char *q = static_cast<char *>(::operator new[](3 * a, al));
        char *r = static_cast<char *>(::operator new(small, al, std::nothrow));
        char *s = static_cast<char *>(::operator new[](small, al, std::nothrow));
        ok = ok && aligned_to(p, a) && aligned_to(q, a) && aligned_to(r, a) && aligned_to(s, a);
        ok = ok && malloc_usable_size(p) >= small && malloc_usable_size(q) >= 3 * a && blocks_live() == base + 4;
        std::memset(q, 1, 3 * a);
        ::operator delete(p, al);
        ::operator delete[](q, 3 * a, al);
        ::operator delete(r, small, al);
        ::operator delete[](s, al, std::nothrow);
        ok = ok && blocks_live() == base;
        if (!ok) std::printf("      alignment %zu: %p %p %p %p\n", a, (void *)p, (void *)q, (void *)r, (void *)s);
    }
    CHECK("aligned new of 64, 4096 and 1 MiB is aligned, and every aligned delete frees", ok);

    Line *l = new Line[10];
    Page *g = new Page;
    CHECK("new of alignas(64) and alignas(4096) types is aligned", aligned_to(l, 64) && aligned_to(g, 4096) && blocks_live() == base + 2);
    delete[] l;
    delete g;
    CHECK("and their deletes free", blocks_live() == base);
}

// ---- Failure --------------------------------------------------------------

static void check_failure() {
    bool caught = false;
    try {
        laundered = ::operator new(impossible);
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK("new of an impossible size throws std::bad_alloc", caught);

    caught = false;
    try {
        laundered = new char[impossible];
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK("new[] of an impossible size throws std::bad_alloc", caught);

    caught = false;
    try {
        laundered = ::operator new(impossible, std::align_val_t{64});
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK("aligned new of an impossible size throws std::bad_alloc", caught);

    caught = false;
    try {
        laundered = ::operator new(small, std::align_val_t{std::size_t{1} << 62});
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK("aligned new of an impossible alignment throws std::bad_alloc", caught);

    // Undefined behaviour; libstdc++ throws, without asking the handler.
    caught = false;
    try {
        laundered = ::operator new(small, std::align_val_t{48});
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK("aligned new with an alignment not a power of two throws std::bad_alloc", caught);

    CHECK("nothrow new of an impossible size returns null", ::operator new(impossible, std::nothrow) == nullptr);
    CHECK("nothrow new[] of an impossible size returns null", new (std::nothrow) char[impossible] == nullptr);
    CHECK("nothrow aligned new of an impossible size returns null",
          ::operator new(impossible, std::align_val_t{4096}, std::nothrow) == nullptr &&
              ::operator new[](impossible, std::align_val_t{64}, std::nothrow) == nullptr);
    CHECK("nothrow aligned new with an alignment not a power of two returns null",
          ::operator new(small, std::align_val_t{3}, std::nothrow) == nullptr);
}

static int handler_calls;

static void uninstalling_handler() {
    handler_calls++;
    std::set_new_handler(nullptr);
}

static void throwing_handler() {
    handler_calls++;
    throw std::bad_alloc();
}

static void check_handlers() {
    handler_calls = 0;
    std::set_new_handler(uninstalling_handler);
    bool caught = false;
    try {
        laundered = ::operator new(impossible);
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK("a handler that uninstalls itself runs once, then bad_alloc", caught && handler_calls == 1);

    handler_calls = 0;
    std::set_new_handler(uninstalling_handler);
    caught = false;
    try {
        laundered = new (std::align_val_t{256}) char[impossible];
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK("the same with aligned new[]", caught && handler_calls == 1);

    handler_calls = 0;
    std::set_new_handler(uninstalling_handler);
    CHECK("nothrow new runs the handler, then returns null", ::operator new(impossible, std::nothrow) == nullptr && handler_calls == 1);

    handler_calls = 0;
    std::set_new_handler(throwing_handler);
    void *p = ::operator new[](impossible, std::nothrow);
    void *q = ::operator new(impossible, std::align_val_t{64}, std::nothrow);
    std::set_new_handler(nullptr);
    CHECK("a handler that throws bad_alloc inside nothrow new ends in null", p == nullptr && q == nullptr && handler_calls == 2);
}

// A handler that frees a reserve lets the retry succeed. In a child whose
// address space is limited to what it has plus 64 MiB: a 200 MiB block
// fits only once the 256 MiB reserve is gone.
static void *reserve;

static void releasing_handler() {
    handler_calls++;
    if (!reserve) {
        std::set_new_handler(nullptr); // nothing left: end in bad_alloc
        return;
    }
    ::operator delete(reserve);
    reserve = nullptr;
}

static int reserve_child() {
    const std::size_t mib = 1 << 20;
    reserve = ::operator new(256 * mib);
    long pages = 0;
    FILE *statm = std::fopen("/proc/self/statm", "r");
    if (!statm || std::fscanf(statm, "%ld", &pages) != 1) return 3;
    std::fclose(statm);
    struct rlimit limit = {std::size_t(pages) * sysconf(_SC_PAGESIZE) + 64 * mib, RLIM_INFINITY};
    if (setrlimit(RLIMIT_AS, &limit) != 0) return 3;
    handler_calls = 0;
    std::set_new_handler(releasing_handler);
    std::size_t base = blocks_live();
    char *p;
    try {
        p = static_cast<char *>(::operator new(200 * mib));
    } catch (const std::bad_alloc &) {
        return 4;
    }
    std::memset(p, 1, 200 * mib);
    if (handler_calls != 1 || reserve) return 5;
    if (malloc_usable_size(p) < 200 * mib || blocks_live() != base) return 6; // one block out, one in
    ::operator delete(p);
    return 0;
}

static void check_reserve(const char *self) {
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {const_cast<char *>(self), const_cast<char *>("reserve-child"), nullptr};
        execv(self, argv);
        _exit(2);
    }
    int status;
    waitpid(pid, &status, 0);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    CHECK("a handler that frees a reserve runs once and the retry succeeds", ok);
    if (!ok) std::printf("      child status 0x%x (3 setup, 4 bad_alloc, 5 handler calls, 6 not a kennel block)\n", status);
}

// ---- Misuse ----------------------------------------------------------------

static void announce(void *p) {
    std::fprintf(stderr, "pointer %p\n", p);
}

static void delete_stack() {
    long local[4];
    void *p = launder(local);
    announce(p);
    ::operator delete(p);
}

static void delete_sized_stack() {
    long local[4];
    void *p = launder(local);
    announce(p);
    ::operator delete(p, sizeof(local));
}

static void delete_array_aligned_stack() {
    alignas(64) char local[64];
    void *p = launder(local);
    announce(p);
    ::operator delete[](p, std::align_val_t{64});
}

static void delete_interior() {
    void *p = launder(static_cast<char *>(::operator new(100)) + 16);
    announce(p);
    ::operator delete(p);
}

static void delete_twice() {
    Node *n = new Node{};
    Node *again = static_cast<Node *>(launder(n));
    announce(n);
    delete n;
    delete again;
}

struct Misuse {
    const char *name;
    void (*run)();
    const char *message;
};

static const Misuse misuses[] = {
    {"delete of a stack address", delete_stack, "operator delete(): invalid pointer"},
    {"sized delete of a stack address", delete_sized_stack, "operator delete(): invalid pointer"},
    {"aligned delete[] of a stack address", delete_array_aligned_stack, "operator delete(): invalid pointer"},
    {"delete of an interior pointer", delete_interior, "middle of a block"},
    {"double delete", delete_twice, "operator delete(): double free"},
};

static void check_misuse(const Misuse &m) {
    int pipefd[2];
    if (pipe(pipefd) != 0) std::abort();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        m.run();
        _exit(0);
    }
    close(pipefd[1]);
    char out[4096];
    ssize_t n = 0, r;
    while (n < ssize_t(sizeof(out)) - 1 && (r = read(pipefd[0], out + n, sizeof(out) - 1 - std::size_t(n))) > 0) n += r;
    out[n] = 0;
    close(pipefd[0]);
    int status;
    waitpid(pid, &status, 0);
    char announced[64] = "";
    if (const char *line = std::strstr(out, "pointer ")) std::sscanf(line, "pointer %63s", announced);
    const char *message = std::strstr(out, "kennel: ");
    bool ok = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && message && announced[0] && std::strstr(message, announced) &&
              std::strstr(message, m.message);
    if (ok) {
        std::printf("ok    %s: %s", m.name, message);
    } else {
        std::printf("FAIL  %s: status 0x%x, stderr:\n%s\n", m.name, status, out);
        failures++;
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && std::strcmp(argv[1], "reserve-child") == 0) return reserve_child();
    check_symbols();
    check_plain();
    check_aligned();
    check_failure();
    check_handlers();
    check_reserve(argv[0]);
    for (const Misuse &m : misuses) check_misuse(m);
    if (failures) {
        std::printf("c++: %d failure(s)\n", failures);
        return 1;
    }
    std::printf("c++: operator new and delete served by kennel as the standard says\n");
    return 0;
}
