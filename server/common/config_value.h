/* plugq: the value syntaxes of configuration keys.
 *
 * Shared by the plugin's own keys, the queue keys and the backends' keys,
 * so that one syntax gives one message whichever key takes it.  Each
 * parser returns 0, or -1 after one log_error line that starts with
 * "key=value" (or with what) and says what was expected.
 */
#ifndef PLUGQ_CONFIG_VALUE_H
#define PLUGQ_CONFIG_VALUE_H

#include <stdbool.h>
#include <stdint.h>

/* SIZE: digits with one optional suffix b, k, M, G, T, P, E (powers of
 * 1024) or s (512), as nbdkit_parse_size reads them, at most INT64_MAX.
 * what starts the message ("memory=1Q", "linear=v:...: offset of ...").
 */
int config_parse_size (const char *what, const char *str, uint64_t *r);

/* SIZE as the value of key; 0 is refused unless allow_zero. */
int config_parse_size_key (const char *key, const char *value,
                           bool allow_zero, uint64_t *r);

/* A count from 1 to UINT32_MAX, plain digits. */
int config_parse_count (const char *key, const char *value, uint32_t *r);

/* DELAY: an integer with a unit ns, us, ms or s; a bare integer means
 * seconds, as nbdkit's delay filter reads its delays.  In nanoseconds;
 * 0 is refused unless allow_zero.
 */
int config_parse_delay (const char *key, const char *value, bool allow_zero,
                        uint64_t *ns);

/* BOOL: the words nbdkit_parse_bool accepts, in any case. */
int config_parse_bool (const char *key, const char *value, bool *r);

#endif /* PLUGQ_CONFIG_VALUE_H */
