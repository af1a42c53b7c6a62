/* plugq: reading configuration keys, one at a time, into a config.
 *
 * The command line (nbdkit .config), a config= file (config_file.h) and
 * the control command `add` use the same reader, so the same key gives
 * the same result and the same message wherever it is written.  Each
 * error is one log_error line naming the key.
 */
#ifndef PLUGQ_CONFIG_KEYS_H
#define PLUGQ_CONFIG_KEYS_H

#include "config_entries.h"

/* Where keys come from: what they may set differs. */
enum config_source {
  CONFIG_SOURCE_COMMAND_LINE,   /* every key */
  CONFIG_SOURCE_FILE,           /* every key but config= */
  CONFIG_SOURCE_COMMAND,        /* `add`: disks, volumes and their keys,
                                 * and queue defaults for what it adds */
};

/* Where queue and backend keys go: the defaults, the last disk=, or
 * nowhere (a volume has no queue and no backend).
 */
enum config_scope { SCOPE_DEFAULTS, SCOPE_DISK, SCOPE_VOLUME };

struct config_reader {
  struct config *config;
  enum config_source source;
  enum config_scope scope;
  struct entry *current;        /* the last disk= or linear= */
  const char *origin;           /* "FILE:LINE" of the key being read, or
                                 * NULL; kept by the entries it defines */
};

void config_reader_init (struct config_reader *, struct config *,
                         enum config_source);

/* One key=value.  0, or -1 after log_error. */
int config_reader_key (struct config_reader *, const char *key,
                       const char *value);

/* The comma-separated members in list (MEMBER[,MEMBER]..., MEMBER =
 * NAME or NAME@OFFSET+LENGTH) of volume name, as linear=NAME:list would
 * read them; key=value starts the messages.  -1 after log_error, with
 * what was read so far in *members for config_free_members.
 */
int config_parse_members (const char *key, const char *value,
                          const char *name, const char *list,
                          struct member **members, size_t *nr);
void config_free_members (struct member *, size_t nr);

#endif /* PLUGQ_CONFIG_KEYS_H */
