/* plugq: the value syntaxes of configuration keys.
 *
 * nbdkit has parsers for most of these, but their messages do not name
 * the key (and nbdkit 1.32 has none for delays); these give one line
 * that does, and the engine stays free of nbdkit.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_value.h"
#include "log.h"

/* The multiplier of size suffix c, 0 if it has none. */
static uint64_t
size_suffix_scale (char c)
{
  switch (c) {
  case '\0': case 'b': case 'B': return 1;
  case 's': case 'S': return 512;
  case 'k': case 'K': return UINT64_C (1) << 10;
  case 'm': case 'M': return UINT64_C (1) << 20;
  case 'g': case 'G': return UINT64_C (1) << 30;
  case 't': case 'T': return UINT64_C (1) << 40;
  case 'p': case 'P': return UINT64_C (1) << 50;
  case 'e': case 'E': return UINT64_C (1) << 60;
  default: return 0;
  }
}

int
config_parse_size (const char *what, const char *str, uint64_t *r)
{
  size_t digits = strspn (str, "0123456789");
  uint64_t scale = digits ? size_suffix_scale (str[digits]) : 0;
  unsigned long long n;

  if (*str == '\0') {
    log_error ("%s: no size given", what);
    return -1;
  }
  if (scale == 0 || (str[digits] && str[digits + 1])) {
    log_error ("%s: '%s' is not a size (digits with an optional suffix "
               "b, k, M, G, T, P, E or s, e.g. 512M)", what, str);
    return -1;
  }
  errno = 0;
  n = strtoull (str, NULL, 10);
  if (errno == ERANGE || n > INT64_MAX / scale) {
    log_error ("%s: size '%s' is too large", what, str);
    return -1;
  }
  *r = n * scale;
  return 0;
}

int
config_parse_size_key (const char *key, const char *value, bool allow_zero,
                       uint64_t *r)
{
  char what[256];

  snprintf (what, sizeof what, "%s=%s", key, value);
  if (config_parse_size (what, value, r) == -1)
    return -1;
  if (!allow_zero && *r == 0) {
    log_error ("%s=%s: size must be greater than 0", key, value);
    return -1;
  }
  return 0;
}

int
config_parse_count (const char *key, const char *value, uint32_t *r)
{
  unsigned long n;

  errno = 0;
  n = strtoul (value, NULL, 10);
  if (value[0] == '\0' || value[strspn (value, "0123456789")] != '\0'
      || errno == ERANGE || n > UINT32_MAX || n < 1) {
    log_error ("%s=%s: expected an integer from 1 to %" PRIu32,
               key, value, UINT32_MAX);
    return -1;
  }
  *r = n;
  return 0;
}

int
config_parse_delay (const char *key, const char *value, bool allow_zero,
                    uint64_t *ns)
{
  static const struct { const char *unit; uint64_t scale; } units[] = {
    { "", UINT64_C (1000000000) },
    { "s", UINT64_C (1000000000) },
    { "ms", UINT64_C (1000000) },
    { "us", UINT64_C (1000) },
    { "ns", 1 },
  };
  size_t digits = strspn (value, "0123456789");
  unsigned long long n;
  size_t i;

  if (digits == 0)
    goto bad;
  errno = 0;
  n = strtoull (value, NULL, 10);
  if (errno == ERANGE)
    goto too_large;
  for (i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcmp (value + digits, units[i].unit) == 0) {
      if (n > UINT64_MAX / units[i].scale)
        goto too_large;
      *ns = n * units[i].scale;
      if (!allow_zero && *ns == 0) {
        log_error ("%s=%s: delay must be greater than 0", key, value);
        return -1;
      }
      return 0;
    }
  }
 bad:
  log_error ("%s=%s: expected a delay: an integer with a unit ns, us, "
             "ms or s (a bare integer means seconds)", key, value);
  return -1;
 too_large:
  log_error ("%s=%s: delay is too large", key, value);
  return -1;
}

int
config_parse_bool (const char *key, const char *value, bool *r)
{
  static const char *const yes[] = { "1", "true", "t", "yes", "y", "on" };
  static const char *const no[] = { "0", "false", "f", "no", "n", "off" };
  size_t i;

  for (i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    if (strcasecmp (value, yes[i]) == 0) {
      *r = true;
      return 0;
    }
    if (strcasecmp (value, no[i]) == 0) {
      *r = false;
      return 0;
    }
  }
  log_error ("%s=%s: expected a boolean (true/false, yes/no, on/off, "
             "1/0)", key, value);
  return -1;
}
