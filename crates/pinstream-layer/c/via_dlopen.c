/*
 * via_dlopen.c: runs classic_recipe.c built as a shared library (main renamed classic_main)
 * through dlopen(RTLD_LOCAL), the way Python opens an extension module. The library's
 * libOpenCL is then not in the global scope, so an LD_PRELOADed layer finds no next
 * definition with dlsym(RTLD_NEXT) and must reach the driver through the object's dispatch
 * table, as it must for PyOpenCL's wheel (which links a bundled libOpenCL).
 *
 *   cc -O2 -shared -fPIC -Dmain=classic_main -o libclassic.so classic_recipe.c -lOpenCL
 *   cc -O2 -o via_dlopen via_dlopen.c -ldl
 *   via_dlopen ./libclassic.so [classic_recipe options]
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: via_dlopen LIBRARY [options]\n");
        return 64;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "via_dlopen: %s\n", dlerror());
        return 3;
    }
    int (*classic_main)(int, char **) = (int (*)(int, char **))dlsym(lib, "classic_main");
    if (!classic_main) {
        fprintf(stderr, "via_dlopen: no classic_main in %s\n", argv[1]);
        return 3;
    }
    return classic_main(argc - 1, argv + 1);
}
