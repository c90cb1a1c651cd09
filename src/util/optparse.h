/* pcrfs util — the one parser of option values for pcrfs, mkpcrfs and pcrinfo.
 *
 * Every number a user types (-o read_ahead_kb=N, --jobs N, --threshold T, ...) goes
 * through here, so the three programs take the same forms and refuse the same way:
 *
 *   whole numbers  decimal digits only: "0", "42", "007" (= 7). No sign, no space,
 *                  no hex or octal, no exponent, no fraction.
 *   decimals       digits with an optional fraction: "5", "0.5", ".5". No sign,
 *                  exponent ("1e3"), hex, "inf"/"nan", spaces or trailing bytes.
 *   sizes, rates   a decimal and an optional suffix k or K (10^3), M (10^6) or
 *                  G (10^9); the result must be a whole number of bytes: "12.5M" is
 *                  12500000, "1.5" and "0.0001k" are refused.
 *   fractions      a decimal or N/D of two decimals: "0.08", "3/4".
 *   ranges         two fractions separated by ':' or ',': "0.08:1", "3/4:4/3".
 *   words          one of a fixed list: "yes", "no".
 *   thresholds     a decimal in (0, 1] with at most 4 digits after the point, so
 *                  that two thresholds never print alike or name the same qNN/ view.
 *   levels         "full" or a whole number (the range needs the store: checked by
 *                  the caller once it is open).
 *
 * An empty value is refused everywhere. Each function returns 0 with the value in
 * *out, or -1 with one line in @msg (no program name, no newline):
 *
 *   "NAME=VALUE: want a whole number 0..1048576 (kB)"
 *
 * NAME is the option as the user knows it ("read_ahead_kb", "--jobs"); VALUE is
 * shown with control bytes escaped as \xHH and cut after 64 bytes, so the message
 * stays one line whatever was typed. @msg may be NULL (@len 0) when only the
 * verdict matters. Nothing here allocates, prints or depends on the locale's
 * decimal point (the programs never call setlocale()).
 */
#ifndef PCRFS_UTIL_OPTPARSE_H
#define PCRFS_UTIL_OPTPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* pcr_opt_real() flags: the bound itself is outside the range. */
#define PCR_OPT_GT_MIN 1u /* value > min */
#define PCR_OPT_LT_MAX 2u /* value < max */

/* Threshold digits after the point (pcr_opt_threshold). */
#define PCR_OPT_THRESHOLD_DECIMALS 4

/* A whole number in [@min, @max]; @unit (may be NULL) is named in the message:
 * "want a whole number MIN..MAX (UNIT)". */
int pcr_opt_uint(const char *name, const char *s, uint64_t min, uint64_t max, const char *unit,
                 uint64_t *out, char *msg, size_t len);

/* A decimal in [@min, @max] (bounds excluded as @flags say). */
int pcr_opt_real(const char *name, const char *s, double min, double max, unsigned flags,
                 const char *unit, double *out, char *msg, size_t len);

/* A size or rate in [@min, @max] bytes: "want UNIT: a whole number with an
 * optional k, M or G ...". @unit: "bytes" or "bytes/s". */
int pcr_opt_size(const char *name, const char *s, uint64_t min, uint64_t max, const char *unit,
                 uint64_t *out, char *msg, size_t len);

/* One of the NULL-terminated @words; its index in *@out. */
int pcr_opt_word(const char *name, const char *s, const char *const *words, unsigned *out,
                 char *msg, size_t len);

/* A quality threshold (see above). */
int pcr_opt_threshold(const char *name, const char *s, double *out, char *msg, size_t len);

/* A range "LO:HI" (or "LO,HI") of fractions with @min <= LO <= HI <= @max, the
 * bounds excluded as @flags say; @what names the quantity ("a fraction of the
 * area"). */
int pcr_opt_frac_range(const char *name, const char *s, double min, double max, unsigned flags,
                       const char *what, double out[2], char *msg, size_t len);

/* The syntax of a level: "full" (*@out = PCR_OPT_LEVEL_FULL) or a whole number
 * (*@out = it, 0 included, or PCR_OPT_LEVEL_FULL - 1 when larger: no store has that
 * many levels). The caller checks the range against the store's levels. */
#define PCR_OPT_LEVEL_FULL UINT32_MAX
int pcr_opt_level(const char *name, const char *s, uint32_t *out, char *msg, size_t len);

/* "NAME=VALUE: " followed by @fmt into @msg: for callers whose check goes beyond
 * these functions (a range that needs the store), so every message looks alike. */
void pcr_opt_msg(char *msg, size_t len, const char *name, const char *s, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
