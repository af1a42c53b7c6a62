/* plugq: the control commands, from a command line to its answer.
 *
 *   list                                   every disk and volume
 *   add KEY=VALUE...                       disk= or linear= and their keys
 *   remove [--drain|--force] NAME
 *   set NAME QUEUE-KEY=VALUE...
 *   grow VOLUME MEMBER...
 *   reload                                 the config= file again
 *
 * Each runs on the control thread, all or nothing (config_live.h); the
 * engine's errors meanwhile are captured from the log into the answer.
 */
#ifndef PLUGQ_CONTROL_COMMANDS_H
#define PLUGQ_CONTROL_COMMANDS_H

#include <stdio.h>

struct live_config;

/* Runs the command line (its newline removed) and writes the answer to
 * fp: "DATA text" lines, then "OK" or "ERR message", each ending in a
 * newline.
 */
void control_run (struct live_config *, char *line, FILE *fp);

/* The answer to a line the server would not run: "ERR message". */
void control_refuse (FILE *fp, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3)));

#endif /* PLUGQ_CONTROL_COMMANDS_H */
