/* Loads cxx_plugin.cpp's shared object with RTLD_LOCAL and runs it; the
   exit status is the number of failed checks (see cxx_plugin.cpp). */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) return 100;
    void *plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (plugin == NULL) {
        printf("FAIL  dlopen: %s\n", dlerror());
        return 100;
    }
    int (*run)(void) = (int (*)(void))dlsym(plugin, "plugin_run");
    if (run == NULL) return 100;
    return run();
}
