// A C++ plugin loaded with dlopen(RTLD_LOCAL) by a C program (cxx_plugin_host.c),
// as Python loads its extension modules: its libstdc++ is not in the global
// scope, yet its operator new is kennel's (preloaded). A failed new must
// still run the new-handler and throw std::bad_alloc, and nothrow new must
// run the handler and return null, as with libstdc++'s own operator new.
#include <cstdint>
#include <cstdio>
#include <new>

static int handler_calls;

static void give_up() {
    handler_calls++;
    std::set_new_handler(nullptr);
}

extern "C" int plugin_run(void) {
    int failures = 0;
    try {
        void *p = ::operator new(SIZE_MAX / 2);
        std::printf("FAIL  new(SIZE_MAX / 2) returned %p\n", p);
        failures++;
    } catch (const std::bad_alloc &) {
    }
    std::set_new_handler(give_up);
    try {
        void *p = ::operator new(SIZE_MAX / 2);
        std::printf("FAIL  new(SIZE_MAX / 2) returned %p\n", p);
        failures++;
    } catch (const std::bad_alloc &) {
    }
    if (handler_calls != 1) {
        std::printf("FAIL  new-handler called %d times, expected 1\n", handler_calls);
        failures++;
    }
    std::set_new_handler(give_up);
    void *q = ::operator new(SIZE_MAX / 2, std::nothrow);
    if (q != nullptr || handler_calls != 2) {
        std::printf("FAIL  nothrow new gave %p with %d handler calls, expected null and 2\n", q, handler_calls);
        failures++;
    }
    int *fine = new int[100]();
    delete[] fine;
    return failures;
}
