// gguf-read FILE [RUNS]
// Times llama.cpp's own GGUF header parser (gguf_init_from_file from ggml's
// gguf.cpp) on FILE, RUNS times (default 20), and prints one JSON line.
// Only the init call is timed; gguf_free runs outside the timed region.
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ggml.h"
#include "gguf.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static int cmp_double(const void * a, const void * b) {
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

// Print s as a JSON string literal (quotes, backslashes and control chars escaped).
static void print_json_string(const char * s) {
    putchar('"');
    for (const unsigned char * p = (const unsigned char *) s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            printf("\\%c", *p);
        } else if (*p < 0x20) {
            printf("\\u%04x", *p);
        } else {
            putchar(*p);
        }
    }
    putchar('"');
}

int main(int argc, char ** argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s FILE [RUNS]\n", argv[0]);
        return 2;
    }
    const char * path = argv[1];
    long runs = 20;
    if (argc == 3) {
        char * end = NULL;
        runs = strtol(argv[2], &end, 10);
        if (*argv[2] == '\0' || *end != '\0' || runs < 1) {
            fprintf(stderr, "gguf-read: RUNS must be a positive integer, got '%s'\n", argv[2]);
            return 2;
        }
    }

    double * times = malloc((size_t) runs * sizeof(double));
    if (times == NULL) {
        fprintf(stderr, "gguf-read: out of memory\n");
        return 1;
    }

    // Header only: no_alloc = true and no ggml context, so tensor data is never read.
    struct gguf_init_params params = { .no_alloc = true, .ctx = NULL };
    int64_t n_tensors = -1, n_kv = -1;

    for (long i = 0; i < runs; i++) {
        double t0 = now_ms();
        struct gguf_context * ctx = gguf_init_from_file(path, params);
        double t1 = now_ms();
        if (ctx == NULL) {
            fprintf(stderr, "gguf-read: gguf_init_from_file failed for '%s'\n", path);
            free(times);
            return 1;
        }
        times[i] = t1 - t0;
        n_tensors = gguf_get_n_tensors(ctx);
        n_kv = gguf_get_n_kv(ctx);
        gguf_free(ctx);
    }

    qsort(times, (size_t) runs, sizeof(double), cmp_double);
    double median = (runs % 2) ? times[runs / 2] : (times[runs / 2 - 1] + times[runs / 2]) / 2.0;

    printf("{\"file\": ");
    print_json_string(path);
    printf(", \"runs\": %ld, \"median_ms\": %.6f, \"min_ms\": %.6f, \"n_tensors\": %lld, \"n_kv\": %lld}\n",
           runs, median, times[0], (long long) n_tensors, (long long) n_kv);

    free(times);
    return 0;
}
