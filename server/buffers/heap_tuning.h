/* plugq: glibc malloc settings suited to queued request buffers. */
#ifndef PLUGQ_HEAP_TUNING_H
#define PLUGQ_HEAP_TUNING_H

enum heap_tuning {
  HEAP_TUNED,                   /* plugq's settings are in force */
  HEAP_LEFT_TO_OPERATOR,        /* the environment sets malloc's own */
  HEAP_UNAVAILABLE,             /* not glibc's malloc (sanitizers, musl) */
};

/* Once, before the first request: later calls change nothing new. */
enum heap_tuning heap_tuning_apply (void);

const char *heap_tuning_describe (enum heap_tuning);

#endif /* PLUGQ_HEAP_TUNING_H */
