/* plugq: where a configuration's keys come from: the command line, then
 * the config= file it names, read as if the file's lines came after the
 * command line's keys.
 *
 * A config= file holds the command line's keys, one key=value per line;
 * blank lines and lines whose first non-blank character is # are
 * skipped, and blanks around the key and the value are dropped.  Every
 * error about a line (and later about what it defined) starts with
 * "FILE:LINE: ".
 */
#ifndef PLUGQ_CONFIG_FILE_H
#define PLUGQ_CONFIG_FILE_H

#include <stddef.h>

#include "config_keys.h"

/* The file's keys into r, after what r read already.  0, or -1 after
 * log_error.
 */
int config_read_file (struct config_reader *r, const char *path);

/* The command line's keys (in order), then the config= file among them,
 * into c.  0, or -1 after log_error.
 */
int config_read_sources (struct config *c, const struct key_value *args,
                         size_t nr_args);

#endif /* PLUGQ_CONFIG_FILE_H */
