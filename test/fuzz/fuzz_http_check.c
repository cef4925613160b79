/*
 * libFuzzer target: the wire checks of mrb_http_check.h on arbitrary bytes.
 *
 * The first byte picks a check, the rest is its input.  Each answer is
 * compared with the oracle of fuzz_http_oracle.h; a disagreement aborts,
 * which libFuzzer reports as a crash with the input that caused it.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mrb_http_check.h"
#include "fuzz_http_oracle.h"


static void
expect(int got, int want)
{
    if (!got != !want) {
        abort();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char  *p;
    size_t       len;
    int64_t      status;

    if (size == 0) {
        return 0;
    }

    p = (const char *) data + 1;
    len = size - 1;

    switch (data[0] % 6) {

    case 0:
        expect(mrb_http_valid_header_name(p, len), oracle_name(data + 1, len));
        break;

    case 1:
        expect(mrb_http_valid_header_value(p, len),
               oracle_value(data + 1, len));
        break;

    case 2:
        expect(mrb_http_valid_uri(p, len), oracle_uri(data + 1, len, 1, 0));
        break;

    case 3:
        expect(mrb_http_valid_target(p, len),
               oracle_uri(data + 1, len, 0, 0));
        break;

    case 4:
        expect(mrb_http_valid_args(p, len), oracle_uri(data + 1, len, 0, 1));
        break;

    case 5:
        status = 0;
        memcpy(&status, p, len < sizeof(status) ? len : sizeof(status));
        expect(mrb_http_valid_final_status((mrb_int) status),
               status >= 200 && status <= 599);
        break;
    }

    return 0;
}
