/*
 * Emits random lzf_compress test vectors for examples/lzf_check.rs.
 *
 * Build against liblzf 3.6 (Debian: `apt-get source liblzf`, or Redis's
 * bundled src/lzf_c.c; both give identical output) with a zeroed hash
 * table so the run is reproducible:
 *
 *   gcc -O2 -DINIT_HTAB=1 -I$LZF lzf_crosscheck.c $LZF/lzf_c.c -o lzfgen
 *   ./lzfgen 3000 [seed] > /tmp/lzf.txt
 *   cargo run --example lzf_check -- /tmp/lzf.txt
 *
 * Line format: <out_len> <input hex> <output hex, or - when lzf returned 0>.
 * Inputs mix small and large alphabets, short-distance and long-distance
 * repeats and sizes up to 70000 bytes; out_len is either roomy or the
 * len - 4 Redis uses, so both success and "does not fit" paths are covered.
 */
#include <stdio.h>
#include <stdlib.h>
#include "lzf.h"

static unsigned long long state = 88172645463325252ULL;

static unsigned long long next_random(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 1000;
    if (argc > 2) state = strtoull(argv[2], NULL, 10) | 1;
    unsigned char *in = malloc(200000), *out = malloc(200000);
    for (int c = 0; c < count; c++) {
        int kind = next_random() % 6;
        size_t len = 1 + next_random() % (kind == 5 ? 70000 : 3000);
        int alpha = 1 + next_random() % (kind == 0 ? 2 : kind == 1 ? 4 : kind == 2 ? 16 : 256);
        for (size_t i = 0; i < len; i++) {
            if (kind == 3 && i > 10 && next_random() % 3)
                in[i] = in[i - 1 - next_random() % 10];
            else if (kind == 4 && i > 300 && next_random() % 8)
                in[i] = in[i - 1 - next_random() % 9000 % i];
            else
                in[i] = 'a' + next_random() % alpha;
        }
        size_t out_len = (next_random() % 2) ? len + 64 : (len > 4 ? len - 4 : 1);
        size_t packed = lzf_compress(in, len, out, out_len);
        printf("%zu ", out_len);
        for (size_t i = 0; i < len; i++) printf("%02x", in[i]);
        printf(" ");
        if (packed == 0) printf("-");
        for (size_t i = 0; i < packed; i++) printf("%02x", out[i]);
        printf("\n");
    }
    return 0;
}
