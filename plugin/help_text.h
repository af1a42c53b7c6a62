/* plugq: the texts "nbdkit plugq --help" prints, built from the tables
 * of backend types and elevators so that they always list all of them.
 */
#ifndef PLUGQ_PLUGIN_HELP_TEXT_H
#define PLUGQ_PLUGIN_HELP_TEXT_H

/* One line per key (nbdkit's .config_help).  Heap string, NULL if out of
 * memory.
 */
char *help_text_keys (void);

/* What the plugin serves (nbdkit's .description).  Heap string, NULL if
 * out of memory.
 */
char *help_text_description (void);

#endif /* PLUGQ_PLUGIN_HELP_TEXT_H */
