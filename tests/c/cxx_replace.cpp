// A program that replaces only operator new(size_t) and operator
// delete(void *), as the standard allows, linked with kennel (built with g++
// by tests/c/cxx.sh). The forms it leaves to kennel must call its
// replacements, as the standard's default behaviours say: new[] calls
// operator new, the nothrow forms call it and catch, sized delete, delete[]
// and the nothrow deletes call operator delete. Its blocks come from a pool
// of its own, so one that reached kennel's delete would abort the test.
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "kennel.h"

#include "check.h"

// A bump allocator: deletes are counted, never reused.
alignas(16) static unsigned char pool[1 << 22];
static std::size_t pool_used;
static int news, deletes;

static bool in_pool(const void *p) {
    return p >= pool && p < pool + sizeof(pool);
}

void *operator new(std::size_t size) {
    std::size_t rounded = (size + 15) & ~std::size_t{15};
    if (size > sizeof(pool) || rounded > sizeof(pool) - pool_used) throw std::bad_alloc();
    void *p = pool + pool_used;
    pool_used += rounded == 0 ? 16 : rounded;
    news++;
    return p;
}

void operator delete(void *p) noexcept {
    if (!p) return;
    if (!in_pool(p)) std::abort();
    deletes++;
}

static volatile std::size_t impossible = SIZE_MAX / 2;

struct Node {
    long values[5];
};

struct Counted {
    ~Counted() {}
    char bytes[24];
};

int main() {
    // The forms this program leaves to kennel are kennel's.
    Dl_info kennel, where;
    dladdr(reinterpret_cast<void *>(&kn_malloc), &kennel);
    void *array_new = dlsym(RTLD_DEFAULT, "_Znam");
    void *sized_delete = dlsym(RTLD_DEFAULT, "_ZdlPvm");
    CHECK("new[] and sized delete resolve into kennel",
          array_new && dladdr(array_new, &where) && where.dli_fbase == kennel.dli_fbase && sized_delete &&
              dladdr(sized_delete, &where) && where.dli_fbase == kennel.dli_fbase);

    int news_before = news, deletes_before = deletes;
    Node *n = new Node{};
    int *a = new int[100];
    Counted *c = new Counted[3];
    void *t = ::operator new(64, std::nothrow);
    void *u = ::operator new[](64, std::nothrow);
    CHECK("new, new[] and the nothrow forms call the program's operator new",
          news == news_before + 5 && in_pool(n) && in_pool(a) && in_pool(c) && in_pool(t) && in_pool(u));
    delete n;    // sized
    delete[] a;  // unsized
    delete[] c;  // sized
    ::operator delete(t, std::nothrow);
    ::operator delete[](u, std::nothrow);
    CHECK("sized, array and nothrow deletes call the program's operator delete", deletes == deletes_before + 5);

    // The pool cannot serve it: the program's operator new throws, and the
    // nothrow form (kennel's, handing over to libstdc++'s) catches it.
    CHECK("nothrow new returns null when the program's operator new throws", ::operator new(impossible, std::nothrow) == nullptr);

    // The aligned forms were not replaced: kennel serves them.
    void *p = ::operator new(100, std::align_val_t{64});
    CHECK("aligned new, not replaced, is kennel's", !in_pool(p) && kn_malloc_usable_size(p) >= 100);
    ::operator delete(p, std::align_val_t{64});

    if (failures) {
        std::printf("c++ replaced: %d failure(s)\n", failures);
        return 1;
    }
    std::printf("c++ replaced: kennel's forms call the program's operator new and delete\n");
    return 0;
}
